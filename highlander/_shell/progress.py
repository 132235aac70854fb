"""The save hook's progress reporter: each :meth:`Progress.advance` proves the save moves.

The incumbent turns advances into PROGRESS frames; the newcomer's watchdog
extends its stall deadline only when the counter grows.  ``advance`` may be
called from any thread (the save hook usually runs in a worker thread) and
never blocks on the network: frames are sent by the serving loop, which
always sends the latest state (intermediate steps may be coalesced).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from highlander._core.values import Value


class ProgressState(Value):
    """One snapshot of a save's progress."""

    counter: int
    done: int | None
    total: int | None
    note: str


class Progress:
    """Passed to ``on_save``; call :meth:`advance` after each step of the save."""

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._state = ProgressState(0, None, None, "")
        self._notify = notify

    def advance(self, note: str = "", *, done: int | None = None, total: int | None = None) -> None:
        """Record one more step of the save (thread-safe).

        ``note`` is a short human-readable description (at most 1024
        characters are sent); ``done``/``total`` optionally count units of work.
        """
        with self._lock:
            counter = self._state.counter + 1
            if done is not None and total is not None and done > total:
                total = done
            self._state = ProgressState(counter, done, total, note[:1024])
        if self._notify is not None:
            self._notify()

    @property
    def state(self) -> ProgressState:
        """The latest snapshot."""
        with self._lock:
            return self._state

    @property
    def counter(self) -> int:
        """How many steps have been reported so far."""
        return self.state.counter
