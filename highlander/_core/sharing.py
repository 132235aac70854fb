"""Share, succeed or refuse: the pure rules of share mode (docs/mcp.md).

A second client of a project starts a second server.  With share mode on,
that newcomer need not replace the holder: if the holder serves attached
sessions, runs the same configuration and a build at least as new, the
newcomer asks to ATTACH and becomes a relay between its client and the one
server.  The decision is taken twice from the same rules: by the newcomer,
from the holder's HELLO (:func:`newcomer_chooses`), and again by the holder,
from the ATTACH (:func:`incumbent_admits`), so neither side trusts the
other's reading.

* **Holders that do not share** say nothing of their build; a newcomer
  succeeds them as without share mode (``only``: refuses to start), once
  they have held for :data:`SETTLED` seconds (a new holder's server starts
  sharing a moment after its claim).
* **Builds.** A newer build succeeds (an upgrade: today's handover); the
  same or an older one shares.  Versions compare by their leading dotted
  numbers (``1.10.0`` is newer than ``1.9.2``); two builds that differ but
  do not compare (``1.2rc1`` against ``1.2``, or two content hashes) count
  as an upgrade, since the most recent start carries the most recent code,
  as without share mode.
* **Fingerprints.** Two servers configured differently (command, working
  directory, environment: :mod:`highlander._host.fingerprint`) must not
  serve each other's clients: the newcomer succeeds instead, with the
  reason logged, or with ``only`` refuses to start.

Pure code: no I/O, no clock.
"""

from __future__ import annotations

import enum

from highlander._core.errors import Reason
from highlander._core.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._core.messages import Attach, Hello


class ShareMode(enum.StrEnum):
    """Whether a newcomer may attach: ``off`` (succession only), ``on``, ``only``."""

    OFF = "off"
    ON = "on"
    #: Attach or refuse to start; never replace a holder that could not share.
    ONLY = "only"


class Build(Value):
    """What a server says about itself: its build version and configuration fingerprint."""

    version: str
    fingerprint: str


class Choice(enum.Enum):
    """What the newcomer does with a verified HELLO."""

    ATTACH = "attach"
    SUCCEED = "succeed"
    REFUSE = "refuse"
    #: A holder that may not have started sharing yet: ask it again shortly.
    WAIT = "wait"


#: How long a holder may take from its claim to serving attached sessions, in seconds.
SETTLED = 2.0


class Verdict(Value):
    """The newcomer's choice, and why it does not attach (``None``: share mode off)."""

    choice: Choice
    reason: Reason | None = None


def compare(ours: str, theirs: str) -> int | None:
    """-1, 0 or 1 as build ``ours`` is older than, the same as or newer than ``theirs``.

    ``None``: they differ and do not compare (see the module docstring).
    """
    if ours == theirs:
        return 0
    left, right = _parsed(ours), _parsed(theirs)
    if left is None or right is None:
        return None  # not versions
    if left[0] == right[0]:
        return 0 if left[1] == right[1] else None  # 1.2 is 1.2.0; 1.2rc1 is not ordered
    return 1 if left[0] > right[0] else -1


def _parsed(version: str) -> tuple[tuple[int, ...], str] | None:
    """The leading dotted numbers of ``version`` (trailing zeros dropped) and the rest."""
    parts: list[int] = []
    rest = ""
    pieces = version.split(".")
    for at, part in enumerate(pieces):
        digits = len(part) - len(part.lstrip("0123456789"))
        if digits == 0:
            rest = ".".join(pieces[at:])
            break
        parts.append(int(part[:digits]))
        if digits < len(part):
            rest = ".".join([part[digits:], *pieces[at + 1 :]])
            break
    if not parts:
        return None
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts), rest


def _newer(newcomer: str, holder: str) -> bool:
    """Whether the newcomer's build replaces the holder's (an upgrade)."""
    order = compare(newcomer, holder)
    return order is None or order > 0


def newcomer_chooses(
    mode: ShareMode, ours: Build, hello: Hello, held_for: float = SETTLED
) -> Verdict:
    """Attach to the holder that sent ``hello``, succeed it, wait, or refuse to start.

    ``held_for``: seconds since that holder's reign began (HELLO's
    ``since_ms`` against our clock).  A holder that does not share yet but
    has held for less than :data:`SETTLED` may be about to (its server
    starts serving attached sessions after ``ensure_singleton`` returned:
    relays that re-attach after a holder change arrive in that window), so
    the newcomer asks again (:attr:`Choice.WAIT`) rather than replace it.
    """
    if mode is ShareMode.OFF:
        return Verdict(Choice.SUCCEED)
    if not hello.shares and 0 <= held_for < SETTLED:
        return Verdict(Choice.WAIT)
    if not hello.shares:
        return _cannot(mode, Reason.NO_SHARE)  # its build is not said: it does not share
    if _newer(ours.version, hello.build):
        return Verdict(Choice.SUCCEED, Reason.NEWER)
    if hello.fingerprint != ours.fingerprint:
        return _cannot(mode, Reason.FINGERPRINT)
    return Verdict(Choice.ATTACH)


def _cannot(mode: ShareMode, why: Reason) -> Verdict:
    return Verdict(Choice.REFUSE if mode is ShareMode.ONLY else Choice.SUCCEED, why)


def incumbent_admits(
    shares: bool, app: str, ours: Build, attach: Attach, *, leaving: bool = False
) -> Reason | None:
    """Why the holder refuses ``attach`` (``None``: it serves the newcomer's client).

    ``leaving``: the holder's own client left and it waits for a successor
    (promotion, docs/mcp.md): every ATTACH is told to succeed it instead.
    """
    if not shares:
        return Reason.NO_SHARE
    if leaving:
        return Reason.LEAVING
    if attach.app != app:
        return Reason.OTHER_APP
    if _newer(attach.build, ours.version):
        return Reason.NEWER
    if attach.fingerprint != ours.fingerprint:
        return Reason.FINGERPRINT
    return None


#: What each refusal means, for events and errors (names the fix).
EXPLAINED: dict[Reason, str] = {
    Reason.NO_SHARE: (
        "the holder serves no attached sessions (share mode off there, or its server "
        "does not run highlander.mcp.serve)"
    ),
    Reason.FINGERPRINT: (
        "the holder runs another configuration (command, working directory or "
        "environment differ: docs/mcp.md, 'The configuration fingerprint')"
    ),
    Reason.NEWER: "this build is newer than the holder's: an upgrade replaces it",
    Reason.OTHER_APP: "the holder is another app",
    Reason.LEAVING: "the holder's own client left: this server takes over its sessions",
}


def succeeds_anyway(reason: Reason) -> bool:
    """Whether a refused ATTACH still lets a share ``only`` newcomer succeed the holder.

    Only a leaving holder's: it asks for a successor, so replacing it is
    sharing (the promotion of one of its relays), not the replacement of a
    holder that could have shared.
    """
    return reason is Reason.LEAVING
