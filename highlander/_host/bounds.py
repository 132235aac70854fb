"""Bounds on what a peer can make Highlander write: cut strings, rate-limited causes.

Anything a peer sends can end up in an event (a protocol error quoting a
field, a ``type`` value, a progress note, a refusal's detail), and one event
is a line on stderr and a line in the event log.  Unbounded, a few processes
sending 60 KB strings, or just connecting and closing in a loop, make the
holder write hundreds of megabytes.  So :class:`highlander._host.event_log.EventLog`
passes every event through this module, in one place:

* :func:`bounded_fields` cuts every string field to :data:`CLIP_CHARS`
  characters, with a marker saying how many bytes were cut;
* :class:`RateLimiter` lets through at most :data:`RATE_PER_SECOND` events
  of one cause (event kind and :func:`cause_of` its reason) per one-second
  window and counts the rest; when the window ends, one summary event says
  how many were suppressed and since when.
"""

from __future__ import annotations

import atexit
import enum
import os
import threading
import time
from collections.abc import Callable

from highlander._core.values import Value
from highlander._host.threads import start_daemon

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

#: Longest string field kept whole in an event; longer ones are cut, with a marker.
CLIP_CHARS = 200
#: Events of one cause let through per one-second window; the rest are counted.
RATE_PER_SECOND = 10
#: The rate limiter's window, in seconds.
WINDOW = 1.0
#: Causes tracked at once; beyond this, new causes of a kind share one bucket
#: (an attacker who varies its reason cannot grow the table).
MAX_CAUSES = 64
#: How much of a reason names its cause (see :func:`cause_of`).
_CAUSE_CHARS = 64
_CAUSE_ENDS = frozenset("0123456789'\"[({:")


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and ``…(+N bytes)``."""
    if len(text) <= limit:
        return text
    rest = len(text[limit:].encode("utf-8", "surrogatepass"))
    return f"{text[:limit]}…(+{rest} bytes)"


def bounded_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The event fields as they may be written: enums by value, every string cut.

    Numbers, booleans and ``None`` pass as they are; anything else is written
    as its (cut) ``str``.
    """
    result: dict[str, Any] = {}
    for name, given in fields.items():
        value = given.value if isinstance(given, enum.Enum) else given
        if value is None or isinstance(value, bool | int | float):
            result[name] = value
        else:
            result[name] = clip(value if isinstance(value, str) else str(value))
    return result


def cause_of(fields: dict[str, Any]) -> str:
    """The class of an event's reason: the same cause whatever the peer put in it.

    The deadline ``phase`` if there is one, else the reason's leading words,
    up to the first digit, quote, bracket or colon: ``unknown message type
    'xyz…'`` and ``socket: [Errno 32] Broken pipe`` are the causes ``unknown
    message type`` and ``socket``.
    """
    phase = fields.get("phase")
    if phase is not None:
        return f"phase {phase}"
    reason = fields.get("reason")
    if not isinstance(reason, str):
        return ""
    head = reason[:_CAUSE_CHARS]
    for index, char in enumerate(head):
        if char in _CAUSE_ENDS:
            return head[:index].strip()
    return head.strip()


class Summary(Value):
    """Events of one cause that a window suppressed: how many, since when, and the first."""

    kind: str
    cause: str
    suppressed: int
    #: Wall-clock time of the first suppressed event.
    since: float
    #: The first suppressed event's reason (or phase) fields, already cut.
    sample: dict[str, Any]

    def fields(self) -> dict[str, Any]:
        """The summary event's fields: the sample, ``suppressed``, ``since`` and a sentence."""
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        return {
            **self.sample,
            "suppressed": self.suppressed,
            "since": self.since,
            "summary": f"{self.suppressed} more since {when}",
        }


class _Window:
    __slots__ = ("count", "sample", "since", "start", "suppressed")

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0
        self.suppressed = 0
        self.since = 0.0
        self.sample: dict[str, Any] = {}


