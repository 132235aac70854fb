"""Guards between real processes: other uids, foreign listeners, legacy locks, orphans.

Every test runs real children (tests/programs/child.py) against real Unix
sockets in its own runtime directory, and ends every process it started by
pid (or pidfd) in teardown.  The last tests check statically that nothing in
highlander/ can signal a process except the verified kill.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from highlander._host.record import read_record
from highlander._host.rendezvous import names_key, project_paths
from tests.support.paths import REPO
from tests.support.proctools import WAIT, Child, Children
from tests.support.proctools_extra import OTHER_UID, Extras, events, exited, last_stderr_line

PACKAGE = REPO / "highlander"
SYSTEM_PYTHON = "/usr/bin/python3"
APP = "child"  # the child's default app name

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another uid")
needs_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None or not os.path.exists(SYSTEM_PYTHON),
    reason="needs setpriv and the system python3",
)


def _kinds(kids: Children, kind: str) -> list[dict[str, object]]:
    return [e for e in events(kids) if e["event"] == kind]


def _socket_path(kids: Children) -> str:
    """The project's public socket path (creating the private runtime dir, as Highlander would)."""
    kids.runtime.mkdir(mode=0o700, exist_ok=True)
    secret = names_key(str(kids.runtime))
    paths = project_paths(str(kids.runtime), APP, os.path.realpath(kids.project), secret=secret)
    return paths.socket


def _nothing_signalled(kids: Children) -> None:
    signalled = [e for e in events(kids) if e["event"] in ("terminated", "killed")]
    assert signalled == [], signalled


# -- 1. another uid as a client ---------------------------------------------------

OTHER_UID_CLIENT = """
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(sys.argv[1])
got = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "got": got.hex()}))
"""


@pytest.fixture
def reachable_kids() -> Iterator[Children]:
    """Children under a fresh /tmp directory whose modes the test may open up (then restores)."""
    top = Path(tempfile.mkdtemp(prefix="hl-guard-"))
    children = Children(top)
    try:
        yield children
    finally:
        children.cleanup()
        for path in (top, children.runtime):
            if path.exists():
                path.chmod(0o700)
        shutil.rmtree(top, ignore_errors=True)


