"""The holder's record (``<name>.state``): who holds the project, since when, which reign.

Written only by the process that holds the lock, atomically (a private
temporary file renamed over the old record), so readers see either the old
record or the new one, never a torn one.  It carries the fencing generation
(+1 per claim) and the recent succession times the anti-thrash rule counts.
Whatever sits at its name is opened without trust (:mod:`highlander._host.files`):
a FIFO, a directory or a symlink there is no record, and the next write
replaces it (or, for a directory, which a rename cannot replace, fails in
one line).  A newcomer reads it to name the incumbent (WARN) and, before it
would ever signal a process that cannot answer, to verify who that process is.
"""

from __future__ import annotations

import json
import os

from highlander._core.errors import HighlanderError
from highlander._core.values import Value
from highlander._host.files import discard, install, open_regular, stage

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any


class HolderRecord(Value):
    """The identity and reign of the current (or last) holder (``_asdict()`` for a dict)."""

    pid: int
    start_time: int
    exe: str
    uid: int
    boot_id: str
    app: str
    mode: str
    generation: int
    since_ms: int
    cmdline: list[str]
    successions_ms: list[int]
    #: The deposed holder this reign took over from, ``[pid, start_time, exe, uid]``
    #: (``[]`` after a free claim): its exit is owed, and the next reign inherits
    #: the debt if this one ends first (:func:`highlander._host.claim.owed_exits`).
    predecessor: list[Any]


def read_record(path: str) -> HolderRecord | None:
    """Return the record at ``path``, or ``None`` if absent or unreadable.

    A corrupt record is treated as absent: it only ever informs, it never
    decides who holds the project (the lock does).  So is anything that is
    not our own regular file (a FIFO there must not hang the reader).
    """
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
            data: Any = json.loads(handle.read(1024 * 1024))
        # Records written before these fields existed lack them.
        record = HolderRecord(**{"cmdline": [], "successions_ms": [], "predecessor": [], **data})
    except (OSError, ValueError, TypeError, HighlanderError):
        return None
    return record if _plausible(record) else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: A pid_t is a C int; the kernel never hands out 0 or negative pids.
PID_MAX = 2**31 - 1
#: Far below the protocol's 63-bit integers, so +1 per claim can never overflow them.
GENERATION_MAX = 2**62


def _plausible(record: HolderRecord) -> bool:
    """Every field has its declared type and range (a corrupted record has not)."""
    ints = (record.pid, record.start_time, record.uid, record.generation, record.since_ms)
    texts = (record.exe, record.boot_id, record.app, record.mode)
    return (
        all(_is_int(value) and value >= 0 for value in ints)
        and 1 <= record.pid <= PID_MAX
        and record.generation < GENERATION_MAX
        and all(isinstance(value, str) for value in texts)
        and isinstance(record.cmdline, list)
        and all(isinstance(part, str) for part in record.cmdline)
        and isinstance(record.successions_ms, list)
        and all(_is_int(at) for at in record.successions_ms)
        and _plausible_predecessor(record.predecessor)
    )


def _plausible_predecessor(value: object) -> bool:
    """``[]``, or ``[pid, start_time, exe, uid]`` with their types and ranges."""
    if value == []:
        return True
    if not isinstance(value, list) or len(value) != 4:
        return False
    pid, start_time, exe, uid = value
    return (
        _is_int(pid)
        and 1 <= pid <= PID_MAX
        and _is_int(start_time)
        and start_time >= 0
        and isinstance(exe, str)
        and _is_int(uid)
        and uid >= 0
    )


def write_record(path: str, record: HolderRecord) -> None:
    """Replace the record at ``path`` atomically (caller holds the lock).

    A FIFO or symlink at ``path`` is replaced (``rename`` never follows or
    opens it); a directory cannot be, which raises
    :class:`~highlander._core.errors.UnsafeFileError` naming it.
    """
    install_record(stage_record(path, record), path)


def stage_record(path: str, record: HolderRecord) -> str:
    """Write ``record`` to a private file beside ``path``; return its name.

    Everything that can fail for want of space or permission fails here, so
    a successor stages its record *before* the handover commits and only
    renames it into place after (:func:`install_record`).  A directory at
    ``path`` is refused here too (:class:`~highlander._core.errors.UnsafeFileError`):
    a rename could not replace it.
    """
    return stage(path, json.dumps(record._asdict(), separators=(",", ":")).encode())


def install_record(staged: str, path: str) -> None:
    """Rename a staged record over ``path`` (needs no space: the data is written)."""
    install(staged, path)


def discard_record(staged: str) -> None:
    """Remove a staged record that will not be installed."""
    discard(staged)
