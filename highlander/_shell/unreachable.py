"""Ending a holder that nobody can reach, or saying why it cannot be ended.

The lock is held, but nobody listens on the socket path (or the queue of
connections stays full) for longer than the newcomer's patience allows
(:mod:`highlander._core.policy` decides when).  What stands at the path may
make that nobody's fault: a directory there is named, never answered with a
kill.  Otherwise the holder named by the record is verified and ended
(:mod:`highlander._host.termination`), but only if it is still the holder the
patience ran out under.  A lock that outlived that holder (it passed the
lock on with SAVED, to a newcomer now stopped) is named, never signalled.
"""

from __future__ import annotations

import os

from highlander._core.errors import IncumbentUnreachableError
from highlander._host.event_log import Event
from highlander._host.identity import flock_held, gone, is_halted
from highlander._host.record import read_record
from highlander._host.settings import Settings
from highlander._host.termination import terminate
from highlander._host.waiting import Waiter
from highlander._shell.observe import record_target
from highlander._shell.one_claim import claimed_twice
from highlander._shell.time_limit import check, unlimited
from highlander._shell.watch import in_the_way


def blocked_error(settings: Settings, blocker: str) -> IncumbentUnreachableError:
    """The one line for a socket path that something nobody can replace stands on."""
    return IncumbentUnreachableError(
        f"{settings.paths.socket} is {blocker}, so nobody can reach the holder: remove "
        f"it (rmdir {settings.paths.socket}) and the holder publishes its socket again"
    )


def handed_on_error(settings: Settings, pid: int) -> IncumbentUnreachableError:
    """The one line for a lock that outlived the holder its record names."""
    return IncumbentUnreachableError(
        f"the project's lock is still held, but the holder its record names (pid {pid}) has "
        f"exited and nobody answers on {settings.paths.socket}: a process it passed the lock "
        "to holds it (a newcomer stopped in the middle of a handover, most likely). "
        "Highlander will not signal a process no record names: resume it (kill -CONT; it "
        f"then takes over with the saved state) or end it; `fuser -v {settings.paths.lock}` "
        "names it"
    )


async def end_unreachable_holder(
    settings: Settings, waiter: Waiter, *, queue_full: bool, seen: tuple[int, int] | None
) -> None:
    """The lock is held but nobody listens (or accepts): end the verified holder, or explain.

    ``seen`` is the (pid, generation) of the record the patience ran out
    under, ``None`` if there was none: a holder that claimed since (a
    successor that has not published its socket yet) is not the one that
    kept us waiting, and is left alone.
    """
    blocker = None if queue_full else in_the_way(settings.paths.socket)
    if blocker is not None:
        raise blocked_error(settings, blocker)  # the holder cannot publish over it; not hung
    record = read_record(settings.paths.state)
    if record is not None and (record.pid, record.generation) != seen:
        # A new reign began meanwhile (also when the patience ran out under no
        # readable record: a claimer writes its record right after binding, so a
        # record that appeared is a live holder, chaos seed 3): look at it afresh.
        return
    target = record_target(settings, record)
    why = "queue full" if queue_full else "no socket"
    settings.events.emit(Event.UNREACHABLE, socket=settings.paths.socket, reason=why)
    if target is None:
        raise IncumbentUnreachableError(
            f"a process holds the project's lock but nobody answers on {settings.paths.socket} "
            "and its record is missing: find it with `fuser` on the .lock file and stop it"
        )
    if target.pid == os.getpid():
        raise claimed_twice(settings)
    check(waiter)
    if gone(target.pid, target.start_time) and flock_held(settings.paths.lock):
        # Its lock outlived it: a process it passed the lock to holds it.  A running
        # successor commits within exit_grace of the end; look once more after that.
        await waiter.sleep(settings.timeouts.exit_grace)
        again = read_record(settings.paths.state)
        if again is not None and (again.pid, again.generation) != seen:
            return
        if flock_held(settings.paths.lock):
            raise handed_on_error(settings, target.pid)
        return
    settings.events.emit(Event.HUNG, peer_pid=target.pid, phase="queue" if queue_full else "socket")
    halted = is_halted(target.pid)
    await terminate(
        target, settings.timeouts, settings.events, why, unlimited(waiter), halted=halted
    )
