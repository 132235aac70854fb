"""``highlander run`` owns its command's whole process tree (issue #12), with real processes.

Each test runs wrapped trees like ``sh -> npm-like launcher -> server``
(tests/programs/tree.py), where only the grandchild serves, and does to them
what clients and the kernel do: a successor, SIGKILL, SIGSTOP, SIGTERM to a
duplicate.  Afterwards exactly one server of the test's app is alive, and no
process outside the trees (a bystander, the surviving holder's server) got
a signal.  Servers report ``ready`` and every signal they get through a
FIFO; every process a test starts is ended by pid (through a pidfd) at the
end.  Waits are bounded hang guards, never timing assertions.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.proctools import WAIT, Children, wait_stopped
from tests.support.treetools import TREE, Trees


@pytest.fixture
def trees(kids: Children) -> Iterator[Trees]:
    found = Trees(kids)
    try:
        yield found
    finally:
        found.cleanup()


def claims(kids: Children) -> dict[int, str]:
    return {e["pid"]: e["outcome"] for e in kids.events("claimed")}


# -- a successor ends the whole tree ----------------------------------------------------


def test_succession_ends_the_grandchild_that_serves(trees: Trees, kids: Children) -> None:
    a_wrapper = trees.wrap("a")
    a = trees.ready("a")
    assert a["ppid"] != a_wrapper.pid, "the server is a grandchild, under the launcher"
    b_wrapper = trees.wrap("b")
    b = trees.ready("b")
    trees.gone(a["pid"])
    assert trees.exit_status("a") == 0, trees.errors()  # deposed: 0, whatever ended sh
    assert trees.signals() == {"a": [signal.SIGTERM]}
    trees.check_only(b["pid"])
    assert claims(kids)[b_wrapper.pid] == "succeeded"
    (exited,) = [e for e in kids.events("command_exited") if e["pid"] == a_wrapper.pid]
    assert exited["exit_status"] == 128 + signal.SIGTERM  # sh itself died of the SIGTERM


def test_succession_ends_a_grandchild_that_left_the_session(trees: Trees, kids: Children) -> None:
    trees.wrap("a", "--setsid")
    a = trees.ready("a")
    assert a["sid"] == a["pid"], "the server runs in a session of its own"
    trees.wrap("b")
    b = trees.ready("b")
    trees.gone(a["pid"])
    assert trees.exit_status("a") == 0, trees.errors()
    trees.check_only(b["pid"])


def test_a_command_that_ignores_sigterm_is_killed_after_the_wind_down(
    trees: Trees, kids: Children
) -> None:
    a_wrapper = trees.wrap("a", "--ignore-term", tree=False, wind_down=1)
    a = trees.ready("a")
    b_wrapper = trees.wrap("b")
    b = trees.ready("b")
    trees.gone(a["pid"])
    assert trees.exit_status("a") == 0, trees.errors()
    trees.check_only(b["pid"])
    assert claims(kids)[b_wrapper.pid] == "succeeded"
    assert [e["pid"] for e in kids.events("tree_killed")] == [a_wrapper.pid]
    assert not kids.events("hung"), "the successor took the winding-down wrapper for hung"


def test_a_slow_exit_past_the_stall_deadline_is_not_a_hang(trees: Trees, kids: Children) -> None:
    a_wrapper = trees.wrap("a", "--slow-exit", "4", tree=False)
    a = trees.ready("a")
    # The successor gives up on a save that does not advance for 1.5 s; the
    # command needs 4 s to exit, and the wrapper keeps reporting meanwhile.
    timeouts = {"hello": 2, "request": 5, "stall": 1.5, "ceiling": 60, "exit_grace": 5}
    successor = kids.start(env=trees.env(), app=trees.app, timeouts=timeouts)
    successor.wait_for("ready")
    trees.gone(a["pid"])
    assert trees.exit_status("a") == 0, trees.errors()
    assert trees.servers() == []  # the successor (a library holder) is the one server now
    assert claims(kids)[successor.pid] == "succeeded"
    assert not kids.events("hung") and not kids.events("killed"), trees.errors()
    notes = [e["note"] for e in kids.events("progress") if e["peer_pid"] == a_wrapper.pid]
    assert sum("waiting for" in note for note in notes) >= 2, notes
    assert list(trees.signals()) == ["a"]


# -- the wrapper dies without warning ---------------------------------------------------


def test_a_sigkilled_wrapper_takes_its_tree_along(trees: Trees, kids: Children) -> None:
    a_wrapper = trees.wrap("a")
    a = trees.ready("a")
    a_wrapper.kill()
    assert trees.exit_status("a") == -signal.SIGKILL
    trees.gone(a["pid"])  # the guard ended the group
    trees.wrap("b")
    b = trees.ready("b")
    trees.check_only(b["pid"])


def test_a_successor_ends_what_a_sigkilled_wrapper_left_outside_its_group(
    trees: Trees, kids: Children
) -> None:
    a_wrapper = trees.wrap("a", "--setsid")
    a = trees.ready("a")
    _recorded(kids, a["pid"])
    a_wrapper.kill()
    assert trees.exit_status("a") == -signal.SIGKILL
    b_wrapper = trees.wrap("b")
    b = trees.ready("b")
    trees.gone(a["pid"])
    trees.check_only(b["pid"])
    ended = [e for e in kids.events("terminated") if e["pid"] == b_wrapper.pid]
    assert [e["peer_pid"] for e in ended] == [a["pid"]]


def _recorded(kids: Children, pid: int) -> None:
    """Wait (bounded) until the holder's tree record lists ``pid``."""
    import time

    until = time.monotonic() + WAIT
    while time.monotonic() < until:
        for path in kids.runtime.glob("*.tree"):
            with contextlib.suppress(OSError, ValueError):
                if pid in [p for p, _ in json.loads(path.read_text())["processes"]]:
                    return
        time.sleep(0.05)
    raise AssertionError(f"no tree record lists pid {pid} after {WAIT} s")