@needs_root
@needs_setpriv
def test_another_uid_is_dropped_before_hello(reachable_kids: Children, extras: Extras) -> None:
    kids = reachable_kids
    first = kids.start()
    assert first.wait_for("ready")["outcome"] == "claimed_free"
    (sock,) = kids.runtime.glob("*.sock")
    (state,) = kids.runtime.glob("*.state")
    assert _kinds(kids, "auth_failed") == []

    # Open the way for uid 12345 (the holder validated the 0700 dir at start).
    kids.tmp.chmod(0o711)
    kids.runtime.chmod(0o711)
    sock.chmod(0o666)
    try:
        client = extras.popen(
            [
                "setpriv",
                f"--reuid={OTHER_UID}",
                f"--regid={OTHER_UID}",
                "--clear-groups",
                SYSTEM_PYTHON,
                "-I",
                "-c",
                OTHER_UID_CLIENT,
                str(sock),
            ],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = client.communicate(timeout=WAIT)
    finally:
        sock.chmod(0o600)
        kids.runtime.chmod(0o700)
        kids.tmp.chmod(0o700)
    assert client.returncode == 0, err.decode()
    seen = json.loads(out)
    assert seen["uid"] == seen["euid"] == OTHER_UID
    assert seen["got"] == "", "the incumbent must say nothing to another uid"

    assert first.proc.poll() is None
    record = read_record(str(state))
    assert record is not None and record.pid == first.pid
    failed = _kinds(kids, "auth_failed")
    assert len(failed) == 1, failed
    assert f"uid {OTHER_UID}" in str(failed[0]["reason"])
    assert failed[0]["pid"] == first.pid
    assert failed[0]["peer_pid"] == client.pid  # setpriv execs: same pid

    friend = kids.start()
    assert friend.wait_for("ready")["outcome"] == "succeeded"
    first.wait_for("deposed")
    assert first.finish()[0] == 0


# -- 2. another uid listening on our path -----------------------------------------

FOREIGN_UID_LISTENER = """
import socket, sys, time
uid = int(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
s.listen(8)  # SO_PEERCRED records the credentials of listen()
report(event="ready", uid=os.getuid(), euid=os.geteuid())
time.sleep(600)
"""

PLAIN_LISTENER = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
report(event="ready")
time.sleep(600)
"""


def _foreign_listener(kids: Children, extras: Extras, code: str, *args: str) -> tuple[Child, str]:
    path = _socket_path(kids)
    listener = extras.helper(code, path, *args)
    listener.wait_for("ready")
    return listener, path


def _inode(path: str) -> tuple[int, int]:
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode)
    return st.st_dev, st.st_ino


@needs_root
def test_listener_of_another_uid_fails_auto_clearly(kids: Children, extras: Extras) -> None:
    foreign, path = _foreign_listener(kids, extras, FOREIGN_UID_LISTENER, str(OTHER_UID))
    assert foreign.heard[-1]["euid"] == OTHER_UID
    before = _inode(path)

    newcomer = kids.start()
    status, out, err = newcomer.finish()
    assert status == 1, err.decode()
    assert out == b""
    assert newcomer.heard == []
    last = last_stderr_line(err)
    assert last.startswith("highlander: "), err.decode()
    assert f"pid {foreign.pid}" in last or f"uid {OTHER_UID}" in last, last

    assert foreign.proc.poll() is None, "the foreign process must never be signalled"
    assert _inode(path) == before, "the foreign listener's path must not be replaced"
    _nothing_signalled(kids)


@needs_root
def test_listener_of_another_uid_in_warn_mode_runs_a_duplicate(
    kids: Children, extras: Extras
) -> None:
    foreign, path = _foreign_listener(kids, extras, FOREIGN_UID_LISTENER, str(OTHER_UID))
    before = _inode(path)

    newcomer = kids.start(env=kids.env(HIGHLANDER_MODE="warn"), hold=0.2)
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "duplicate"
    assert report["is_holder"] is False
    status, out, err = newcomer.finish()
    assert status == 0, err.decode()
    assert out == b""

    assert foreign.proc.poll() is None, "the foreign process must never be signalled"
    assert _inode(path) == before
    _nothing_signalled(kids)


# -- 3. a same-uid listener that is not Highlander ----------------------------------


def test_foreign_listener_of_our_uid_fails_auto(kids: Children, extras: Extras) -> None:
    plain, path = _foreign_listener(kids, extras, PLAIN_LISTENER)
    before = _inode(path)

    newcomer = kids.start()
    status, out, err = newcomer.finish()
    assert status == 1, err.decode()
    assert out == b""
    last = last_stderr_line(err)
    assert last.startswith("highlander: "), err.decode()
    assert "not a Highlander holder" in last, last
    assert f"pid {plain.pid}" in last, last

    assert plain.proc.poll() is None
    assert _inode(path) == before
    foreign = _kinds(kids, "foreign_listener")
    assert len(foreign) == 1 and foreign[0]["pid"] == newcomer.pid, foreign
    _nothing_signalled(kids)


def test_foreign_listener_of_our_uid_in_observe_mode_is_reported(
    kids: Children, extras: Extras
) -> None:
    plain, path = _foreign_listener(kids, extras, PLAIN_LISTENER)
    before = _inode(path)

    newcomer = kids.start(
        env=kids.env(HIGHLANDER_MODE="observe"), hold=0.2, timeouts={"hello": 0.5}
    )
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "duplicate"
    assert report["is_holder"] is False
    status, out, err = newcomer.finish()
    assert status == 0, err.decode()
    assert out == b""

    assert plain.proc.poll() is None
    assert _inode(path) == before
    kinds = [e["event"] for e in events(kids)]
    assert "foreign_listener" in kinds and "duplicate" in kinds, kinds
    _nothing_signalled(kids)


# -- 4. legacy lock files -----------------------------------------------------------


def _claim_with_legacy(kids: Children, legacy: Path) -> Child:
    child = kids.start(legacy_lock=str(legacy))
    report = child.wait_for("ready")
    assert report["outcome"] == "claimed_free"
    return child


def _legacy_events(kids: Children) -> list[dict[str, object]]:
    return [e for e in events(kids) if str(e["event"]).startswith("legacy_")]


def test_legacy_lock_of_a_dead_pid_is_removed(kids: Children, extras: Extras) -> None:
    gone = extras.popen(["true"])
    gone.wait(timeout=WAIT)
    legacy = kids.tmp / "old.pid"
    legacy.write_text(f"{gone.pid}\n")

    child = _claim_with_legacy(kids, legacy)
    assert not legacy.exists()
    (event,) = _legacy_events(kids)
    assert event["event"] == "legacy_removed"
    assert event["pid"] == child.pid
    assert event["holder_pid"] == gone.pid
    assert f"pid {gone.pid} is dead" in str(event["reason"])


def test_legacy_lock_of_a_live_pid_is_kept(kids: Children, extras: Extras) -> None:
    sleeper = extras.popen(["sleep", "600"])
    legacy = kids.tmp / "old.pid"
    legacy.write_text(f"{sleeper.pid}\n")  # written after the process started

    _claim_with_legacy(kids, legacy)
    assert legacy.read_text() == f"{sleeper.pid}\n"
    (event,) = _legacy_events(kids)
    assert event["event"] == "legacy_kept"
    assert event["holder_pid"] == sleeper.pid
    assert "may still hold" in str(event["reason"])
    assert sleeper.poll() is None, "a possible legacy holder must never be signalled"


def test_legacy_lock_of_a_reused_pid_is_removed(kids: Children, extras: Extras) -> None:
    sleeper = extras.popen(["sleep", "600"])
    legacy = kids.tmp / "old.pid"
    legacy.write_text(f"{sleeper.pid}\n")
    an_hour_ago = time.time() - 3600
    os.utime(legacy, (an_hour_ago, an_hour_ago))  # written long before the pid's process began

    _claim_with_legacy(kids, legacy)
    assert not legacy.exists()
    (event,) = _legacy_events(kids)
    assert event["event"] == "legacy_removed"
    assert event["holder_pid"] == sleeper.pid
    assert "reused" in str(event["reason"])
    assert sleeper.poll() is None, "the pid's current owner must never be signalled"


@pytest.mark.parametrize("content", [b"", b"garbage, not a number\n"], ids=["empty", "garbage"])
def test_legacy_lock_without_a_pid_is_kept(kids: Children, content: bytes) -> None:
    legacy = kids.tmp / "old.pid"
    legacy.write_bytes(content)

    _claim_with_legacy(kids, legacy)
    assert legacy.read_bytes() == content
    (event,) = _legacy_events(kids)
    assert event["event"] == "legacy_kept"
    assert "no pid" in str(event["reason"])


def test_legacy_lock_is_untouched_by_a_succession(kids: Children) -> None:
    legacy = kids.tmp / "old.pid"
    first = _claim_with_legacy(kids, legacy)  # no legacy file yet: nothing to decide
    legacy.write_text(f"{first.pid}\n")  # the holder itself wrote the old-style pid file

    second = kids.start(legacy_lock=str(legacy))
    assert second.wait_for("ready")["outcome"] == "succeeded"
    first.wait_for("deposed")
    status, out, err = first.finish()
    assert status == 0, err.decode()  # left through its hook, not by a signal
    assert out == b""

    assert legacy.read_text() == f"{first.pid}\n"
    assert _legacy_events(kids) == []
    _nothing_signalled(kids)
    assert second.proc.poll() is None


# -- 5. orphaned holders ------------------------------------------------------------


def test_orphaned_holder_leaves_and_frees_the_project(kids: Children, extras: Extras) -> None:
    parent, holder, pidfd = extras.start_via_parent()
    assert parent.heard[-1]["outcome"] == "claimed_free"
    assert list(kids.runtime.glob("*.sock"))
    assert not exited(pidfd, 0)

    os.kill(parent.pid, signal.SIGKILL)
    assert parent.proc.wait(timeout=WAIT) == -signal.SIGKILL
    deposed = parent.wait_for("deposed")  # the grandchild's hook, on the inherited pipe
    assert deposed["pid"] == holder
    assert exited(pidfd, WAIT), f"the orphaned holder did not exit: {extras.grandchild_stderr()}"

    (orphaned,) = _kinds(kids, "orphaned")
    assert orphaned["pid"] == holder
    assert orphaned["peer_pid"] == parent.pid
    assert list(kids.runtime.glob("*.sock")) == [], "the orphan must remove its socket"

    fresh = kids.start()
    report = fresh.wait_for("ready")
    assert report["outcome"] == "claimed_free"
    assert report["generation"] == 2
    _nothing_signalled(kids)


def test_holder_may_outlive_its_parent(kids: Children, extras: Extras) -> None:
    parent, holder, pidfd = extras.start_via_parent(exit_when_orphaned=False)
    assert parent.heard[-1]["outcome"] == "claimed_free"

    os.kill(parent.pid, signal.SIGKILL)
    assert parent.proc.wait(timeout=WAIT) == -signal.SIGKILL
    # A negative check needs a window: an orphan watcher reacts within
    # milliseconds of the parent's exit (see the test above).
    assert not exited(pidfd, 0.5), extras.grandchild_stderr()
    assert _kinds(kids, "orphaned") == []

    newcomer = kids.start()
    assert newcomer.wait_for("ready")["outcome"] == "succeeded"
    assert parent.wait_for("deposed")["pid"] == holder
    assert exited(pidfd, WAIT)
    assert _kinds(kids, "orphaned") == []
    _nothing_signalled(kids)


# -- 6. nothing in highlander/ signals a process, except the verified kill ----------

SIGNAL_MODULES = {"os", "signal", "subprocess"}
KILL_FUNCTIONS = {("os", "kill"), ("os", "killpg"), ("signal", "pthread_kill")}
PIDFD_SIGNAL = ("signal", "pidfd_send_signal")
ALLOWED_PIDFD = {"highlander/_host/termination.py"}
#: ``highlander run`` signals the group of its own unreaped child, whose id cannot be reused.
GROUP_SIGNAL = ("os", "killpg")
ALLOWED_GROUP = {"highlander/_host/termination.py"}
RUNNERS = {
    ("subprocess", name)
    for name in ("run", "Popen", "call", "check_call", "check_output", "getoutput")
} | {("subprocess", "getstatusoutput"), ("os", "system"), ("os", "popen")}
RUNNERS |= {("os", name) for name in dir(os) if name.startswith(("exec", "spawn", "posix_spawn"))}
KILL_COMMANDS = {"kill", "pkill", "killall", "skill"}
#: Methods that signal a child process (Popen, asyncio and anyio processes).
KILL_METHODS = {"kill", "send_signal", "terminate"}


def _names(tree: ast.AST) -> dict[str, tuple[str, ...]]:
    """Local name -> what it refers to: ``("os",)`` for a module, ``("os", "kill")`` for a name."""
    names: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in SIGNAL_MODULES:
                    names[alias.asname or alias.name] = (alias.name,)
        elif isinstance(node, ast.ImportFrom) and node.module in SIGNAL_MODULES and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = (node.module, alias.name)
    return names


def _target(node: ast.AST, names: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """``("os", "kill")`` for ``os.kill`` / ``o.kill`` / ``kill`` (as imported), else None."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        module = names.get(node.value.id)
        if module is not None and len(module) == 1:
            return (module[0], node.attr)
    return None


def _runs_kill_command(call: ast.Call) -> bool:
    """Whether a command-running call's arguments name a kill command."""
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        for node in ast.walk(arg):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = node.value.split()
                if words and os.path.basename(words[0]) in KILL_COMMANDS:
                    return True
    return False


def signalling_violations(source: str, filename: str) -> list[str]:
    """Every way ``source`` (module file ``filename``) could signal a process, unverified.

    Code only: comments and docstrings never count.  ``pidfd_send_signal``
    (and ``killpg``, for the group of our own unreaped child) is allowed in
    highlander/_host/termination.py alone.
    """
    tree = ast.parse(source, filename=filename)
    names = _names(tree)
    problems: list[str] = []
    base = filename.replace(os.sep, "/")  # the path in the repository: one file is allowed
    for node in ast.walk(tree):
        line = f"{filename}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom) and node.module in SIGNAL_MODULES:
            for alias in node.names:
                imported = (node.module, alias.name)
                if imported in KILL_FUNCTIONS and not _allowed_group(imported, base):
                    problems.append(f"{line}: imports {'.'.join(imported)}")
                if imported == PIDFD_SIGNAL and base not in ALLOWED_PIDFD:
                    problems.append(f"{line}: imports signal.pidfd_send_signal")
        target = _target(node, names)
        if target in KILL_FUNCTIONS and not _allowed_group(target, base):
            problems.append(f"{line}: uses {'.'.join(target)}")
        pidfd = target == PIDFD_SIGNAL or (
            isinstance(node, ast.Attribute) and node.attr == "pidfd_send_signal"
        )
        if pidfd and base not in ALLOWED_PIDFD:
            problems.append(f"{line}: uses pidfd_send_signal outside the verified kill")
        if isinstance(node, ast.Call):
            called = _target(node.func, names)
            if called in RUNNERS and _runs_kill_command(node):
                problems.append(f"{line}: runs a kill command through {'.'.join(called)}")
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and called is None
                and func.attr in KILL_METHODS
                and not (func.attr == "terminate" and node.args)  # _termination.terminate(...)
            ):
                problems.append(f"{line}: calls .{func.attr}() on a process")
    return problems


