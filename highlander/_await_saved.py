"""The newcomer waiting for SAVED: progress reports, and a starved saver spared.

A holder's save reports PROGRESS; one that stops advancing for ``stall`` is
hung.  But on a loaded machine a healthy saver can be kept off the CPU past
``stall`` (guarantee 8: a healthy holder is never signalled because the
machine is loaded).  So when the stall deadline passes, the kernel is asked:
a holder that is running or waiting for a CPU or the disk, and used less
than ``stall`` of CPU meanwhile, was starved; its stall timer restarts
(``timeout`` event, ``busy=True``).  The absolute ``ceiling`` still holds.
Meanwhile the save's progress goes to the event log, and at most once a
second to stderr (:mod:`highlander._live`).
"""

from __future__ import annotations

from highlander._client import Greeting
from highlander._connection import Closed
from highlander._deadlines import Phase, starved
from highlander._events import Event
from highlander._identity import run_state
from highlander._live import LiveProgress
from highlander._messages import Message, ProgressReport
from highlander._settings import Settings
from highlander._wire import Overdue, receive_event


async def await_saved(settings: Settings, greeting: Greeting, fds: list[int]) -> Message | Closed:
    """The incumbent's answer to SAVE after its progress reports; raises :class:`Overdue`."""
    events, conn, peer, waiter = settings.events, greeting.conn, greeting.peer, greeting.waiter
    before = run_state(peer.pid, threads=False)
    with LiveProgress(events, peer.pid) as live:
        while True:
            try:
                event = await receive_event(greeting.sock, conn, waiter, fds)
            except Overdue as exc:
                after = run_state(peer.pid)
                stall = settings.timeouts.stall
                if exc.deadline.phase is not Phase.STALL or not starved(before, after, stall):
                    raise
                conn.spare(waiter.now())
                events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="stall", busy=True)
                before = after
                continue
            if not isinstance(event, ProgressReport):
                return event
            live.report(event)
            before = run_state(peer.pid, threads=False)
