"""``_log.flush()`` must wait for the line the log thread is writing, not only for queued ones.

Found by tests/cli/test_mcp_e2e.py: a ``highlander run`` wrapper whose child
exited normally sometimes died with SIGABRT ("Fatal Python error:
_enter_buffered_busy: could not acquire lock for <_io.BufferedWriter
name='<stderr>'> at interpreter shutdown, possibly due to daemon threads")
instead of exiting with the child's status 0. ``release()`` logs
``released``; the atexit ``flush()`` sees an empty queue (the log thread has
already taken the line and is still writing it) and returns at once, so the
interpreter finalizes while the daemon thread holds stderr's lock. Fixed by
counting lines in flight (``_Sink.pending``); this test keeps it fixed.
"""

from __future__ import annotations

import sys
import threading

import pytest

from highlander._host import log as _log

#: Hang guard for the waits below (not a performance assertion).
WAIT = 10.0


class BlockingStderr:
    """A stderr whose first write blocks until released, recording that it finished."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()

    def write(self, text: str) -> int:
        self.entered.set()
        self.release.wait(WAIT)
        self.finished.set()
        return len(text)

    def flush(self) -> None:
        pass


def test_flush_waits_for_the_line_being_written(monkeypatch: pytest.MonkeyPatch) -> None:
    _log.flush(timeout=WAIT)  # nothing else in flight
    stderr = BlockingStderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    try:
        _log.log("info", "released")
        assert stderr.entered.wait(WAIT)  # the log thread took the line and is writing it
        # Released a moment after flush() starts waiting; a correct flush() waits for it.
        threading.Timer(0.2, stderr.release.set).start()
        _log.flush(timeout=WAIT)
        assert stderr.finished.is_set(), "flush() returned while the line was still being written"
    finally:
        stderr.release.set()
        stderr.finished.wait(WAIT)