def test_a_new_holder_ends_only_what_the_record_names_and_the_kernel_confirms(
    trees: Trees, kids: Children
) -> None:
    """A record left by a dead wrapper: its process is ended, a pid with another start time not."""
    from highlander._commands.tree_record import tree_path
    from highlander._host.identity import boot_id, process_identity
    from highlander._host.settings import Settings

    argv = [sys.executable, str(TREE), "server", "--tag", f"{trees.app}-old"]
    trees.wrappers["old"] = subprocess.Popen(argv, env=trees.env(), stdin=subprocess.DEVNULL)
    old = trees.ready("old")
    settings = Settings.resolve(
        app=trees.app,
        project=None,
        mode=None,
        token=None,
        timeouts=None,
        runtime_dir=None,
        env=trees.env(),
    )
    start = {}
    for pid in (old["pid"], trees.bystander):
        identity = process_identity(pid)
        assert identity is not None
        start[pid] = identity.start_time
    record = {
        "boot_id": boot_id(),
        "wrapper": [old["pid"], start[old["pid"]]],
        "generation": 1,
        "pgid": old["pid"],
        # The bystander's pid with a start time that is not its own: a reused pid.
        "processes": [
            [old["pid"], start[old["pid"]]],
            [trees.bystander, start[trees.bystander] + 1],
        ],
    }
    Path(tree_path(settings)).write_text(json.dumps(record))
    b_wrapper = trees.wrap("b")
    b = trees.ready("b")
    trees.gone(old["pid"])
    trees.check_only(b["pid"])
    ended = [e["peer_pid"] for e in kids.events("terminated") if e["pid"] == b_wrapper.pid]
    assert ended == [old["pid"]]


def test_a_stopped_wrapper_is_replaced_and_its_tree_ends(trees: Trees, kids: Children) -> None:
    a_wrapper = trees.wrap("a")
    a = trees.ready("a")
    a_wrapper.send_signal(signal.SIGSTOP)
    wait_stopped(a_wrapper.pid)
    b_wrapper = trees.wrap("b")
    b = trees.ready("b")
    assert trees.exit_status("a") == -signal.SIGKILL  # the successor's verified kill
    trees.gone(a["pid"])
    trees.check_only(b["pid"])
    assert claims(kids)[b_wrapper.pid] == "claimed_stale"


# -- signals to the wrapper -------------------------------------------------------------


@pytest.mark.parametrize("mode", ["observe", "warn"])
def test_a_duplicate_ends_its_tree_on_sigterm(trees: Trees, kids: Children, mode: str) -> None:
    trees.wrap("holder", mode=mode)
    holder = trees.ready("holder")
    duplicate = trees.wrap("dup", mode=mode)
    dup = trees.ready("dup")
    assert [e["pid"] for e in kids.events("duplicate")] == [duplicate.pid]
    duplicate.send_signal(signal.SIGTERM)
    assert trees.exit_status("dup") == 128 + signal.SIGTERM  # sh died of it: its status
    trees.gone(dup["pid"])
    trees.check_only(holder["pid"])
    assert list(trees.signals()) == ["dup"], "a process outside the duplicate's tree got a signal"


def test_a_holder_ends_its_tree_on_sigterm(trees: Trees, kids: Children) -> None:
    wrapper = trees.wrap("a")
    a = trees.ready("a")
    wrapper.send_signal(signal.SIGTERM)
    assert trees.exit_status("a") == 128 + signal.SIGTERM
    trees.gone(a["pid"])
    assert trees.servers() == []
    assert "released" in [e["event"] for e in kids.events() if e["pid"] == wrapper.pid]
    assert list(trees.signals()) == ["a"]


def test_wind_down_must_fit_in_the_successors_patience(kids: Children) -> None:
    for value in ("0", "1000", "soon"):
        done = subprocess.run(
            [sys.executable, "-m", "highlander.cli", "run", "--wind-down", value, "--", "true"],
            env=kids.env(),
            capture_output=True,
            timeout=WAIT,
            check=False,
        )
        assert done.returncode == 2
        assert b"argument --wind-down:" in done.stderr, done.stderr
