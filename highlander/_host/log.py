"""Structured logs on stderr, never stdout (stdout is the MCP JSON-RPC stream).

Lines are rendered and written on a small daemon thread, not by the
caller: nothing of it may land on a succession's critical path.  While a
claim is in flight (:func:`highlander._host.threads.hold`) lines wait in a
queue; they are written as soon as it ends, and :func:`flush` (called
before the process leaves) writes whatever is left.

Each line carries the time it was logged, not the time it was rendered
(which may be seconds later): lines of several processes merged by
timestamp are then in the order things happened, and an event's line on
stderr has the same time as its record in the event log.

The format is structlog's ``KeyValueRenderer`` (``key=repr(value)``,
``timestamp level event`` first), rendered here with the standard library
(:func:`render`; the test suite checks it against structlog itself):
importing structlog cost every idle holder 1.9 MB of resident memory, most
of its 3 MB budget (issue #16), for what is one line of formatting.
An application's own logging (stdlib or structlog) is left alone.

Nothing here waits on stderr without bound, and nothing grows without bound
when stderr is a pipe nobody reads (an IDE that stopped reading its server's
stderr): at most :data:`MAX_QUEUED` lines wait in the queue; a line waits at
most :data:`STALL_WAIT` for stderr to take it (``poll``, never a blocking
``write`` on a full pipe), and while stderr stays stalled the next lines do
not wait at all.  Lines that cannot be queued or written are dropped and
counted; the count is written as one ``log_lines_dropped`` line as soon as
stderr takes lines again (at the latest when the process flushes its log).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import sys
import threading
import time

from highlander._host.threads import release_holds, start_daemon, wait_for_quiet

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    _Item: TypeAlias = tuple[float, str, str, dict[str, Any]] | threading.Event

_warned: set[str] = set()

#: Lines that may wait to be written; more are dropped and counted.
MAX_QUEUED = 1000
#: How long one line may wait for stderr to take it before it is dropped.
STALL_WAIT = 0.5
#: Longest line written, in bytes: a pipe with room for one more line
#: (``poll`` says writable) then takes it whole without blocking.
MAX_LINE_BYTES = 4096


class _Stalled(Exception):  # noqa: N818 - a condition, caught by the log thread
    """stderr did not take a line in time."""


class _Sink:
    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        #: Lines queued or being written; flush() waits until it is zero.
        self.pending = 0
        #: Lines dropped since the last one written (queue full or stderr stalled).
        self.dropped = 0
        #: stderr did not take the last line: the next ones do not wait for it.
        self.stalled = False
        self.lock = threading.Lock()

    def put(self, item: _Item) -> None:
        if not isinstance(item, threading.Event):
            with self.lock:
                if self.pending >= MAX_QUEUED:
                    self.dropped += 1
                    return
                self.pending += 1
        self.queue.put(item)
        self.start()

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = start_daemon(self.run, "highlander-log")

    def run(self) -> None:
        while True:
            item = self.queue.get()
            wait_for_quiet()  # never compete with a claim for the interpreter
            if isinstance(item, threading.Event):  # flush(): say what was dropped
                with contextlib.suppress(Exception):
                    self.report_dropped()
                item.set()
                continue
            when, level, event, fields = item
            try:
                self.write(when, level, event, fields)
            except _Stalled:
                with self.lock:
                    self.dropped += 1
            except Exception:  # noqa: S110 - a broken stderr must not break us
                pass
            finally:
                with self.lock:
                    self.pending -= 1

    def write(self, when: float, level: str, event: str, fields: dict[str, Any]) -> None:
        """Write one line, after the count of lines dropped before it, if any."""
        if self.stalled and not _takes_lines(sys.stderr, 0.0):
            raise _Stalled  # still stalled: not even worth rendering
        self.report_dropped()
        self.emit_line(render(when, level, event, fields))

    def report_dropped(self) -> None:
        """Write how many lines were dropped since the last one written, if any."""
        with self.lock:
            dropped, self.dropped = self.dropped, 0
        if not dropped:
            return
        fields = {"dropped": dropped, "reason": "stderr was not taking lines"}
        try:
            self.emit_line(render(time.time(), "warning", "log_lines_dropped", fields))
        except BaseException:
            with self.lock:
                self.dropped += dropped  # said nothing: still to be reported
            raise

    def emit_line(self, line: str) -> None:
        """Write one rendered line to the current ``sys.stderr``, or raise :class:`_Stalled`."""
        data = line.encode("utf-8", "backslashreplace")
        if len(data) >= MAX_LINE_BYTES:
            line = data[: MAX_LINE_BYTES - 16].decode("utf-8", "ignore") + "…(cut)"
        stream = sys.stderr
        if not _takes_lines(stream, 0.0 if self.stalled else STALL_WAIT):
            self.stalled = True
            raise _Stalled
        self.stalled = False
        stream.write(line + "\n")
        stream.flush()


_sink = _Sink()


def _reset_after_fork() -> None:
    global _sink  # noqa: PLW0603 - the child must not share the parent's dead thread
    _sink = _Sink()


os.register_at_fork(after_in_child=_reset_after_fork)


def _takes_lines(stream: Any, wait: float) -> bool:
    """Whether ``stream`` can take a line now, waiting up to ``wait`` seconds.

    Only a stream with a descriptor can stall; any other (a test's or an
    application's replacement for ``sys.stderr``) is written to directly.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return True
    import select  # noqa: PLC0415 - on the log thread, off the claim path

    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    try:
        return bool(poller.poll(int(wait * 1000)))
    except OSError:
        return True  # let the write itself fail (and be ignored)


#: Keys every line starts with, in this order; the event's own fields follow.
_FIRST = ("timestamp", "level", "event")


def render(when: float, level: str, event: str, fields: dict[str, Any]) -> str:
    """One line: ``timestamp level event logger`` then ``fields``, each ``key=repr(value)``.

    ``when`` (seconds since the epoch) is written as ISO 8601 UTC with
    microseconds.  Byte for byte what structlog's ``KeyValueRenderer`` with
    that key order made of the same event, so readers of the old lines are
    not broken.
    """
    import datetime  # noqa: PLC0415 - on the log thread, off the claim path

    stamp = datetime.datetime.fromtimestamp(when, tz=datetime.UTC)
    iso = stamp.isoformat(timespec="microseconds").replace("+00:00", "Z")
    rest = {"logger": "highlander", **fields}
    pairs = [("timestamp", iso), ("level", level), ("event", event)]
    pairs += [(key, value) for key, value in rest.items() if key not in _FIRST]
    return " ".join(f"{key}={value!r}" for key, value in pairs)


def log(level: str, event: str, **fields: Any) -> None:
    """Queue one log line (``level`` is ``info`` or ``warning``) for stderr, stamped now."""
    _sink.put((time.time(), level, event, fields))


def log_at(when: float, level: str, event: str, **fields: Any) -> None:
    """Queue one log line stamped ``when`` (seconds since the epoch: the event's own time)."""
    _sink.put((when, level, event, fields))


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
    """Write every queued line and the count of dropped ones to stderr (within ``timeout``)."""
    if _sink.pending == 0 and _sink.dropped == 0:
        return
    done = threading.Event()
    _sink.queue.put(done)
    release_holds()  # leaving: write everything now, hold or not
    _sink.start()
    done.wait(timeout)


# Registered on import, before any release handler, so it runs after all of them.
atexit.register(flush)
