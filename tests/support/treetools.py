"""Wrapped process trees for tests/cli/test_run_tree.py: started, heard from, counted, ended by pid.

``Trees`` runs ``highlander run`` around ``sh -> launcher -> server``
(tests/programs/tree.py) for one test's app, reads the servers' reports
(``ready``, and every signal they get) from a FIFO, counts the app's live
servers in ``/proc``, and keeps a bystander outside every tree that must
never be signalled.  Everything it starts is ended by pid in ``cleanup``.
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
from typing import Any

from tests.support.paths import PROGRAMS
from tests.support.proctools import WAIT, Children, readable

TREE = PROGRAMS / "tree.py"


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
