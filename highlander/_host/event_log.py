"""Decisions as events: one key=value line on stderr and one JSON line on disk.

Every decision Highlander takes is an :class:`Event` kind with context (pid,
peer pid, generation, mode, duration, reason).  The per-project log
``<name>.events.jsonl`` is append-only; each line is written with a single
``write`` on an ``O_APPEND`` descriptor, so concurrent processes never
interleave within a line.  When it grows past ``max_bytes`` it is rotated to
``.1`` (one old generation kept) by whoever notices first.  The file is
opened without trust (:mod:`highlander._host.files`): if something other than our
own regular file sits at its name, events go to stderr only, with one
warning naming the file and the fix.

What a peer can put into an event is bounded here, in :meth:`EventLog.emit`,
for every event (:mod:`highlander._host.bounds`): each string field is cut to a
few hundred characters, and the kinds a peer can provoke at will (the
rejections in :data:`RATE_LIMITED`) are rate-limited per cause, the
suppressed ones counted in one summary event (``suppressed=N``).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import time

from highlander._core.errors import HighlanderError
from highlander._host.bounds import RateLimiter, Summary, bounded_fields
from highlander._host.files import open_regular
from highlander._host.log import log_at, warn_once

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

DEFAULT_MAX_BYTES = 1024 * 1024


class Event(enum.StrEnum):
    """The kinds of decision Highlander logs."""

    DETECTED = "detected"  # a newcomer found a live holder
    DUPLICATE = "duplicate"  # OBSERVE/WARN: running alongside the holder
    HELLO = "hello"
    SAVE_REQUESTED = "save_requested"
    PROGRESS = "progress"
    SAVED = "saved"
    ACKED = "acked"
    HANDOVER_ABORTED = "handover_aborted"  # the incumbent kept the project after SAVED
    RELINQUISHED = "relinquished"  # the deposed incumbent gave the project up
    RESUMED = "resumed"  # (etcd) the incumbent's commit did not apply: it holds again
    CLAIMED = "claimed"
    STALE_CLEARED = "stale_cleared"  # a dead holder's socket file was replaced
    RELEASED = "released"  # the holder gave the project up without a successor
    BUSY = "busy"
    REFUSED = "refused"
    AUTH_FAILED = "auth_failed"
    PROTOCOL_ERROR = "protocol_error"
    THRASH = "thrash"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    IDENTITY_MISMATCH = "identity_mismatch"
    FOREIGN_LISTENER = "foreign_listener"  # a non-Highlander process listens on our path
    HUNG = "hung"  # the verified holder missed a deadline
    SPARED = "spared"  # a holder judged hung ran again before the signal: not signalled
    OVERLOAD = "overload"  # the holder shed load (idle connections, no fds) to stay reachable
    CONNECTION_FAILED = "connection_failed"  # an unexpected error ended one conversation only
    SERVING_FAILED = "serving_failed"  # the holder could not serve any more and stepped down
    LOST_RENDEZVOUS = "lost_rendezvous"  # the holder's lock file or runtime dir was taken: it left
    LEASE_LOST = "lease_lost"  # (etcd) its lease not renewed in time, or its key gone: it let go
    SOCKET_RESTORED = "socket_restored"  # the holder published its socket again at its path
    SOCKET_BLOCKED = "socket_blocked"  # something at the socket path stops the holder publishing
    TERMINATED = "terminated"  # SIGTERM sent (through a verified pidfd)
    KILLED = "killed"  # SIGKILL sent (through a verified pidfd)
    FENCED = "fenced"  # (etcd) a hung holder's key moved off its lease, and the lease revoked
    ORPHANED = "orphaned"  # the holder's parent (its client) is gone
    LEGACY_REMOVED = "legacy_removed"
    LEGACY_KEPT = "legacy_kept"
    UNSAFE_FILE = "unsafe_file"  # something other than our regular file had a file's name
    ATTACHED = "attached"  # share mode: a newcomer's client is served by the holder
    DETACHED = "detached"  # share mode: an attached session ended
    SHARE_DECLINED = "share_declined"  # share mode: the newcomer could not attach (reason)
    COMMAND_EXITED = "command_exited"  # `highlander run`: the wrapped command's tree ended
    TREE_KILLED = "tree_killed"  # `highlander run`: SIGKILL to what outlived the wind-down limit


class Outcome(enum.StrEnum):
    """How a process's attempt to hold the project ended: a fixed set."""

    CLAIMED_FREE = "claimed_free"  # nobody held the project
    CLAIMED_STALE = "claimed_stale"  # the previous holder was gone; its socket was replaced
    SUCCEEDED = "succeeded"  # took over from a live incumbent, with its handoff
    DUPLICATE = "duplicate"  # OBSERVE/WARN: runs beside the incumbent
    REFUSED = "refused"  # the incumbent refused (reason says why)
    DEPOSED = "deposed"  # (incumbent) handed over to a successor
    STOPPED = "stopped"  # (incumbent) saved and left on request, no successor
    RELEASED = "released"  # (incumbent) gave the project up at exit
    ORPHANED = "orphaned"  # (incumbent) left because its parent process ended
    STEPPED_DOWN = "stepped_down"  # (incumbent) could not serve any more; gave the project up
    LOST_RENDEZVOUS = "lost_rendezvous"  # (incumbent) its lock file or runtime dir was taken
    LEASE_LOST = "lease_lost"  # (incumbent, etcd) lease not renewed in time, fenced, or key gone
    ATTACHED = "attached"  # (newcomer, share mode) became a relay to the holder's server


