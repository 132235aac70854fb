"""What a newcomer says on stderr while it waits for the holder's save.

Every PROGRESS frame goes into the event log, as it always has; stderr gets
at most one ``progress`` line a second, the first once the save has taken a
second, so a save of a few milliseconds prints nothing and one of minutes
shows it is moving.  Each line is the event log's record, with its time.

A claim holds the log back (:func:`highlander._host.threads.hold`) so rendering
lines never delays a succession.  Waiting for a save that has already taken
a second is not on that clock: the first line lifts the hold
(:func:`highlander._host.threads.pause`) until the save ends, so lines reach
stderr as they are logged, not all at once after the claim.
"""

from __future__ import annotations

import contextlib
import time
from types import TracebackType

from highlander._core.messages import ProgressReport
from highlander._host.event_log import Event, EventLog
from highlander._host.threads import pause

#: Shortest time between two progress lines on stderr, in seconds.
EVERY = 1.0


class SaveEcho:
    """Logs a save's PROGRESS frames: all to the event log, at most one a second to stderr.

    Use as a context manager around the wait: leaving it restores the hold.
    """

    def __init__(self, events: EventLog, peer_pid: int) -> None:
        self.events = events
        self.peer_pid = peer_pid
        # Wall-clock time, as the records' own ``ts``: the gap between two
        # lines is measured on the timestamps they carry.
        self.started = time.time()
        self.last = self.started
        self._exit = contextlib.ExitStack()
        self._lifted = False

    def report(self, step: ProgressReport) -> None:
        """Log one PROGRESS frame; put it on stderr if the last line is a second old."""
        counts = {"done": step.done, "total": step.total}
        record = self.events.note(
            Event.PROGRESS,
            peer_pid=self.peer_pid,
            counter=step.counter,
            note=step.note,
            **{name: value for name, value in counts.items() if value is not None},
            waited_s=round(time.time() - self.started, 1),
        )
        at = float(record["ts"])
        # A clock set back must not silence the lines until it catches up.
        if at - self.last >= EVERY or at < self.last:
            self.last = at
            if not self._lifted:
                self._exit.enter_context(pause())
                self._lifted = True
            self.events.show(Event.PROGRESS, record)

    def __enter__(self) -> SaveEcho:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exit.close()
