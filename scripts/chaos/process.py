"""One process of a chaos run as the harness knows it, and which process a pid meant when.

Split from scripts/chaos/procs.py (which starts, watches and signals them):
this is the record the checker reads.  Times are ``time.monotonic_ns()``
unless a name says ``wall``.
"""

from __future__ import annotations

import bisect
import ctypes
import math
import os
import re
import select
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

INF = math.inf
#: The last line of a traceback: ``SomeError: message``.
_FORK_HOOK = re.compile(r"^Exception ignored in: <function _releaseLock\b")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b")


@dataclass(eq=False)
class Proc:
    """One process the harness started, and everything it learnt about it."""

    #: "child" (a Highlander process), "bystander" (sleep), "dead" (true), or
    #: "worker" (forked by a holder, adopted by the harness: :class:`Adopted`).
    role: str
    popen: subprocess.Popen[bytes]
    pidfd: int
    start_time: int
    step: int
    spawn_ns: int
    spawn_wall: float
    cfg: dict[str, Any] | None = None
    child: Any = None  # proctools.Child: its report pipe
    exit_ns: int | None = None
    exit_wall: float | None = None
    returncode: int | None = None
    #: When the harness's SIGKILL had been sent (the process never ran user code after it).
    killed_ns: int | None = None
    #: When the harness began sending SIGKILL (a death after this may be that kill's).
    kill_began_ns: int | None = None
    #: (signal name, monotonic ns before sending, monotonic ns after) for every signal sent.
    signals: list[tuple[str, int, int]] = field(default_factory=list)
    #: (from, until) spans the harness kept it off the CPU (``starve_holder``); INF while on.
    starved: list[tuple[float, float]] = field(default_factory=list)
    stopped: bool = False
    #: When the harness heard ``before_ack``: the child stops itself right after saying so.
    self_stop_ns: int | None = None
    #: When (its own monotonic clock) an incumbent stopped itself before its move
    #: (``before_move``, ``etcd_full_at_move``): stopped from then to the next SIGCONT.
    move_stop_ns: int | None = None
    ready: dict[str, Any] | None = None
    ready_ns: int | None = None
    deposed: bool = False
    #: A worker's own report: what it kept of the rendezvous after the fork.
    kept: dict[str, Any] | None = None
    #: The worker a holder forked (``fork_worker``), once it reported.
    worker: Proc | None = None
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

    @property
    def hangs(self) -> str:
        """How this child was configured to hang ("" if it was not): a fair target."""
        cfg = self.cfg or {}
        if cfg.get("save") in ("stall", "forever"):
            return f"save {cfg['save']}"
        return "hang_when_deposed" if cfg.get("hang_when_deposed") else ""

    def stops(self) -> list[tuple[float, float]]:
        """The spans during which this process may have been stopped.

        A SIGSTOP counts from the moment its sending began, a SIGCONT only
        once its sending returned: in doubt, stopped (which makes a pending
        signal fatal later, so a reign is judged to last longer, never
        shorter).  A child that stopped itself (``before_ack``) had not
        acknowledged anything before, so its span starts at its spawn; it
        ends at the first SIGCONT sent after the harness heard it.  An
        incumbent that stopped itself before its move (``before_move``) says
        when, on the same monotonic clock: its span starts there.
        """
        end = self.exit_ns if self.exit_ns is not None else INF
        spans: list[tuple[float, float]] = []
        begun: int | None = None
        for name, before, after in self.signals:
            if name == "SIGSTOP" and begun is None:
                begun = before
            elif name == "SIGCONT" and begun is not None:
                spans.append((begun, after))
                begun = None
        if begun is not None:
            spans.append((begun, end))
        if self.self_stop_ns is not None:
            resumed = self.resumed_after(self.self_stop_ns)
            spans.append((self.spawn_ns, end if resumed is None else resumed))
        if self.move_stop_ns is not None:
            resumed = self.resumed_after(self.move_stop_ns)
            spans.append((self.move_stop_ns, end if resumed is None else resumed))
        return spans

    def stopped_at(self, ns: float) -> bool:
        """Whether this process may have been stopped at ``ns``."""
        return any(a <= ns < b for a, b in self.stops())

    def stopped_during(self, start: float, end: float) -> bool:
        """Whether this process may have been stopped at any moment of ``[start, end]``."""
        return any(a <= end and b >= start for a, b in self.stops())

    def stopped_ns(self, start: float, end: float, *, starved: bool = False) -> float:
        """How long, within ``[start, end]``, this process may have been stopped.

        With ``starved``, also the time the harness kept it off the CPU
        (``starve_holder`` .. ``feed_holder``): it could not run then either.
        """
        spans = self.stops() + (self.starved if starved else [])
        total, reach = 0.0, start
        for first, last in sorted(spans):
            a, b = max(first, reach), min(last, end)
            if b > a:
                total += b - a
                reach = b
        return total

    def resumed_after(self, ns: float) -> int | None:
        """When the first SIGCONT sent after ``ns`` had surely arrived (its *after* stamp)."""
        return next((a for name, b, a in self.signals if name == "SIGCONT" and b > ns), None)

    def exception(self) -> str:
        """The exception a traceback on stderr ended with, and where it was raised.

        Not CPython's "Exception ignored in" an at-fork hook of ``logging``
        (:meth:`fork_hook_races`): that is not an exception of the process.
        """
        lines = self.stderr_tail.decode(errors="replace").splitlines()
        starts = [
            i
            for i, line in enumerate(lines)
            if line.startswith("Traceback") and not (i and _FORK_HOOK.match(lines[i - 1]))
        ]
        if not starts:
            return ""
        tail = lines[starts[-1] :]
        frames = [ln.strip() for ln in tail if ln.strip().startswith("File ")]
        # Log lines from the library's log thread may interleave with the traceback.
        raised = [ln for ln in tail if _EXCEPTION.match(ln)]
        return f"{raised[0] if raised else '?'} (at {frames[-1] if frames else '?'})"

    def fork_hook_races(self) -> int:
        """How often CPython reported logging's at-fork hook releasing a lock it never took.

        ``logging`` registers a before/after pair of fork hooks when it is
        first imported; imported on one thread (the library's log thread
        loads structlog lazily) while another forks (``fork_worker``), only
        the after hook runs, and CPython prints "Exception ignored in
        <function _releaseLock>".  Harmless, and not the library's exception;
        counted apart (docs/reliability.md).
        """
        text = self.stderr_tail.decode(errors="replace")
        return sum(1 for line in text.splitlines() if _FORK_HOOK.match(line))

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
            "spawn_wall": self.spawn_wall,
            "exit_ns": self.exit_ns,
            "exit_wall": self.exit_wall,
            "stdout_bytes": self.stdout_bytes,
            "returncode": self.returncode,
            "killed_ns": self.killed_ns,
            "kill_began_ns": self.kill_began_ns,
            "signals": self.signals,
            "starved": self.starved,
            "self_stop_ns": self.self_stop_ns,
            "move_stop_ns": self.move_stop_ns,
            "ready": self.ready,
            "ready_ns": self.ready_ns,
            "deposed": self.deposed,
            "kept": self.kept,
            "stderr": self.stderr_tail.decode(errors="replace"),
        }


