"""Background threads that never make their starter wait.

``Thread.start()`` returns only once the new thread runs; if that thread goes
straight into CPU work (Highlander's serving side imports the event loop and
the protocol), it holds the GIL and its starter waits up to the switch
interval (5 ms) to continue.  A thread started here first sleeps for zero
seconds, which hands the GIL straight back: the claim returns at once and
the background work proceeds in the caller's gaps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def start_daemon(target: Callable[[], object], name: str) -> threading.Thread:
    """Start ``target`` on a daemon thread called ``name`` that lets its starter go first."""

    def run() -> None:
        time.sleep(0)
        target()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