def _allowed_group(target: tuple[str, ...] | None, base: str) -> bool:
    return target == GROUP_SIGNAL and base in ALLOWED_GROUP


def _package_sources() -> list[Path]:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 10, sources
    return sources


def test_nothing_in_highlander_signals_except_the_verified_kill() -> None:
    problems: list[str] = []
    for path in _package_sources():
        problems += signalling_violations(path.read_text(), str(path.relative_to(REPO)))
    assert problems == []


def test_pidfd_send_signal_is_used_by_the_verified_kill() -> None:
    source = (PACKAGE / "_host" / "termination.py").read_text()
    calls = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "pidfd_send_signal"
    ]
    assert calls, "the verified kill no longer signals through a pidfd"
    for path in _package_sources():
        if str(path.relative_to(REPO)) not in ALLOWED_PIDFD:
            tree = ast.parse(path.read_text())
            used = [
                n
                for n in ast.walk(tree)
                if (isinstance(n, ast.Attribute) and n.attr == "pidfd_send_signal")
                or (isinstance(n, ast.Name) and n.id == "pidfd_send_signal")
            ]
            assert used == [], path


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.kill(1, 9)\n",
        "import os\nos.killpg(1, 9)\n",
        "import os as o\no.kill(1, 9)\n",
        "from os import kill\nkill(1, 9)\n",
        "from os import kill as k\n",
        "import os\nf = os.kill\n",
        "import signal\nsignal.pthread_kill(1, 9)\n",
        "from signal import pthread_kill\n",
        "import signal\nsignal.pidfd_send_signal(3, 9)\n",
        "from signal import pidfd_send_signal as s\ns(3, 9)\n",
        "import subprocess\nsubprocess.run(['kill', '-9', '1'])\n",
        "import subprocess as sp\nsp.Popen('pkill -f server', shell=True)\n",
        "from subprocess import check_call\ncheck_call(['/bin/kill', '1'])\n",
        "import os\nos.system('killall python')\n",
        "import os\nos.execvp('kill', ['kill', '1'])\n",
        "proc.kill()\n",
        "proc.terminate()\n",
        "proc.send_signal(15)\n",
        "def f():\n    import os\n    os.kill(1, 9)\n",
    ],
)
def test_the_checker_catches_a_violation(source: str) -> None:
    assert signalling_violations(source, "highlander/_example.py")