class RateLimiter:
    """At most ``per_second`` events per cause in each window; the rest counted and summarised.

    :meth:`admit` says whether an event goes out.  Suppressed events are
    reported through ``report`` as one :class:`Summary` per cause and window:
    from :meth:`admit` when the next event of that cause arrives after its
    window, or from a daemon thread when the window ends while all is quiet,
    or at interpreter exit (:func:`report_all_suppressed`).  Thread-safe.
    """

    def __init__(
        self,
        report: Callable[[Summary], None],
        *,
        per_second: int = RATE_PER_SECOND,
        window: float = WINDOW,
        max_causes: int = MAX_CAUSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.report = report
        self.per_second = per_second
        self.window = window
        self.max_causes = max_causes
        self.clock = clock
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._windows: dict[tuple[str, str], _Window] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def admit(self, kind: str, fields: dict[str, Any]) -> bool:
        """Whether an event of ``kind`` with ``fields`` (already bounded) may be written now."""
        if os.getpid() != self._pid:
            # A forked child: the parent's lock may have been held at the fork,
            # and its thread is not here.  Its counts are the parent's to report.
            self._reset()
        now = self.clock()
        with self._lock:
            key = self._key(kind, cause_of(fields), now)
            window = self._windows.get(key)
            ended = None
            if window is None or now - window.start >= self.window:
                if window is not None and window.suppressed:
                    ended = self._summary(key, window)
                window = self._windows[key] = _Window(now)
            window.count += 1
            admitted = window.count <= self.per_second
            if not admitted:
                if window.suppressed == 0:
                    window.since = time.time()
                    window.sample = {k: fields[k] for k in ("phase", "reason") if k in fields}
                    _pending.add(self)
                    self._ensure_thread()
                    self._wake.notify()
                window.suppressed += 1
        if ended is not None:
            self.report(ended)
        return admitted

    def report_due(self, *, everything: bool = False) -> None:
        """Report the summaries of ended windows (of every window, with ``everything``)."""
        with self._lock:
            due, _ = self._collect(everything)
        for summary in due:
            self.report(summary)

    def _collect(self, everything: bool) -> tuple[list[Summary], float | None]:
        """Take the summaries due now; also say when the next pending window ends.

        Called with the lock held.  Windows that ended with nothing suppressed
        are forgotten, so the table only holds causes seen in the last window.
        """
        now, next_end = self.clock(), None
        due: list[Summary] = []
        for key, window in list(self._windows.items()):
            end = window.start + self.window
            if window.suppressed and (everything or now >= end):
                due.append(self._summary(key, window))
                window.suppressed = 0
            elif window.suppressed:
                next_end = end if next_end is None else min(next_end, end)
            elif now >= end:
                del self._windows[key]
        if next_end is None:
            _pending.discard(self)  # nothing left to summarise
        return due, next_end

    def _key(self, kind: str, cause: str, now: float) -> tuple[str, str]:
        key = (kind, cause)
        if key in self._windows or len(self._windows) < self.max_causes:
            return key
        for old, window in list(self._windows.items()):
            if not window.suppressed and now - window.start >= self.window:
                del self._windows[old]
        return key if len(self._windows) < self.max_causes else (kind, "*")

    @staticmethod
    def _summary(key: tuple[str, str], window: _Window) -> Summary:
        return Summary(key[0], key[1], window.suppressed, window.since, window.sample)

    def _ensure_thread(self) -> None:
        # A forked child inherits the attribute but not the thread.
        if self._thread is None or not self._thread.is_alive():
            self._thread = start_daemon(self._run, "highlander-summaries", after_claims=False)

    def _run(self) -> None:
        while True:
            with self._lock:
                # Collecting and waiting under one hold of the lock: a
                # suppression that notifies in between cannot be missed.
                due, next_end = self._collect(everything=False)
                if not due:
                    timeout = None if next_end is None else max(0.0, next_end - self.clock())
                    self._wake.wait(timeout)
                    continue
            for summary in due:
                self.report(summary)


#: Limiters with suppressed events not yet summarised (only those: no weakref
#: import on the claim path, and no limiter kept alive once it has said all).
_pending: set[RateLimiter] = set()


def report_all_suppressed() -> None:
    """Report every pending summary now (the process is leaving)."""
    for limiter in list(_pending):
        limiter.report_due(everything=True)


# Registered after highlander._host.log's flush (imported first), so it runs before it.
atexit.register(report_all_suppressed)
