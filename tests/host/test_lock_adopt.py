"""The lock a predecessor passed with SAVED: adopted, stale or foreign; and whether any holds it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from highlander._host.claim import ProjectLock
from highlander._host.identity import flock_held


def _locked(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def test_a_copy_that_holds_the_lock_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "p.lock"
    holder = _locked(path)
    adopted = ProjectLock.adopt(os.dup(holder), str(path))
    assert isinstance(adopted, ProjectLock)
    adopted.release()
    os.close(holder)


def test_a_copy_whose_lock_moved_to_a_new_description_is_stale(tmp_path: Path) -> None:
    # What an incumbent that kept the project after our ACK deadline did.
    path = tmp_path / "p.lock"
    sent = _locked(path)
    copy = os.dup(sent)  # what SAVED carried
    fcntl.flock(sent, fcntl.LOCK_UN)
    kept = _locked(path)
    assert ProjectLock.adopt(copy, str(path)) == "stale"
    # It was not taken back from under the incumbent, and the copy is closed.
    probe = os.open(path, os.O_RDWR)
    with pytest.raises(BlockingIOError):
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(probe)
    with pytest.raises(OSError):
        os.fstat(copy)
    os.close(sent)
    os.close(kept)


def test_a_copy_of_a_replaced_lock_file_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "p.lock"
    holder = _locked(path)
    path.unlink()  # a wiped runtime directory
    assert ProjectLock.adopt(os.dup(holder), str(path)) == "stale"
    path.write_bytes(b"")  # and a new rendezvous made there
    assert ProjectLock.adopt(os.dup(holder), str(path)) == "stale"
    os.close(holder)


def test_a_descriptor_that_is_no_file_is_foreign(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    assert ProjectLock.adopt(read_end, str(tmp_path / "p.lock")) == "foreign"
    os.close(write_end)


def test_flock_held_sees_a_lock_whoever_holds_its_description(tmp_path: Path) -> None:
    path = tmp_path / "p.lock"
    path.write_bytes(b"")
    assert not flock_held(str(path))
    holder = _locked(path)
    copy = os.dup(holder)  # what a successor holds after SAVED
    os.close(holder)  # the holder gone: its copy keeps the lock
    assert flock_held(str(path))
    assert not flock_held(str(tmp_path / "other.lock"))  # no such file: nothing held
    os.close(copy)
    assert not flock_held(str(path))
