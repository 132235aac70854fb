"""The processes of a chaos run: started, watched, signalled and ended by the harness.

Holder candidates are tests/programs/child.py, started with the tests' own
``Children.start`` (tests/proctools.py) and heard through its ``Child``
report pipe.  Every process the harness starts gets a pidfd at once (it is
our unreaped child, so the pid cannot have been reused yet) and a reaper
thread that records the moment the process ended; every signal the harness
sends goes through that pidfd, so it can never reach a reused pid.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))

from proctools import TOKEN, Child, Children  # noqa: E402

from highlander._deadlines import Timeouts  # noqa: E402
from highlander._events import EventLog  # noqa: E402
from highlander._identity import process_identity  # noqa: E402
from highlander._settings import Settings  # noqa: E402

#: Bound on any single wait for a process to end after SIGKILL.
KILL_WAIT = 10.0
#: The last line of a traceback: ``SomeError: message``.
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")
#: Bytes of each child's stderr kept for the report (the tail).
STDERR_KEEP = 65536


@dataclass(eq=False)
class Proc:
    """One process the harness started, and everything it learnt about it."""

    role: str  # "child" (a Highlander process), "bystander" (sleep) or "dead" (true)
    popen: subprocess.Popen[bytes]
    pidfd: int
    start_time: int
    step: int
    spawn_ns: int
    spawn_wall: float
    cfg: dict[str, Any] | None = None
    child: Child | None = None
    exit_ns: int | None = None
    exit_wall: float | None = None
    returncode: int | None = None
    #: When the harness sent SIGKILL (the process never ran user code after it).
    killed_ns: int | None = None
    signals: list[tuple[str, int]] = field(default_factory=list)
    stopped: bool = False
    ready: dict[str, Any] | None = None
    ready_ns: int | None = None
    deposed: bool = False
    stdout_bytes: int = 0
    stderr_tail: bytes = b""
    open_fds: set[int] = field(default_factory=set)
    reaper: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.exit_ns is None

    @property
    def believes(self) -> bool:
        """Alive, became holder and has not been deposed: a holder in its own eyes."""
        held = self.ready is not None and bool(self.ready.get("is_holder"))
        return held and not self.deposed and self.alive

    def stopped_at(self, ns: float) -> bool:
        """Whether the harness had this process stopped (SIGSTOP not yet undone) at ``ns``."""
        state = False
        for name, at in self.signals:
            if at > ns:
                break
            if name in ("SIGSTOP", "SIGCONT"):
                state = name == "SIGSTOP"
        return state

    def exception(self) -> str:
        """The exception a traceback on stderr ended with, and where it was raised."""
        lines = self.stderr_tail.decode(errors="replace").splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
        if not starts:
            return ""
        tail = lines[starts[-1] :]
        frames = [ln.strip() for ln in tail if ln.strip().startswith("File ")]
        # Log lines from the library's log thread may interleave with the traceback.
        raised = [ln for ln in tail if _EXCEPTION.match(ln)]
        return f"{raised[0] if raised else '?'} (at {frames[-1] if frames else '?'})"

    def last_error(self) -> str:
        """The one-line reason a failing Highlander process gives (``highlander: ...``)."""
        lines = self.stderr_tail.decode(errors="replace").strip().splitlines()
        said = [line for line in lines if line.startswith("highlander: ")]
        return said[-1] if said else (lines[-1] if lines else "")

    def describe(self) -> dict[str, Any]:
        """Everything known about this process, for ``--keep``."""
        return {
            "role": self.role,
            "pid": self.pid,
            "start_time": self.start_time,
            "step": self.step,
            "cfg": self.cfg,
            "spawn_ns": self.spawn_ns,
            "exit_ns": self.exit_ns,
            "returncode": self.returncode,
            "killed_ns": self.killed_ns,
            "signals": self.signals,
            "ready": self.ready,
            "ready_ns": self.ready_ns,
            "deposed": self.deposed,
            "stderr": self.stderr_tail.decode(errors="replace"),
        }


class Lab:
    """One project, one runtime directory, and every process of the run."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kids = Children(root)  # project dir, runtime dir, witness file, env
        self.legacy = root / "legacy.pid"
        self.procs: list[Proc] = []
        self._fd_owner: dict[int, tuple[Proc, str]] = {}
        self._ended = False
        #: (wall clock, monotonic ns) pairs, to place event-log timestamps on the witness clock.
        self.clock: list[tuple[float, int]] = [(time.time(), time.monotonic_ns())]
        self.settings = Settings.resolve(
            app="chaos",
            project=self.kids.project,
            mode="auto",
            token=TOKEN,
            timeouts=Timeouts(hello=0.5),
            runtime_dir=self.kids.runtime,
        )
        # Status queries from the harness are not decisions of the project: no log lines.
        self.settings.events = EventLog(None, app="chaos", mode="auto", quiet=True)

    @property
    def paths(self) -> Any:
        return self.settings.paths

    # -- starting ---------------------------------------------------------------

    def _register(
        self,
        role: str,
        popen: subprocess.Popen[bytes],
        step: int,
        born: tuple[int, float],
        **extra: Any,
    ) -> Proc:
        pidfd = os.pidfd_open(popen.pid)
        ident = process_identity(popen.pid)
        proc = Proc(
            role=role,
            popen=popen,
            pidfd=pidfd,
            start_time=ident.start_time if ident else -1,
            step=step,
            spawn_ns=born[0],
            spawn_wall=born[1],
            **extra,
        )
        proc.reaper = threading.Thread(target=_reap, args=(proc,), daemon=True)
        proc.reaper.start()
        self.procs.append(proc)
        return proc

    def start_child(self, step: int, cfg: dict[str, Any]) -> Proc:
        """Start tests/programs/child.py with ``cfg`` (the tests' own spawn helper)."""
        born = _now()  # before the process exists: its first line can only come later
        child = self.kids.start(**cfg)
        proc = self._register("child", child.proc, step, born, cfg=cfg, child=child)
        self._fd_owner[child.reports] = (proc, "reports")
        proc.open_fds.add(child.reports)
        for name in ("stdout", "stderr"):
            stream = getattr(child.proc, name)
            self._fd_owner[stream.fileno()] = (proc, name)
            proc.open_fds.add(stream.fileno())
        return proc

    def start_bystander(self, step: int) -> Proc:
        """An unrelated live process (``sleep``) whose pid the chaos plants in records."""
        born = _now()
        popen = subprocess.Popen(
            ["sleep", "3600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self._register("bystander", popen, step, born)

    def dead_pid(self, step: int) -> int:
        """The pid of a process that has ended (and been reaped)."""
        born = _now()
        popen = subprocess.Popen(["true"], stdin=subprocess.DEVNULL)
        proc = self._register("dead", popen, step, born)
        assert proc.reaper is not None
        proc.reaper.join(KILL_WAIT)
        return proc.pid

    # -- signals ------------------------------------------------------------------

    def send(self, proc: Proc, signum: signal.Signals) -> bool:
        """Signal ``proc`` through its pidfd; ``False`` if it has already ended."""
        if not proc.alive:
            return False
        try:
            signal.pidfd_send_signal(proc.pidfd, signum)
        except ProcessLookupError:
            return False
        now = time.monotonic_ns()
        proc.signals.append((signum.name, now))
        if signum == signal.SIGKILL and proc.killed_ns is None:
            proc.killed_ns = now
        if signum == signal.SIGSTOP:
            proc.stopped = True
        elif signum == signal.SIGCONT:
            proc.stopped = False
        return True

    # -- listening ----------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        """Read whatever the children wrote (reports, stdout, stderr), waiting up to ``timeout``."""
        wall, mono = time.time(), time.monotonic_ns()
        if wall - self.clock[-1][0] >= 0.05:
            self.clock.append((wall, mono))
        fds = list(self._fd_owner)
        if not fds:
            time.sleep(timeout)
            return
        readable, _, _ = select.select(fds, [], [], timeout)
        for fd in readable:
            proc, what = self._fd_owner[fd]
            if what == "reports":
                self._read_reports(proc, fd)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self._forget(proc, fd)
            elif what == "stdout":
                proc.stdout_bytes += len(chunk)
            else:
                proc.stderr_tail = (proc.stderr_tail + chunk)[-STDERR_KEEP:]

    def _read_reports(self, proc: Proc, fd: int) -> None:
        assert proc.child is not None
        while True:
            try:
                report = proc.child.next_report(0.01)
            except TimeoutError:
                return
            if report is None:
                self._forget(proc, fd)
                return
            if report.get("event") == "ready":
                proc.ready, proc.ready_ns = report, time.monotonic_ns()
            elif report.get("event") == "deposed":
                proc.deposed = True

    def _forget(self, proc: Proc, fd: int) -> None:
        del self._fd_owner[fd]
        proc.open_fds.discard(fd)

    def wait_until(self, done: Any, timeout: float) -> bool:
        """Pump until ``done()`` holds or ``timeout`` passes; return ``done()``."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return bool(done())
            self.pump(min(left, 0.02))
        return True

    # -- what the harness knows ---------------------------------------------------

    def children(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "child"]

    def live_children(self) -> list[Proc]:
        return [p for p in self.children() if p.alive]

    def holder(self) -> Proc | None:
        """The process that most recently reported holding and still believes it does."""
        believers = [p for p in self.children() if p.believes]
        return max(believers, key=lambda p: p.ready_ns or 0) if believers else None

    def bystanders(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "bystander" and p.alive]

    # -- the end ------------------------------------------------------------------

    def end_all(self) -> None:
        """SIGKILL every process still alive (by pidfd), wait for each, close everything."""
        if self._ended:
            return
        self._ended = True
        for proc in self.procs:
            if proc.alive:
                self.send(proc, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT
        for proc in self.procs:
            if proc.reaper is not None:
                proc.reaper.join(max(0.0, deadline - time.monotonic()))
        # Whatever they wrote before dying.
        with contextlib.suppress(OSError, ValueError):
            while self._fd_owner:
                before = len(self._fd_owner)
                self.pump(0.05)
                if (
                    len(self._fd_owner) == before
                    and not select.select(list(self._fd_owner), [], [], 0)[0]
                ):
                    break
        for proc in self.procs:
            with contextlib.suppress(OSError):
                os.close(proc.pidfd)
            if proc.child is not None:
                with contextlib.suppress(OSError):
                    os.close(proc.child.reports)
            for stream in (proc.popen.stdout, proc.popen.stderr):
                if stream is not None:
                    stream.close()
        self._fd_owner.clear()


def _now() -> tuple[int, float]:
    return time.monotonic_ns(), time.time()


def _reap(proc: Proc) -> None:
    """Wait for ``proc`` to end and note when (the reaper is the only one that waits)."""
    status = proc.popen.wait()
    proc.exit_ns, proc.exit_wall = time.monotonic_ns(), time.time()
    proc.returncode = status
