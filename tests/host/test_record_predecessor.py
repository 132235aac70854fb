"""The record's ``owed`` (the exits a reign owes), its copy in the lock file, and their
inheritance, on real pids."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from highlander._host.claim import ProjectLock
from highlander._host.fencing import read_floor, store_floor
from highlander._host.identity import Expected, boot_id, process_identity
from highlander._host.record import (
    GENERATION_MAX,
    OWED_MAX,
    HolderRecord,
    debts,
    owed_copy,
    owed_exits,
    read_owed_copy,
    read_record,
)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait(30)


def _record(path: Path, **fields: Any) -> HolderRecord | None:
    me = process_identity(os.getpid())
    assert me is not None
    data = {
        "pid": os.getpid(),
        "start_time": me.start_time,
        "exe": me.exe,
        "uid": os.geteuid(),
        "boot_id": boot_id(),
        "app": "app",
        "mode": "auto",
        "generation": 3,
        "since_ms": 1,
        "cmdline": [],
        "successions_ms": [],
        **fields,
    }
    path.write_text(json.dumps(data))
    return read_record(str(path))


def test_a_record_without_the_field_reads_as_owing_nothing(tmp_path: Path) -> None:
    record = _record(tmp_path / "old.state")
    assert record is not None and record.owed == []


@pytest.mark.parametrize(
    "bad",
    [
        *[[debt] for debt in ([1, 2, "exe"], [0, 2, "exe", 0], [1, -1, "exe", 0], [1, 2, 3, 0])],
        [[True, 2, "e", 0]],
        [1, 2, "exe", 0],  # one debt, not a list of them
        [[1, 2, "e", 0]] * (OWED_MAX + 1),
        "x",
    ],
)
def test_an_implausible_debt_makes_the_record_unreadable(tmp_path: Path, bad: Any) -> None:
    assert _record(tmp_path / "bad.state", owed=bad) is None


def _owing(tmp_path: Path, pid: int, start_time: int, **fields: Any) -> HolderRecord:
    who = process_identity(pid)
    assert who is not None
    record = _record(tmp_path / "r.state", owed=[[pid, start_time, who.exe, who.uid]], **fields)
    assert record is not None
    return record


def test_a_live_predecessor_named_by_the_record_is_owed(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    who = process_identity(sleeper.pid)
    assert who is not None
    record = _owing(tmp_path, sleeper.pid, who.start_time)
    direct = Expected(12345, 1, "/bin/x", 0, None, None)
    owed = owed_exits(record, direct)
    assert [e.pid for e in owed] == [12345, sleeper.pid]
    assert owed[1] == Expected(sleeper.pid, who.start_time, who.exe, who.uid, None, None)


def test_no_debt_for_a_reused_pid_another_boot_or_this_process(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    who = process_identity(sleeper.pid)
    assert who is not None
    assert owed_exits(_owing(tmp_path, sleeper.pid, who.start_time + 1), None) == ()
    other_boot = _owing(tmp_path, sleeper.pid, who.start_time, boot_id="another-boot")
    assert owed_exits(other_boot, None) == ()
    me = process_identity(os.getpid())
    assert me is not None
    assert owed_exits(_owing(tmp_path, os.getpid(), me.start_time), None) == ()
    assert owed_exits(None, None) == ()


def test_a_debt_already_owed_directly_is_not_owed_twice(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    who = process_identity(sleeper.pid)
    assert who is not None
    direct = Expected(sleeper.pid, who.start_time, who.exe, who.uid, None, None)
    owed = owed_exits(_owing(tmp_path, sleeper.pid, who.start_time), direct)
    assert owed == (direct,)


def test_every_debt_of_the_record_passes_on_not_only_the_first(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """A reign that inherited a debt names it with its own predecessor's: both pass on."""
    other = subprocess.Popen(["sleep", "60"])
    try:
        owed = []
        for pid in (sleeper.pid, other.pid):
            who = process_identity(pid)
            assert who is not None
            owed.append([pid, who.start_time, who.exe, who.uid])
        record = _record(tmp_path / "r.state", owed=owed)
        assert record is not None
        assert [e.pid for e in owed_exits(record, None)] == [sleeper.pid, other.pid]
    finally:
        other.kill()
        other.wait(30)


def test_the_lock_files_copy_carries_the_debts_when_the_record_is_gone(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    who = process_identity(sleeper.pid)
    assert who is not None
    debt = Expected(sleeper.pid, who.start_time, who.exe, who.uid, None, None)
    lock = ProjectLock.try_acquire(str(tmp_path / "p.lock"))
    assert lock is not None
    try:
        lock.store_generation(7, (debt,))
        assert lock.stored() == (7, debts([debt]))  # the generation's copy is unchanged
        assert owed_exits(None, None, lock.stored()[1]) == (debt,)
        lock.store_generation(8)
        assert lock.stored() == (8, [])
    finally:
        lock.release()


def test_the_floor_keeps_a_third_copy_of_the_debts(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """Beside the generation, out of the runtime dir's reach (chaos seed 1, pid 11659)."""
    who = process_identity(sleeper.pid)
    assert who is not None
    debt = Expected(sleeper.pid, who.start_time, who.exe, who.uid, None, None)
    floor = str(tmp_path / "state" / "floor")
    assert read_floor(floor) == (0, []) and read_floor(None) == (0, [])
    store_floor(floor, 7, (debt,))
    assert read_floor(floor)[0] == 7  # the generation reads as before
    assert owed_exits(None, None, read_floor(floor)[1]) == (debt,)
    store_floor(floor, 8)
    assert read_floor(floor) == (8, [])
    Path(floor).write_bytes(b"9\n")  # a floor written before the copy existed
    assert read_floor(floor) == (9, [])
    # A generation no reader accepts is damage, as in the lock file's copy: it must not
    # outrank the other sources of the next generation and then be dropped with them.
    Path(floor).write_bytes(b"%d\n" % GENERATION_MAX)
    assert read_floor(floor) == (0, [])


@pytest.mark.parametrize(
    "line", [b"", b"{", b'["another-boot",[[2,1,"e",0]]]', b'["b",[[0,1,"e",0]]]', b"[1]"]
)
def test_a_damaged_or_foreign_copy_owes_nothing(line: bytes) -> None:
    assert read_owed_copy(line.replace(b'"b"', f'"{boot_id()}"'.encode())) == []


def test_the_copy_reads_back_on_this_boot(sleeper: subprocess.Popen[bytes]) -> None:
    who = process_identity(sleeper.pid)
    assert who is not None
    debt = Expected(sleeper.pid, who.start_time, who.exe, who.uid, None, None)
    line = owed_copy([debt])
    assert line.endswith(b"\n") and read_owed_copy(line[:-1]) == debts([debt])
