"""Adopting the lock a predecessor passed with SAVED: held, stale, or not a lock (real flocks)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from highlander._host.claim import ProjectLock


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
