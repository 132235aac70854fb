"""The processes of a chaos run: started, watched, signalled and ended by the harness.

Holder candidates are tests/programs/child.py, started with the tests' own
``Children.start`` (tests/support/proctools.py) and heard through its ``Child``
report pipe.  Every process the harness starts gets a pidfd at once (it is
our unreaped child, so the pid cannot have been reused yet) and a reaper
thread that records the moment the process ended; every signal the harness
sends goes through that pidfd, so it can never reach a reused pid.

**Descriptors stay bounded by the live processes.**  A run starts thousands
of processes; each pipe is closed at its end of stream and each pidfd once
its process has been reaped and its pipes drained (on the main thread, the
only one that uses them, so a number is never closed while in use or twice).
Waiting is done with :mod:`selectors` (epoll), which has no ceiling on
descriptor numbers, unlike ``select()``.

**Timestamps bracket the act they describe.**  A signal is stamped before
``pidfd_send_signal`` (``Sent.before``: the process may have died of it from
then on) and after it returns (``Sent.after``: it cannot have run user code
since).  The reaper stamps an exit after ``wait()`` returns, so an exit time
is an upper bound, and "the harness's SIGKILL caused this death" compares
the harness's *before* stamp with it: a reaper that sees the death first can
no longer make a harness kill look like an unexplained one.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from highlander._core.deadlines import Timeouts
from highlander._host.event_log import EventLog
from highlander._host.identity import process_identity
from highlander._host.settings import Settings
from scripts.chaos import faults
from scripts.chaos.process import Adopted, Proc, adopted, has_ended, set_subreaper
from tests.support.proctools import TOKEN, Child, Children

#: Bound on any single wait for a process to end after SIGKILL.
KILL_WAIT = 10.0
#: Bytes of each child's stderr kept for the report (the tail).
STDERR_KEEP = 65536


class Lab:
    """One project, one runtime directory, and every process of the run."""

    def __init__(self, root: Path, *, tmpfs: bool = False, subreaper: bool = False) -> None:
        self.root = root
        self.kids = Children(root)  # project dir, runtime dir, witness file, env
        # A group of its own for each child: in the harness's group, a child stopped
        # when the harness's launcher exits (`make chaos-etcd &`, then the shell
        # ends) is killed by the kernel's SIGHUP to an orphaned group that has
        # stopped members (etcd seed 45 at 6c27d51: "died of SIGHUP, no event").
        self.kids.own_groups = True
        #: With ``tmpfs``: why the runtime dir could not be a small tmpfs (None: it is).
        self.tmpfs_refused: str | None = "not asked for"
        if tmpfs:  # before anything looks at the directory (its identity changes)
            self.kids.runtime.mkdir(mode=0o700)
            self.tmpfs_refused = faults.mount_tmpfs(str(self.kids.runtime))
        self.legacy = root / "legacy.pid"
        #: Every child's save hook appends ``start PID NS`` / ``end PID NS`` here.
        self.saves = root / "saves.log"
        #: Every holder's (and worker's) ``check_current()`` lines: ``pass|fail PID BEGIN END``.
        self.checks = root / "checks.log"
        #: Every event the children emit, also when the project's log is wiped or planted.
        self.mirror = root / "events-mirror.jsonl"
        #: Orphaned workers are reparented to the harness, which learns how they ended.
        self.subreaper = subreaper and set_subreaper(True)
        #: Workers that reported but had ended before the harness could watch them.
        self.lost_workers: list[int] = []
        self.procs: list[Proc] = []
        self._fd_owner: dict[int, tuple[Proc, str]] = {}
        self._selector = selectors.DefaultSelector()
        #: Reaped processes whose pidfd is still open (closed once their pipes are drained).
        self._reaped: list[Proc] = []
        self._reaped_lock = threading.Lock()
        self._ended = False
        #: When the harness began ending every process (the end of the run).
        self.ended_ns: int | None = None
        #: (wall clock, monotonic ns) pairs, to place event-log timestamps on the witness clock.
        self.clock: list[tuple[float, int]] = [(time.time(), time.monotonic_ns())]
        self.settings = self._resolve()
        self._key_id = self._names_key_id()

    def _resolve(self) -> Settings:
        settings = Settings.resolve(
            app="chaos",
            project=self.kids.project,
            mode="auto",
            token=TOKEN,
            timeouts=Timeouts(hello=0.5),
            runtime_dir=self.kids.runtime,
        )
        # Status queries from the harness are not decisions of the project: no log lines.
        settings.events = EventLog(None, app="chaos", mode="auto", quiet=True)
        return settings

    def _names_key_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.kids.runtime / "names.key", follow_symlinks=False)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns

    def refresh(self) -> Settings:
        """The project's settings, resolved again after a wipe made a new ``names.key``
        (the socket's name is a keyed hash: a new key, a new socket path)."""
        now = self._names_key_id()
        if now is not None and now != self._key_id:
            self._key_id, self.settings = now, self._resolve()
        return self.settings

    @property
    def paths(self) -> Any:
        return self.refresh().paths

    def files(self) -> dict[str, str]:
        """The run-wide files every child writes to (see ``child_config``)."""
        return {
            "witness": str(self.kids.witness),
            "save_witness": str(self.saves),
            "check_witness": str(self.checks),
            "event_mirror": str(self.mirror),
            "legacy_lock": str(self.legacy),
        }

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
        proc.reaper = threading.Thread(target=self._reap, args=(proc,), daemon=True)
        proc.reaper.start()
        self.procs.append(proc)
        return proc

    def start_child(self, step: int, cfg: dict[str, Any], **env: str) -> Proc:
        """Start tests/programs/child.py with ``cfg`` (the tests' own spawn helper);
        ``env``: variables to set beyond the usual ones (same runtime dir and project)."""
        born = _now()  # before the process exists: its first line can only come later
        child = self.kids.start(env=self.kids.env(**env), **cfg)
        return self._heard("child", child, step, born, cfg=cfg)

    def start_piped(self, step: int, argv: list[str], role: str = "piped") -> Proc:
        """Start ``argv`` with the same pipes as a child (report pipe, stdout, stderr).

        For the harness's own tests: cheap processes (``true``) that exercise
        the process table exactly as Highlander children do.
        """
        born = _now()
        return self._heard(role, self.kids.spawn(argv, self.kids.env()), step, born)

    def _heard(
        self, role: str, child: Child, step: int, born: tuple[int, float], **extra: Any
    ) -> Proc:
        # The Children helper must not close these descriptors at its cleanup:
        # this Lab closes them (a number closed twice may by then be someone else's).
        self.kids.started.remove(child)
        proc = self._register(role, child.proc, step, born, child=child, **extra)
        streams = [(child.reports, "reports")]
        streams += [(getattr(child.proc, name).fileno(), name) for name in ("stdout", "stderr")]
        for fd, what in streams:
            self._fd_owner[fd] = (proc, what)
            self._selector.register(fd, selectors.EVENT_READ)
            proc.open_fds.add(fd)
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

    def _adopt(self, parent: Proc, report: dict[str, Any]) -> None:
        """A holder's forked worker said hello: watch it (pidfd) and end it at the end."""
        proc = adopted(parent, report)
        if proc is None:  # gone already (it sleeps for minutes: it should not be)
            self.lost_workers.append(int(report["pid"]))
            return
        proc.reaper = threading.Thread(target=self._reap, args=(proc,), daemon=True)
        proc.reaper.start()
        self.procs.append(proc)

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
        """Signal ``proc`` through its pidfd; ``False`` if it has already ended.

        A process that has exited but is not reaped yet still takes signals;
        ``waitid(WNOWAIT)`` asks the kernel first, so a death by someone
        else's signal is never booked as the harness's.
        """
        if not proc.alive:
            return False
        before = time.monotonic_ns()
        try:
            if has_ended(proc):
                return False  # it has ended; the reaper is about to record it
            signal.pidfd_send_signal(proc.pidfd, signum)
        except (ProcessLookupError, ChildProcessError):
            return False
        after = time.monotonic_ns()
        proc.signals.append((signum.name, before, after))
        if signum == signal.SIGKILL and proc.killed_ns is None:
            proc.kill_began_ns, proc.killed_ns = before, after
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
        if not self._fd_owner:
            time.sleep(timeout)
        for key, _ in self._selector.select(timeout) if self._fd_owner else []:
            fd = key.fd
            if fd not in self._fd_owner:
                continue  # closed earlier in this round
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
        self._close_reaped()

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
            elif report.get("event") == "before_ack":
                # It stops itself (a real SIGSTOP) right after saying so.
                proc.self_stop_ns, proc.stopped = time.monotonic_ns(), True
            elif report.get("event") == "before_move":
                # An incumbent that stops itself before its move (etcd_full_at_move).
                proc.move_stop_ns, proc.stopped = int(report["at"]), True
            elif report.get("event") == "deposed":
                proc.deposed = True
            elif report.get("event") == "worker":
                self._adopt(proc, report)

    def _forget(self, proc: Proc, fd: int) -> None:
        """End of stream on ``fd``: stop watching it and close it (main thread only)."""
        del self._fd_owner[fd]
        self._selector.unregister(fd)
        proc.open_fds.discard(fd)
        if proc.child is not None and fd == proc.child.reports:
            os.close(fd)
            proc.child.reports = -1
            return
        for stream in (proc.popen.stdout, proc.popen.stderr):
            if stream is not None and not stream.closed and stream.fileno() == fd:
                stream.close()

    def _reap(self, proc: Proc) -> None:
        """Wait for ``proc`` to end and note when (the reaper is the only one that waits)."""
        if isinstance(proc.popen, Adopted):
            proc.returncode = proc.popen.reap(proc)
        else:
            status = proc.popen.wait()
            proc.exit_ns, proc.exit_wall = time.monotonic_ns(), time.time()
            proc.returncode = status
        with self._reaped_lock:
            self._reaped.append(proc)

    def _close_reaped(self) -> None:
        """Close the pidfd of each reaped process whose pipes have all been drained."""
        with self._reaped_lock:
            done = [p for p in self._reaped if not p.open_fds]
            self._reaped = [p for p in self._reaped if p.open_fds]
        for proc in done:
            if proc.pidfd >= 0:
                os.close(proc.pidfd)
                proc.pidfd = -1

    def descriptors(self) -> int:
        """Descriptors the harness holds for its processes (pipes and pidfds)."""
        pidfds = sum(1 for p in self.procs if p.pidfd >= 0)
        return len(self._fd_owner) + pidfds

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

    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.role == "worker"]

    # -- the end ------------------------------------------------------------------

    def unmount(self) -> None:
        """Lazily unmount the runtime dir's tmpfs, if this Lab mounted one."""
        if self.tmpfs_refused is None:
            faults.umount(str(self.kids.runtime))
            self.tmpfs_refused = "unmounted"

    def end_all(self) -> None:
        """SIGKILL every process still alive (by pidfd), wait for each, close everything."""
        if self._ended:
            return
        self._ended = True
        self.ended_ns = time.monotonic_ns()
        for proc in self.procs:
            if proc.alive:
                self.send(proc, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT
        for proc in self.procs:
            if proc.reaper is not None:
                proc.reaper.join(max(0.0, deadline - time.monotonic()))
        # Whatever they wrote before dying (bounded: a grandchild may hold a pipe open).
        drain_until = time.monotonic() + KILL_WAIT
        while self._fd_owner and time.monotonic() < drain_until:
            before = len(self._fd_owner)
            self.pump(0.05)
            if len(self._fd_owner) == before and not self._selector.select(0):
                break
        for fd, (proc, _) in list(self._fd_owner.items()):
            self._forget(proc, fd)
        for proc in self.procs:
            if proc.pidfd >= 0 and not (proc.reaper and proc.reaper.is_alive()):
                with contextlib.suppress(OSError):
                    os.close(proc.pidfd)
                proc.pidfd = -1
        self._selector.close()
        if self.subreaper:
            set_subreaper(False)
            self.subreaper = False


def _now() -> tuple[int, float]:
    return time.monotonic_ns(), time.time()