@pytest.mark.parametrize(
    "source",
    [
        '"""Nothing here calls os.kill or os.killpg or signal.pthread_kill."""\n',
        "# os.kill(1, 9) would be wrong\nx = 1\n",
        "import os\nos.getpid()\n",
        "import subprocess\nsubprocess.run(['ls', '-l'])\n",
        "terminate(expected, timeouts, events, 'why')\n",
        "s = 'signal.pidfd_send_signal'\n",
    ],
)
def test_the_checker_ignores_harmless_code(source: str) -> None:
    assert signalling_violations(source, "highlander/_example.py") == []


def test_the_checker_allows_killpg_only_in_the_verified_kill() -> None:
    source = "import os\nos.killpg(7, 15)\n"
    assert signalling_violations(source, "highlander/_host/termination.py") == []
    assert signalling_violations(source, "highlander/_commands/tree.py")
    assert signalling_violations("import os\nos.kill(7, 15)\n", "highlander/_host/termination.py")


def test_the_checker_allows_pidfd_send_signal_only_in_the_verified_kill() -> None:
    source = "import signal\nsignal.pidfd_send_signal(3, signal.SIGTERM)\n"
    assert signalling_violations(source, "highlander/_host/termination.py") == []
    assert signalling_violations(source, "highlander/_shell/incumbent.py")