class Adopted:
    """Stands in for ``subprocess.Popen`` for a process the harness did not start
    (a holder's forked worker): its pid, no pipes; :func:`reap_adopted` waits for it."""

    stdout = stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def reap(self, proc: Proc) -> int | None:
        return reap_adopted(proc)


def adopted(parent: Proc, report: dict[str, Any]) -> Proc | None:
    """The worker ``parent`` forked, from its ``worker`` report; ``None`` if it is gone.

    Its pidfd is opened at once (it sleeps for minutes, and a pid is reused only
    after its process is reaped, which needs its parent's death and then us)."""
    from highlander._host.identity import process_identity  # noqa: PLC0415

    pid = int(report["pid"])
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return None
    ident = process_identity(pid)
    born = int(report.get("forked_ns", time.monotonic_ns()))
    proc = Proc(
        role="worker",
        popen=Adopted(pid),  # type: ignore[arg-type]
        pidfd=pidfd,
        start_time=ident.start_time if ident else -1,
        step=parent.step,
        spawn_ns=born,
        spawn_wall=time.time() - (time.monotonic_ns() - born) / 1e9,
        kept=report,
    )
    parent.worker = proc
    return proc


#: prctl(2) option: orphaned descendants are reparented to this process.
_PR_SET_CHILD_SUBREAPER = 36


