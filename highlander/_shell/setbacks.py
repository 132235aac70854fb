"""The policy's setbacks that name a verified holder, with who it is (for a backend's fence).

The pure policy (:mod:`highlander._core.policy`) decides from what an attempt
found; these add the process a fence may act on (locally the verified kill
of :mod:`highlander._host.termination`; over etcd the holder's reign).
"""

from __future__ import annotations

from highlander._core.findings import Fresh, Missed, Starved, Unseen
from highlander._host.identity import Expected


class HolderMissed(Missed):
    """A verified holder missed a deadline: :class:`~highlander._core.findings.Missed`, and who."""

    target: Expected


class HolderFresh(Fresh):
    """A silent holder that claimed after we connected, and who it is."""

    target: Expected


class HolderStarved(Starved):
    """A silent holder the kernel showed working (a loaded machine), and who it is."""

    target: Expected


class HolderUnseen(Unseen):
    """A silent holder on another host whose claim is kept alive, and who it is."""

    target: Expected
