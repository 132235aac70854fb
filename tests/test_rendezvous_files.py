"""Files in the runtime directory that are not what they seem, and the proof behind a signal.

Real processes and a real file system: FIFOs, directories, symlinks and
foreign owners planted where Highlander keeps its lock, socket, record and
event log must never hang a process or end it with a traceback; a process
that merely has the lock file open is never signalled; ``check_current()``
fails closed when the rendezvous is gone.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from proctools import Children
from proctools_extra import OTHER_UID, Extras, last_stderr_line

from highlander import _log
from highlander._rendezvous import ProjectPaths, project_paths

APP = "child"  # the test child's default app name
FAST = {"hello": 0.5, "stall": 0.6, "ceiling": 1.5, "exit_grace": 0.5, "term_grace": 0.5}
#: Hang guard for a claim that must not block (not a performance bound).
NO_HANG = 20.0

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _logs_written_inside_the_test() -> Iterator[None]:
    """In-process holders log on a thread: write the lines before capture stops."""
    yield
    _log.flush()


def _paths(kids: Children) -> ProjectPaths:
    kids.runtime.mkdir(mode=0o700, exist_ok=True)
    return project_paths(str(kids.runtime), APP, os.path.realpath(kids.project))


def _plant(path: str, kind: str, tmp: Path) -> None:
    """Put something that is not a regular file (or not ours) at ``path``."""
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        os.mkdir(path, 0o700)
        Path(path, "inside").write_text("x")  # not even an empty directory
    elif kind == "symlink":
        target = tmp / "elsewhere"
        target.write_text("")
        os.symlink(target, path)
    elif kind == "dangling symlink":
        os.symlink(tmp / "nowhere", path)
    elif kind == "foreign":
        Path(path).write_text("")
        os.chown(path, OTHER_UID, OTHER_UID)
    else:  # pragma: no cover - a typo in a parametrisation
        raise AssertionError(kind)


def _one_line_failure(err: bytes) -> str:
    text = err.decode(errors="replace")
    assert "Traceback" not in text, text
    return last_stderr_line(err)


# -- a signal needs the lock itself, not an open file ------------------------------


def test_a_bystander_with_the_lock_file_open_is_never_signalled(
    kids: Children, extras: Extras
) -> None:
    """Lock held by a stopped holder, socket gone, record forged to name a process
    that has the lock file open (read-only) but does not hold the lock."""
    paths = _paths(kids)
    first = kids.start()
    first.wait_for("ready")
    os.kill(first.pid, signal.SIGSTOP)
    os.unlink(paths.socket)
    with open(paths.lock, "rb") as lock_file:
        bystander = extras.popen(["sleep", "600"], stdin=lock_file)
    stat = Path(f"/proc/{bystander.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    _forge_record(paths, pid=bystander.pid, start_time=int(stat[19]), exe="/usr/bin/sleep")
    second = kids.start(timeouts=FAST)
    status, out, err = second.finish()
    assert status == 1 and out == b""
    assert "never signals" in _one_line_failure(err)
    assert bystander.poll() is None
    assert first.proc.poll() is None  # stopped, never verified, never signalled
    assert not kids.events("terminated")
    (mismatch,) = kids.events("identity_mismatch")
    assert "does not hold the project's lock" in mismatch["reason"]


def test_a_hung_successor_that_holds_an_inherited_lock_is_still_verified(
    kids: Children,
) -> None:
    """The kernel names the predecessor as the flock's owner in /proc/locks once
    the lock was passed on; the successor still proves it holds it."""
    first = kids.start()
    first.wait_for("ready")
    second = kids.start()
    assert second.wait_for("ready")["outcome"] == "succeeded"
    first.wait_for("deposed")
    os.kill(second.pid, signal.SIGSTOP)
    third = kids.start(timeouts=FAST)
    assert third.wait_for("ready", timeout=NO_HANG)["generation"] == 3
    assert second.finish()[0] == -signal.SIGKILL
    assert [e["peer_pid"] for e in kids.events("killed")] == [second.pid]


def _forge_record(paths: ProjectPaths, **fields: object) -> None:
    record = json.loads(Path(paths.state).read_text())
    record.update(fields)
    Path(paths.state).write_text(json.dumps(record))
