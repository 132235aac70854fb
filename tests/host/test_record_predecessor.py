"""The record's ``predecessor`` (the exit a reign owes) and its inheritance, on real pids."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from highlander._host.claim import owed_exits
from highlander._host.identity import Expected, boot_id, process_identity
from highlander._host.record import HolderRecord, read_record


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
    assert record is not None and record.predecessor == []


@pytest.mark.parametrize(
    "bad",
    [[1, 2, "exe"], [0, 2, "exe", 0], [1, -1, "exe", 0], [1, 2, 3, 0], [True, 2, "e", 0], "x"],
)
def test_an_implausible_predecessor_makes_the_record_unreadable(tmp_path: Path, bad: Any) -> None:
    assert _record(tmp_path / "bad.state", predecessor=bad) is None


def _owing(tmp_path: Path, pid: int, start_time: int, **fields: Any) -> HolderRecord:
    who = process_identity(pid)
    assert who is not None
    record = _record(
        tmp_path / "r.state", predecessor=[pid, start_time, who.exe, who.uid], **fields
    )
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
