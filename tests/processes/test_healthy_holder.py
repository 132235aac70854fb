"""A healthy holder is never signalled (issue #10, case 6; DESIGN guarantee 8), with real processes.

Load is not a hang: a storm of 64 simultaneous starts on two cores starves
freshly claimed holders of CPU past the HELLO deadline, and the kernel's
view (running, or gaining CPU time) must spare them.  A socket path that is
deleted or replaced under a live holder is published afresh by the holder,
never answered by killing it.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest

from tests.support.proctools import Child, Children, assert_no_overlap, wait_until_one_left

STORM = 64
#: Hang guard (never a performance bound).
SETTLE = 30.0


def _signals(kids: Children) -> list[dict[str, object]]:
    return kids.events("terminated") + kids.events("killed")


@pytest.mark.timeout(300)
def test_a_storm_of_64_starts_signals_nobody_and_loses_no_handoff(kids: Children) -> None:
    started = [kids.start(thrash_limit=1_000_000, hold=120) for _ in range(STORM)]
    survivor = wait_until_one_left(started, 240.0)
    ready = [r for r in survivor.heard if r.get("event") == "ready"] or [survivor.wait_for("ready")]
    assert ready[0]["is_holder"], survivor.heard
    for child in started:
        if child is not survivor:
            status, _, err = child.finish()
            assert status == 0, err.decode()[-800:]  # deposed, never killed or refused
    assert _signals(kids) == []
    # Every reign handed its counter on: the chain of 64 lost nothing.
    assert ready[0]["counter"] == STORM, ready[0]
    assert_no_overlap(kids.reigns())


# -- the socket path under a live holder -------------------------------------------


def _socket_path(kids: Children) -> Path:
    (path,) = kids.runtime.glob("*.sock")
    return path


def _republished(path: Path, before: tuple[int, int]) -> None:
    """Wait until a fresh socket file stands at ``path`` (not the one that was there)."""
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISSOCK(st.st_mode) and (st.st_dev, st.st_ino) != before:
            return
        time.sleep(0.01)
    raise AssertionError(f"the holder did not publish a fresh socket at {path}")


def _tamper(path: Path, how: str) -> None:
    path.unlink()
    if how == "fifo":
        os.mkfifo(path)
    elif how == "file":
        path.write_text("not a socket")
    elif how == "symlink":
        path.symlink_to("/nonexistent")
    elif how == "dead_socket":
        with socket.socket(socket.AF_UNIX) as dead:
            dead.bind(str(path))  # bound, never listening: connect() is refused


def _takes_over(kids: Children, first: Child) -> None:
    newcomer = kids.start()
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "succeeded", report
    assert report["handoff"]["from"] == first.pid and report["handoff"]["counter"] == 1
    assert first.finish()[0] == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["deleted", "fifo", "file", "symlink", "dead_socket"])
def test_a_holder_republishes_a_socket_path_taken_from_it(kids: Children, how: str) -> None:
    first = kids.start()
    first.wait_for("ready")
    path = _socket_path(kids)
    original = os.lstat(path)
    _tamper(path, how)
    _republished(path, (original.st_dev, original.st_ino))
    _takes_over(kids, first)
    assert _signals(kids) == []


@pytest.mark.timeout(120)
def test_a_directory_at_the_socket_path_is_named_not_answered_with_a_kill(
    kids: Children,
) -> None:
    first = kids.start()
    first.wait_for("ready")
    path = _socket_path(kids)
    path.unlink()
    path.mkdir()
    newcomer = kids.start()
    status, out, err = newcomer.finish(SETTLE)
    last = err.decode().strip().splitlines()[-1]
    assert status == 1 and out == b"" and b"Traceback" not in err, err.decode()[-800:]
    assert str(path) in last and "directory" in last and "remove" in last, last
    assert first.proc.poll() is None and _signals(kids) == []
    path.rmdir()  # the operator follows the message; the holder publishes again
    _republished(path, (0, 0))
    _takes_over(kids, first)
    assert _signals(kids) == []
