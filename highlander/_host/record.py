"""The holder's record (``<name>.state``): who holds the project, since when, which reign.

Written only by the process that holds the lock, atomically (a private
temporary file renamed over the old record), so readers see either the old
record or the new one, never a torn one.  It carries the fencing generation
(+1 per claim), the recent succession times the anti-thrash rule counts,
and the deposed holders whose exit the reign owes (a copy of which the lock
file keeps: :func:`owed_copy`).
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
from highlander._host.identity import Expected, boot_id, gone

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
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
    #: The deposed holders whose exit this reign owes, each ``[pid, start_time, exe, uid]``:
    #: the one it took over from and every one it inherited (``[]`` for none).  A
    #: reign that ends first passes them all on: the next reign inherits those
    #: still running (:func:`owed_exits`), so a debt survives any number of
    #: reigns that end within the grace, not just one.
    owed: list[Any]


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
        record = HolderRecord(**{"cmdline": [], "successions_ms": [], "owed": [], **data})
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
        and _plausible_owed(record.owed)
    )


#: The most debts a record carries: one per deposed holder still running, and a
#: record that claims more is damaged (it must not make a reader verify thousands).
OWED_MAX = 16


def _plausible_owed(value: object) -> bool:
    """A list of at most :data:`OWED_MAX` debts, each ``[pid, start_time, exe, uid]``."""
    return (
        isinstance(value, list)
        and len(value) <= OWED_MAX
        and all(_plausible_debt(debt) for debt in value)
    )


def _plausible_debt(value: object) -> bool:
    """``[pid, start_time, exe, uid]`` with their types and ranges."""
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


def debts(owed: Iterable[Expected]) -> list[list[Any]]:
    """The record's form of ``owed`` (:attr:`HolderRecord.owed`)."""
    return [[e.pid, e.start_time, e.exe, e.uid] for e in owed][:OWED_MAX]


def owed_exits(
    previous: HolderRecord | None, direct: Expected | None, copy: Sequence[list[Any]] = ()
) -> tuple[Expected, ...]:
    """The deposed holders whose exit a new reign owes: ours, and those passed on to us.

    ``direct`` is our predecessor (``None`` after a claim).  ``previous`` is
    the record we replace and ``copy`` the debts kept in the lock file
    (:func:`read_owed_copy`): a successor sees its predecessors out after the
    commit; should it end first (killed, stepped down), its debts pass to
    whoever holds next, from whichever of the two survived.  A debt counts
    only for a process that still runs with that start time on this boot.
    Nothing here signals: the fence verifies again.
    """
    owed = [direct] if direct is not None else []
    passed = list(copy)
    if previous is not None and previous.boot_id == boot_id():
        passed[:0] = previous.owed
    for pid, start_time, exe, uid in passed:
        alive = not gone(pid, start_time) and pid != os.getpid()
        if alive and all(p.pid != pid for p in owed):
            owed.append(Expected(pid, start_time, exe, uid, None, None))
    return tuple(owed[:OWED_MAX])


def owed_copy(owed: Iterable[Expected]) -> bytes:
    """The line a copy keeps after the generation: this boot's id and ``owed``."""
    return json.dumps([boot_id(), debts(owed)], separators=(",", ":")).encode() + b"\n"


def read_owed_copy(line: bytes) -> list[list[Any]]:
    """The debts in a copy's line (:func:`owed_copy`); ``[]`` if damaged or of another boot."""
    try:
        boot, owed = json.loads(line)
    except (ValueError, TypeError, RecursionError):  # RecursionError: nested too deep
        return []
    return owed if boot == boot_id() and _plausible_owed(owed) else []


#: Bytes a reader of a copy takes: the generation's line and the debts' line fit many times.
COPY_BYTES = 64 * 1024


def copy_of(generation: int, owed: Iterable[Expected] = ()) -> bytes:
    """What the lock file and the floor keep beside the record: the generation, then the debts.

    Copies for the same reason twice: a damaged or replaced ``.state`` must
    send neither the generation back nor a debt of exit away (the record is
    replaceable; the lock file never is, and the floor lives outside the
    runtime directory).
    """
    return f"{generation}\n".encode() + owed_copy(owed)


def read_copy(data: bytes) -> tuple[int, list[list[Any]]]:
    """The generation (0 if none, damaged or implausible) and the debts of a :func:`copy_of`.

    A copy written before the debts were kept has the generation alone.
    """
    first, _, rest = data.partition(b"\n")
    generation = int(first) if first.isdigit() and len(first) <= 20 else 0
    line, complete, _ = rest.partition(b"\n")
    owed = read_owed_copy(line) if complete else []
    return (generation if generation < GENERATION_MAX else 0), owed


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
