"""Files in the runtime directory that are not what they seem, and the proof behind a signal.

Real processes and a real file system: FIFOs, directories, symlinks and
foreign owners planted where Highlander keeps its lock, socket, record and
event log must never hang a process or end it with a traceback; a process
that merely has the lock file open is never signalled; ``check_current()``
fails closed when the rendezvous is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from highlander import Deposed, Highlander
from highlander._host import log as _log
from highlander._host.rendezvous import ProjectPaths, names_key, project_paths
from tests.support.proctools import WAIT, Child, Children, wait_stopped, wipe
from tests.support.proctools_extra import OTHER_UID, Extras, last_stderr_line

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
    secret = names_key(str(kids.runtime))
    return project_paths(str(kids.runtime), APP, os.path.realpath(kids.project), secret=secret)


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


# -- the lock file and the socket path: refused in one line ---------------------------


@pytest.mark.parametrize(
    ("name", "kind", "says"),
    [
        ("lock", "fifo", "it is a FIFO, not a regular file"),
        ("lock", "directory", "it is a directory, not a regular file"),
        ("lock", "symlink", "it is a symlink, not a regular file"),
        ("lock", "dangling symlink", "it is a symlink, not a regular file"),
        pytest.param("lock", "foreign", "owned by uid 12345", marks=needs_root),
        ("socket", "directory", "it is a directory, not a socket"),
        ("state", "directory", "it is a directory, not a regular file"),
    ],
)
def test_a_file_that_cannot_be_used_is_one_line_naming_it_and_the_fix(
    kids: Children, tmp_path: Path, name: str, kind: str, says: str
) -> None:
    path = getattr(_paths(kids), name)
    _plant(path, kind, tmp_path)
    child = kids.start(hold=0)
    status, out, err = child.finish(timeout=NO_HANG)
    line = _one_line_failure(err)
    assert status == 1
    assert out == b""
    assert path in line and says in line and "start again" in line, line
    # Nothing was left behind by the failed claim (no socket, no temporary
    # name): the next start, once the file is gone, claims at once.
    left = {p.name for p in kids.runtime.iterdir()} - {os.path.basename(path)}
    assert not [name for name in left if name.endswith((".sock", ".tmp")) or name[0] == "."]
    (shutil.rmtree if os.path.isdir(path) and not os.path.islink(path) else os.unlink)(path)
    assert kids.start().wait_for("ready", timeout=NO_HANG)["generation"] >= 1


def _program(kids: Children, code: str) -> Child:
    """Run ``code`` under this Python in the test's environment, with ``report()``."""
    prelude = textwrap.dedent(
        """
        import json, os
        _fd = int(os.environ["HL_READY_FD"])
        def report(**fields):
            os.write(_fd, (json.dumps({"pid": os.getpid(), **fields}) + "\\n").encode())
        """
    )
    return kids.spawn([sys.executable, "-c", prelude + textwrap.dedent(code)], kids.env())


def test_runtime_dir_deleted_between_resolving_and_claiming_is_one_line(
    kids: Children,
) -> None:
    code = """
        import shutil, sys
        from highlander import Highlander, HighlanderError
        handle = Highlander(app="child", exit_when_orphaned=False)
        settings = handle._resolve()  # the runtime dir exists now...
        shutil.rmtree(settings.paths.runtime_dir)  # ...and a /tmp cleaner removes it
        try:
            handle.acquire()
        except HighlanderError as exc:
            sys.stderr.write(f"highlander: {exc}\\n")
            sys.exit(1)
        report(event="claimed")
    """
    helper = _program(kids, code)
    status, _, err = helper.finish(timeout=NO_HANG)
    line = _one_line_failure(err)
    assert status == 1
    assert str(kids.runtime) in line and "start again" in line, line


# -- the record: never a hang, replaced when it can be --------------------------------


@pytest.mark.parametrize("kind", ["fifo", "symlink", "dangling symlink"])
def test_a_record_that_is_not_a_regular_file_is_no_record(
    kids: Children, tmp_path: Path, kind: str
) -> None:
    paths = _paths(kids)
    _plant(paths.state, kind, tmp_path)
    child = kids.start()
    report = child.wait_for("ready", timeout=NO_HANG)
    assert report["outcome"] == "claimed_free"
    assert report["generation"] == 1
    assert Path(paths.state).is_file() and not Path(paths.state).is_symlink()
    (unsafe,) = kids.events("unsafe_file")
    assert unsafe["path"] == paths.state


def test_a_record_turned_fifo_during_a_reign_does_not_stop_a_succession(
    kids: Children,
) -> None:
    paths = _paths(kids)
    first = kids.start()
    first.wait_for("ready")
    os.unlink(paths.state)
    os.mkfifo(paths.state, 0o600)
    second = kids.start()
    report = second.wait_for("ready", timeout=NO_HANG)
    assert report["outcome"] == "succeeded"
    assert report["generation"] == 2  # the lock file kept the generation
    first.wait_for("deposed", timeout=NO_HANG)


# -- the event log: skipped with one warning, never a hang ----------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "symlink"])
def test_an_event_log_that_is_not_a_regular_file_is_skipped_with_one_warning(
    kids: Children, tmp_path: Path, kind: str
) -> None:
    paths = _paths(kids)
    _plant(paths.events, kind, tmp_path)
    first = kids.start()
    first.wait_for("ready", timeout=NO_HANG)
    # A succession logs a dozen events on each side.
    second = kids.start(hold=0.2)
    assert second.wait_for("ready", timeout=NO_HANG)["outcome"] == "succeeded"
    first.wait_for("deposed", timeout=NO_HANG)
    for child in (first, second):
        status, out, err = child.finish(timeout=NO_HANG)
        assert status == 0 and out == b""
        text = err.decode(errors="replace")
        assert "Traceback" not in text
        warnings = [line for line in text.splitlines() if "event_log_unusable" in line]
        assert len(warnings) == 1, text
        assert paths.events in warnings[0]


