"""After a succession: see that the deposed holder leaves, off the successor's critical path.

A committed incumbent lets go of the lock and listener, then ends the
conversation's stream, and only then runs its ``on_deposed``
(:mod:`highlander._shell.incumbent`).  The end of the stream with the kernel
showing the lock file closed is the commit's answer
(:mod:`highlander._core.commit`), so the successor holds the project at
once instead of waiting for the deposed process's hook and its exit.

The deposed process still owes its exit within ``exit_grace``: a server
that lingers keeps its memory and open files, which is what Highlander is
for.  So the successor's serving side waits for that exit on a pidfd (the
kernel says when it is gone: no polling) and, past the grace, ends it by
the backend's fence (locally the verified kill).  A deposed process that
the machine keeps off the CPU gets its grace restarted by the rule that
applies before the commit (:func:`~highlander._core.deadlines.grace_again`).  It holds nothing
any more, so none of this can give the project to anyone.
"""

from __future__ import annotations

import os

from highlander._core.deadlines import Phase, grace_again
from highlander._core.errors import HighlanderError
from highlander._host.event_log import Event
from highlander._host.identity import Expected, gone, is_halted, run_state

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._shell.incumbent import Incumbent


async def see_out(incumbent: Incumbent, target: Expected) -> None:
    """Wait for the deposed ``target`` to exit; end it if it lingers past ``exit_grace``.

    A serving task of the successor's reign; never raises (the reign must
    not end over its predecessor).
    """
    settings, runtime = incumbent.settings, incumbent.runtime
    events = settings.events
    try:
        if await _exits(incumbent, target):
            return
        events.emit(Event.HUNG, peer_pid=target.pid, phase=Phase.EXIT.value)
        halted = is_halted(target.pid)
        why = "missed exit after the handover"
        if await incumbent.backend.fence(target, settings, why, runtime, halted=halted):
            return
        # Spared: it ran again right before the signal.  One more grace, then for good.
        if not await _exits(incumbent, target):
            await incumbent.backend.fence(target, settings, why, runtime, halted=False)
    except HighlanderError as exc:  # failed verification: it is not ours to signal
        events.emit(Event.IDENTITY_MISMATCH, peer_pid=target.pid, reason=str(exc))
    except OSError as exc:  # no descriptor for a pidfd, say: it holds nothing, let it be
        events.emit(Event.TIMEOUT, peer_pid=target.pid, phase="exit", reason=str(exc))


async def _exits(incumbent: Incumbent, target: Expected) -> bool:
    """Whether ``target`` exits within ``exit_grace`` (restarted while it is starved)."""
    runtime, limit = incumbent.runtime, incumbent.settings.timeouts.exit_grace
    try:
        fd = os.pidfd_open(target.pid)
    except ProcessLookupError:
        return True
    try:
        if gone(target.pid, target.start_time):
            return True  # gone, and its pid already reused
        began, before = runtime.now(), run_state(target.pid, threads=False)
        while not await runtime.readable(fd, limit):
            after = run_state(target.pid)
            if not grace_again(before, after, runtime.now() - began, limit):
                return False
            incumbent.settings.events.emit(
                Event.TIMEOUT, peer_pid=target.pid, phase="exit", busy=True
            )
            before = after
        return True
    finally:
        os.close(fd)
