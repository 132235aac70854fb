"""Structured logs on stderr, never stdout (stdout is the MCP JSON-RPC stream).

Lines are rendered by structlog on a small daemon thread, not by the caller:
importing and configuring structlog costs tens of milliseconds, which must
not land on a succession's critical path.  While a claim is in flight
(:func:`highlander._threads.hold`) lines wait in a queue; they are written as
soon as it ends, and :func:`flush` (called before the process leaves) writes
whatever is left.

The application's own structlog configuration is left alone: this module
wraps its own logger instead of calling ``structlog.configure``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading

from highlander._threads import release_holds, start_daemon, wait_for_quiet

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    _Item: TypeAlias = tuple[str, str, dict[str, Any]] | threading.Event

_warned: set[str] = set()


class _Sink:
    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        #: Lines queued or being written; flush() waits until it is zero.
        self.pending = 0
        self.lock = threading.Lock()

    def put(self, item: _Item) -> None:
        if not isinstance(item, threading.Event):
            with self.lock:
                self.pending += 1
        self.queue.put(item)
        self.start()

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = start_daemon(self.run, "highlander-log")

    def run(self) -> None:
        logger = get_logger()
        while True:
            item = self.queue.get()
            wait_for_quiet()  # never compete with a claim for the interpreter
            if isinstance(item, threading.Event):
                item.set()
                continue
            level, event, fields = item
            try:
                with contextlib.suppress(Exception):  # a broken stderr must not break us
                    getattr(logger, level)(event, **fields)
            finally:
                with self.lock:
                    self.pending -= 1


_sink = _Sink()


def _reset_after_fork() -> None:
    global _sink  # noqa: PLW0603 - the child must not share the parent's dead thread
    _sink = _Sink()


os.register_at_fork(after_in_child=_reset_after_fork)


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is now (tests and apps may replace it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def get_logger() -> Any:
    """Return a structlog logger that writes one key=value line per event to stderr."""
    import structlog  # noqa: PLC0415 - lazy: imported on the log thread

    return structlog.wrap_logger(
        structlog.PrintLogger(file=_CurrentStderr()),  # type: ignore[arg-type]
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"]),
        ],
        context_class=dict,
    ).bind(logger="highlander")


def log(level: str, event: str, **fields: Any) -> None:
    """Queue one log line (``level`` is ``info`` or ``warning``) for stderr."""
    _sink.put((level, event, fields))


def warn_once(key: str, event: str, **fields: Any) -> bool:
    """Log ``event`` as a warning the first time ``key`` is seen in this process.

    Returns whether it was logged.
    """
    if key in _warned:
        return False
    _warned.add(key)
    log("warning", event, **fields)
    return True


def flush(timeout: float = 2.0) -> None:
    """Write every queued line to stderr (bounded by ``timeout``)."""
    if _sink.pending == 0:
        return
    done = threading.Event()
    _sink.queue.put(done)
    release_holds()  # leaving: write everything now, hold or not
    _sink.start()
    done.wait(timeout)


# Registered on import, before any release handler, so it runs after all of them.
atexit.register(flush)