def test_cli_status_and_events_with_fifos_do_not_hang(kids: Children) -> None:
    paths = _paths(kids)
    os.mkfifo(paths.lock, 0o600)
    os.mkfifo(paths.events, 0o600)
    Path(paths.state).write_text("{}")  # lets the CLI find the app
    for command in ("status", "stop", "events"):
        done = subprocess.run(
            [sys.executable, "-m", "highlander.cli", command, "--app", APP],
            env=kids.env(),
            capture_output=True,
            timeout=NO_HANG,
            check=False,
        )
        line = _one_line_failure(done.stderr)
        assert done.returncode == 1, (command, done)
        assert "it is a FIFO" in line, (command, line)


def _doctor(kids: Children) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", "doctor", "--app", APP],
        env=kids.env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )


def test_doctor_lists_every_unsafe_file_with_its_fix(kids: Children, tmp_path: Path) -> None:
    paths = _paths(kids)
    _plant(paths.state, "fifo", tmp_path)
    _plant(paths.lock, "directory", tmp_path)
    _plant(paths.events, "symlink", tmp_path)
    rotated = paths.events + ".1"
    _plant(rotated, "fifo", tmp_path)
    done = _doctor(kids)
    assert done.returncode == 1
    text = done.stdout.decode()
    for path, what in (
        (paths.state, "a FIFO"),
        (paths.lock, "a directory"),
        (paths.events, "a symlink"),
        (rotated, "a FIFO"),
    ):
        assert f"remove {path} (it is {what}" in text, text


def test_doctor_names_a_key_file_an_earlier_highlander_left(kids: Children) -> None:
    # Highlander kept each project's derived key in <base>.key until it derived the key
    # at every conversation; a file left from then is not read, and is worth removing.
    paths = _paths(kids)
    leftover = os.path.join(paths.runtime_dir, paths.base + ".key")
    Path(leftover).write_bytes(bytes(64))
    os.chmod(leftover, 0o600)
    done = _doctor(kids)
    text = done.stdout.decode()
    assert done.returncode == 0, text  # a warning, not a failure
    assert f"WARN runtime file {leftover}: a project's derived key" in text, text
    assert f"fix: rm -f {leftover}" in text, text
    assert "names.key" not in text  # the names key is in use, and is not this


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
    wait_stopped(first.pid)  # nothing of it runs after the socket is gone: it cannot republish
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
    wait_stopped(second.pid)
    third = kids.start(timeouts=FAST)
    assert third.wait_for("ready", timeout=NO_HANG)["generation"] == 3
    assert second.finish()[0] == -signal.SIGKILL
    assert [e["peer_pid"] for e in kids.events("killed")] == [second.pid]


def _forge_record(paths: ProjectPaths, **fields: object) -> None:
    record = json.loads(Path(paths.state).read_text())
    record.update(fields)
    Path(paths.state).write_text(json.dumps(record))


# -- check_current() fails closed ----------------------------------------------------


def _holder(tmp_path: Path) -> Highlander:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return Highlander(
        app="api",
        project=str(project),
        runtime_dir=str(tmp_path / "rt"),
        token="api-test-token-0123456789",
        exit_when_orphaned=False,
        on_deposed=lambda: None,  # stepping down must not end the test process
    ).acquire()


def test_check_current_fails_when_lock_and_socket_were_deleted(tmp_path: Path) -> None:
    hl = _holder(tmp_path)
    try:
        hl.check_current()
        assert hl.settings is not None
        os.unlink(hl.settings.paths.lock)
        # The holder may have noticed already, stepped down and removed its socket.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hl.settings.paths.socket)
        # Proven wrong by check_current itself, or the holder noticed first.
        with pytest.raises(Deposed, match=r"\.lock|lock file or runtime directory"):
            hl.check_current()
        # A newcomer now claims a fresh lock: only one of the two passes.
        other = _holder(tmp_path)
        other.check_current()
        with pytest.raises(Deposed):
            hl.check_current()
        other.release()
    finally:
        hl.release()


def test_check_current_fails_when_the_record_is_unreadable(tmp_path: Path) -> None:
    hl = _holder(tmp_path)
    try:
        assert hl.settings is not None
        os.unlink(hl.settings.paths.state)
        os.mkdir(hl.settings.paths.state)
        with pytest.raises(Deposed, match="record"):
            hl.check_current()
    finally:
        hl.release()


def test_check_current_fails_when_the_record_names_another_process(tmp_path: Path) -> None:
    hl = _holder(tmp_path)
    try:
        assert hl.settings is not None
        paths = hl.settings.paths
        _forge_record(paths, pid=1)  # same generation, another pid
        with pytest.raises(Deposed, match="pid 1"):
            hl.check_current()
    finally:
        hl.release()


def test_check_current_fails_when_the_runtime_dir_was_wiped(tmp_path: Path) -> None:
    hl = _holder(tmp_path)
    try:
        assert hl.settings is not None
        wipe(hl.settings.paths.runtime_dir)
        with pytest.raises(Deposed):
            hl.check_current()
    finally:
        hl.release()
