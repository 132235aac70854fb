"""Background threads that stay out of a claim's way.

Highlander's background work (rendering and writing log lines, the
serving side's imports, the OBSERVE/WARN probe) is CPU work that holds the
GIL.  Started during a claim, it would make the claiming thread wait up to
the interpreter's switch interval (5 ms) every time that thread blocks, even
briefly, as ``Thread.start()`` itself does.  So:

* :func:`hold` marks a claim in flight; background threads that can wait
  (the log, the probe) wait, bounded, until no claim is;
* :func:`pause` lets them run inside a hold, while the claim itself waits on
  another process for longer than their work takes (a holder's slow save);
* a thread from :func:`start_daemon` first sleeps for zero seconds, which
  hands the GIL straight back to the thread that started it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

#: A stuck claim must not silence the log or stop serving forever.
HOLD_LIMIT = 5.0


class _Gate:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds = 0
        #: Pauses of the holds in force (:func:`pause`).
        self.paused = 0
        #: Set while no claim is in flight, or one is paused.
        self.open = threading.Event()
        self.open.set()


_gate = _Gate()


def _reset_after_fork() -> None:
    global _gate  # noqa: PLW0603 - a hold in another thread of the parent does not exist here
    _gate = _Gate()


os.register_at_fork(after_in_child=_reset_after_fork)


@contextlib.contextmanager
def hold() -> Iterator[None]:
    """Keep background work waiting while the block runs (a latency-critical claim)."""
    gate = _gate
    with gate.lock:
        gate.holds += 1
        if not gate.paused:
            gate.open.clear()
    try:
        yield
    finally:
        with gate.lock:
            gate.holds -= 1
            if gate.holds == 0:
                gate.open.set()


@contextlib.contextmanager
def pause() -> Iterator[None]:
    """Let background work run while the block runs, hold or not.

    For a claim that waits on another process (a holder's save, seconds
    long): the log lines it writes meanwhile should reach stderr as they
    happen, and rendering them cannot slow a wait that is not ours.
    """
    gate = _gate
    with gate.lock:
        gate.paused += 1
        gate.open.set()
    try:
        yield
    finally:
        with gate.lock:
            gate.paused -= 1
            if gate.holds and not gate.paused:
                gate.open.clear()


def release_holds() -> None:
    """Let background work run now, hold or not (the process is leaving)."""
    _gate.open.set()


def wait_for_quiet(timeout: float = HOLD_LIMIT) -> None:
    """Wait until no claim is in flight (at most ``timeout`` seconds)."""
    _gate.open.wait(timeout)


def start_daemon(
    target: Callable[[], object], name: str, *, after_claims: bool = True, settle: bool = False
) -> threading.Thread:
    """Start ``target`` on a daemon thread that lets its starter go first.

    With ``after_claims`` it also waits (bounded) until no claim is in flight.
    A holder's serving thread must not: it has to answer newcomers in time
    even while the same process claims another project.  ``settle``: the
    work ends by itself (the OBSERVE/WARN probe); at exit the interpreter
    waits for it, bounded (:func:`settle_threads`).
    """

    def run() -> None:
        try:
            time.sleep(0)
            if after_claims:
                wait_for_quiet()
            target()
        finally:
            _settling.discard(thread)

    thread = threading.Thread(target=run, name=name, daemon=True)
    if settle:
        _wait_at_exit(thread)
    thread.start()
    return thread


#: Daemon threads still at work that the interpreter must not be torn down under.
_settling: set[threading.Thread] = set()
#: At exit, how long the process waits for them, all together.
SETTLE_LIMIT = 5.0


def _wait_at_exit(thread: threading.Thread) -> None:
    import atexit  # noqa: PLC0415 - only a process that starts such a thread

    # (Re)registered now, after the log's flush (registered at import), so it
    # runs before it: what these threads log on their way out is flushed.
    atexit.unregister(settle_threads)
    atexit.register(settle_threads)
    _settling.add(thread)


def settle_threads(limit: float = SETTLE_LIMIT) -> None:
    """Wait (at most ``limit`` seconds in all) for the threads started with ``settle``.

    Run at exit: a daemon thread that is still importing or running Python
    code while the interpreter shuts down crashes CPython 3.11 now and then
    (SIGSEGV or abort, in the import lock or the garbage collector).
    """
    deadline = time.monotonic() + limit
    for thread in list(_settling):
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