def set_subreaper(on: bool) -> bool:
    """Make the harness the reaper of orphaned descendants (a dead holder's worker):
    it can then ``waitid`` them and learn which signal ended them."""
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)


def has_ended(proc: Proc) -> bool:
    """Whether ``proc`` has exited (not reaped yet, or not ours to reap: a worker whose
    parent still lives, for which ``waitid`` says ECHILD and the pidfd says it)."""
    try:
        return bool(os.waitid(os.P_PIDFD, proc.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT))
    except ChildProcessError:
        if not isinstance(proc.popen, Adopted):
            raise
        poller = select.poll()
        poller.register(proc.pidfd, select.POLLIN)
        return bool(poller.poll(0))


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def reap_adopted(proc: Proc) -> int | None:
    """Wait for a process the harness did not start to end; return its status.

    Its pidfd becomes readable when it exits: ``proc.exit_ns`` is stamped
    then (an upper bound, as for the harness's own children).  It can be
    reaped (``waitid``) only once it is the harness's child, i.e. once its
    parent died and it was reparented to the harness (the subreaper); until
    then it stays a zombie.  ``None`` if someone else reaped it.
    """
    poller = select.poll()
    poller.register(proc.pidfd, select.POLLIN)
    while not poller.poll(1000):
        pass
    proc.exit_ns, proc.exit_wall = time.monotonic_ns(), time.time()
    while True:
        try:
            info = os.waitid(os.P_PIDFD, proc.pidfd, os.WEXITED | os.WNOHANG)
        except ChildProcessError:
            if _parent_of(proc.pid) is None:
                return None  # reaped by someone else
            time.sleep(0.05)  # a zombie of its living parent: ours once that one dies
            continue
        if info is not None:
            exited = info.si_code == os.CLD_EXITED
            return info.si_status if exited else -info.si_status
        time.sleep(0.05)


class Who:
    """Which process of the run a pid meant at a given moment (pids get reused)."""

    def __init__(self, procs: list[Proc]) -> None:
        self._by_pid: dict[int, list[Proc]] = defaultdict(list)
        for proc in procs:
            self._by_pid[proc.pid].append(proc)

    def at_ns(self, pid: int, ns: int) -> Proc | None:
        for p in self._by_pid.get(pid, []):
            if p.spawn_ns <= ns <= (p.exit_ns if p.exit_ns is not None else INF):
                return p
        return None

    def at_wall(self, pid: int, ts: float) -> Proc | None:
        for p in self._by_pid.get(pid, []):
            if p.spawn_wall <= ts <= (p.exit_wall if p.exit_wall is not None else INF):
                return p
        return None

    def ended_before(self, pid: int, ts: float) -> bool:
        """Whether a process of the run with ``pid`` had ended by wall time ``ts``."""
        return any(p.exit_wall is not None and p.exit_wall <= ts for p in self._by_pid.get(pid, []))

    def identity(self, pid: int, start_time: int | None) -> Proc | None:
        return next((p for p in self._by_pid.get(pid, []) if p.start_time == start_time), None)


def to_monotonic(ts: float, clock: list[tuple[float, int]]) -> float:
    """An event-log timestamp on the monotonic clock, via the nearest sample of both."""
    i = bisect.bisect_left(clock, (ts, 0))
    near = min(clock[max(0, i - 1) : i + 1], key=lambda sample: abs(sample[0] - ts))
    return near[1] + (ts - near[0]) * 1e9
