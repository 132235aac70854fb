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
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proctools import WAIT, Children, readable

TREE = Path(__file__).resolve().parent / "programs" / "tree.py"


class Trees:
    """The wrappers, servers and bystander of one test; all of them ended by pid."""

    def __init__(self, kids: Children) -> None:
        self.kids = kids
        #: This test's app: its servers' tags start with it, nobody else's do.
        self.app = f"tree-{uuid.uuid4().hex[:8]}"
        self.fifo = kids.tmp / "report.fifo"
        os.mkfifo(self.fifo)
        self.reports = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)
        # Our own idle writer: the FIFO never reads as end-of-file between servers.
        self.writer = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        self.buffer = b""
        self.heard: list[dict[str, Any]] = []
        self.wrappers: dict[str, subprocess.Popen[bytes]] = {}
        self.pidfds: dict[int, int] = {}
        self.bystander = self._start_bystander()

    def env(self, **extra: str) -> dict[str, str]:
        return self.kids.env(TREE_REPORT=str(self.fifo), **extra)

    def _start_bystander(self) -> int:
        """A process outside every tree, in the test's own session: it must never be signalled."""
        tag = f"bystander-{self.app}"
        argv = [sys.executable, str(TREE), "server", "--tag", tag]
        proc = subprocess.Popen(argv, env=self.env(), stdin=subprocess.DEVNULL)
        self.wrappers["bystander"] = proc
        return int(self._ready(tag)["pid"])

    def wrap(
        self,
        tag: str,
        *server: str,
        tree: bool = True,
        mode: str = "auto",
        wind_down: float | None = None,
    ) -> subprocess.Popen[bytes]:
        """``highlander run`` around ``sh -> launcher -> server`` (``tree=False``: the server)."""
        serve = [sys.executable, str(TREE), "server", "--tag", f"{self.app}-{tag}", *server]
        if tree:
            launch = [sys.executable, str(TREE), "launcher", *serve]
            serve = ["sh", "-c", '"$@"; exit $?', "sh", *launch]  # the exit keeps sh a parent
        limit = ["--wind-down", str(wind_down)] if wind_down is not None else []
        argv = [sys.executable, "-m", "highlander.cli", "run", "--app", self.app, *limit]
        argv += ["--", *serve]
        out = open(self.kids.tmp / f"{tag}.out", "wb")  # noqa: SIM115 - the child has it now
        err = open(self.kids.tmp / f"{tag}.err", "wb")  # noqa: SIM115
        with out, err:
            proc = subprocess.Popen(
                argv,
                env=self.env(HIGHLANDER_MODE=mode),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.wrappers[tag] = proc
        return proc

    def ready(self, tag: str) -> dict[str, Any]:
        """The ``ready`` report of this app's server ``tag`` (its pidfd opened at once)."""
        return self._ready(f"{self.app}-{tag}")

    def _ready(self, tag: str) -> dict[str, Any]:
        while True:
            for report in self.heard:
                if report["event"] == "ready" and report["tag"] == tag:
                    return report
            assert self._read(WAIT), f"no report in {WAIT} s; heard {self.heard}"

    def _read(self, timeout: float) -> bool:
        """Take in the reports that arrive within ``timeout``; ``False`` if none did."""
        if not readable([self.reports], timeout):
            return False
        self.buffer += os.read(self.reports, 65536)
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            report = json.loads(line)
            self.heard.append(report)
            if report["event"] == "ready":
                with contextlib.suppress(ProcessLookupError):
                    self.pidfds[report["pid"]] = os.pidfd_open(report["pid"])
        return True

    def gone(self, pid: int) -> None:
        """Wait (bounded, on its pidfd) until server ``pid`` has ended."""
        fd = self.pidfds[pid]
        assert readable([fd], WAIT), f"server {pid} still runs {WAIT} s later: {self.errors()}"

    def exit_status(self, tag: str) -> int:
        return self.wrappers[tag].wait(timeout=WAIT)

    def servers(self) -> list[int]:
        """The live servers of this test's app, found in /proc by their tag."""
        mark = f"{TREE}\0server\0--tag\0{self.app}-".encode()
        # The server's command line starts so; sh's, the launcher's, the wrapper's contain it.
        return sorted(pid for pid, argv in _processes() if argv.split(b"\0", 1)[1].startswith(mark))

    def signals(self) -> dict[str, list[int]]:
        """The signals each server reported, by tag without the app (reports so far)."""
        while self._read(0):
            pass
        found: dict[str, list[int]] = {}
        for report in self.heard:
            if report["event"] == "signal":
                tag = report["tag"].removeprefix(f"{self.app}-")
                found.setdefault(tag, []).append(report["signal"])
        return found

    def check_only(self, survivor: int) -> None:
        """Exactly one server of the app is left, ``survivor``; no bystander was signalled."""
        assert self.servers() == [survivor]
        heard = self.signals()
        assert f"bystander-{self.app}" not in heard, heard
        assert os.path.exists(f"/proc/{self.bystander}")
        for tag in self.wrappers:
            out = self.kids.tmp / f"{tag}.out"
            assert not out.exists() or out.read_bytes() == b"", f"{tag} wrote to stdout"

    def errors(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')}"
            for path in sorted(self.kids.tmp.glob("*.err"))
        )

    def cleanup(self) -> None:
        for proc in self.wrappers.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)  # our unreaped child: its pid is ours
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=WAIT)
        for fd in self.pidfds.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        for pid, argv in _processes():  # a launcher or sh that outlived its wrapper
            if self.app.encode() in argv:
                _kill_if(pid, argv)
        os.close(self.reports)
        os.close(self.writer)


def _processes() -> Iterator[tuple[int, bytes]]:
    """(pid, NUL-separated command line) of every live process of this test run's programs."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = handle.read()
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X") and str(TREE).encode() in argv:
            yield int(name), argv


def _kill_if(pid: int, argv: bytes) -> None:
    """SIGKILL ``pid`` through a pidfd if it still has command line ``argv``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if handle.read() == argv:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass
    finally:
        os.close(fd)


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


def test_a_stopped_wrapper_is_replaced_and_its_tree_ends(trees: Trees, kids: Children) -> None:
    a_wrapper = trees.wrap("a")
    a = trees.ready("a")
    a_wrapper.send_signal(signal.SIGSTOP)
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