class EventLog:
    """Writes events for one project to stderr (key=value) and the JSON-lines file."""

    def __init__(
        self,
        path: str | None,
        *,
        app: str,
        mode: str,
        max_bytes: int = DEFAULT_MAX_BYTES,
        quiet: bool = False,
    ) -> None:
        self.path = path
        self.quiet = quiet
        self.app = app
        self.mode = mode
        self.max_bytes = max_bytes
        self._limiter = RateLimiter(self._summarise)

    def emit(self, event: Event, /, **fields: Any) -> dict[str, Any]:
        """Record one decision; return the record (not written if rate-limited).

        Every string field is cut to :data:`highlander._host.bounds.CLIP_CHARS`
        characters; events of a :data:`RATE_LIMITED` kind beyond the rate of
        their cause are counted instead of written.
        """
        record, written = self._note(event, fields)
        if written:
            self.show(event, record)
        return record

    def note(self, event: Event, /, **fields: Any) -> dict[str, Any]:
        """Like :meth:`emit`, but into the event log file only: nothing on stderr.

        For events too frequent for stderr (a save's every step): :meth:`show`
        puts a chosen few there, stamped with their own time.
        """
        return self._note(event, fields)[0]

    def show(self, event: Event, record: dict[str, Any]) -> None:
        """Put ``record`` (from :meth:`note`) on stderr, stamped with its own time."""
        if not self.quiet:
            context = {k: v for k, v in record.items() if k not in ("ts", "event")}
            level = "warning" if event in _WARNINGS else "info"
            log_at(record["ts"], level, event.value, **context)

    def _note(self, event: Event, fields: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The record, bounded, and whether it was written (``False``: rate-limited)."""
        bounded = bounded_fields(fields)
        if event in RATE_LIMITED and not self._limiter.admit(event.value, bounded):
            return self._record(event, bounded), False
        return self._write(event, self._record(event, bounded)), True

    def _summarise(self, summary: Summary) -> None:
        """Write one event for the ``summary.suppressed`` events a window held back."""
        event = Event(summary.kind)
        self.show(event, self._write(event, self._record(event, summary.fields())))

    def _record(self, event: Event, fields: dict[str, Any]) -> dict[str, Any]:
        record: dict[str, Any] = {
            "ts": time.time(),
            "event": event.value,
            "app": self.app,
            "mode": self.mode,
            "pid": os.getpid(),
        }
        record.update(fields)
        return record

    def _write(self, event: Event, record: dict[str, Any]) -> dict[str, Any]:
        """Append ``record`` to the event log file (the one funnel every written event takes)."""
        if self.path is not None:
            self._append(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        return record

    def _append(self, line: str) -> None:
        assert self.path is not None
        try:
            fd = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except (OSError, HighlanderError) as exc:
            reason = str(exc) if isinstance(exc, HighlanderError) else exc.strerror
            # Once per process and file: every event would repeat it.
            warn_once(f"event-log:{self.path}", "event_log_unusable", path=self.path, error=reason)
            return
        try:
            if os.fstat(fd).st_size >= self.max_bytes:
                self._rotate()
            os.write(fd, line.encode())
        except OSError as exc:  # a full disk: the event still went to stderr
            warn_once(
                f"event-log-write:{self.path}",
                "event_log_unwritable",
                path=self.path,
                error=exc.strerror,
            )
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        assert self.path is not None
        try:
            os.replace(self.path, self.path + ".1")
        except FileNotFoundError:
            pass  # a concurrent rotation won the race; losing it costs nothing
        except OSError as exc:  # e.g. a directory at the rotated name: say so once
            warn_once(
                f"event-log-rotation:{self.path}",
                "event_log_unrotatable",
                path=self.path + ".1",
                error=exc.strerror,
            )


#: What a peer can provoke once per connection without the token: rate-limited per cause.
RATE_LIMITED = frozenset(
    {
        Event.AUTH_FAILED,
        Event.PROTOCOL_ERROR,
        Event.TIMEOUT,
        Event.IDENTITY_MISMATCH,
        Event.OVERLOAD,
        Event.CONNECTION_FAILED,
    }
)

_WARNINGS = frozenset(
    {
        Event.DUPLICATE,
        Event.REFUSED,
        Event.AUTH_FAILED,
        Event.PROTOCOL_ERROR,
        Event.THRASH,
        Event.TIMEOUT,
        Event.UNREACHABLE,
        Event.IDENTITY_MISMATCH,
        Event.FOREIGN_LISTENER,
        Event.HUNG,
        Event.OVERLOAD,
        Event.CONNECTION_FAILED,
        Event.SERVING_FAILED,
        Event.TERMINATED,
        Event.KILLED,
        Event.LEGACY_KEPT,
        Event.UNSAFE_FILE,
    }
)


def read_events(path: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Return the events in ``path`` (and its rotated ``.1``), oldest first.

    Lines that are not JSON objects (a torn write after a crash) are skipped.
    """
    events = snapshot_events(path)[0]
    return events[-limit:] if limit else events


def snapshot_events(path: str) -> tuple[list[dict[str, Any]], int]:
    """Every event so far (the rotated ``.1`` first), and the offset in ``path`` they end at.

    Reading from that offset with :func:`read_new_events` continues exactly
    where the snapshot stopped: nothing is shown twice or lost in between.
    """
    older, _ = read_new_events(path + ".1", 0)
    current, offset = read_new_events(path, 0)
    return older + current, offset


def read_new_events(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The events appended to ``path`` since byte ``offset``, and the offset to read from next.

    Only complete lines count: a line still being written is left for the
    next call.  A file shorter than ``offset`` was rotated, so it is read
    from its start.  Lines that are not JSON objects (a torn write after a
    crash) are skipped, as in :func:`read_events`.  Anything but our own
    regular file at ``path`` raises :class:`~highlander._core.errors.UnsafeFileError`.
    """
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
            if os.fstat(handle.fileno()).st_size < offset:
                offset = 0
            handle.seek(offset)
            data = handle.read()
    except FileNotFoundError:
        return [], 0
    complete = data[: data.rfind(b"\n") + 1]
    events: list[dict[str, Any]] = []
    for line in complete.splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict):
                events.append(record)
    return events, offset + len(complete)
