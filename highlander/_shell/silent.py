"""A holder that was connected to but sent no HELLO, on one machine: what it means.

Decided from the holder's record and the kernel, never from a guess: a
successor still settling in (a transition), one that claimed after we
connected (fresh), one the machine kept off the CPU (starved), or one that
missed its HELLO deadline.
"""

from __future__ import annotations

import os

from highlander._core.deadlines import Phase
from highlander._core.errors import ForeignHolderError
from highlander._core.findings import Changed, Setback, Transition
from highlander._host.identity import holds_lock
from highlander._host.settings import Settings
from highlander._shell.client import Silent
from highlander._shell.one_claim import claimed_twice
from highlander._shell.setbacks import HolderFresh, HolderMissed, HolderStarved


def local_silent(settings: Settings, greeting: Silent, connected_ms: int) -> Setback:
    """Connected at ``connected_ms`` (wall ms), but no HELLO: what the attempt found."""
    if greeting.closed:
        return Changed()
    from highlander._host.record import read_record  # noqa: PLC0415 - a silent holder is rare
    from highlander._shell.observe import record_target  # noqa: PLC0415

    record = read_record(settings.paths.state)
    target = record_target(settings, record)
    if target is None or record is None:
        raise ForeignHolderError(
            f"pid {greeting.pid} listens on {settings.paths.socket} without answering, "
            "and no holder's record names it: Highlander will not signal it"
        )
    if target.pid == os.getpid():
        raise claimed_twice(settings)
    if target.pid != greeting.pid or not holds_lock(target.pid, settings.paths.lock):
        # Either a successor serves the inherited listener before its record
        # exists, or the recorded holder has committed a handover (it let go
        # of the lock) and its successor has not taken the listener yet.
        return Transition(greeting.pid, target.pid)
    if record.since_ms >= connected_ms:
        return HolderFresh(record.generation, target=target)
    if greeting.busy:
        return HolderStarved(target=target)
    return HolderMissed(Phase.HELLO.value, greeting.halted, target=target)
