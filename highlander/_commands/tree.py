"""The wrapped command's process tree: started, found and ended as one (``highlander run``).

A server is rarely one process: ``npx`` runs ``sh``, which runs ``npm exec``,
which runs ``node``; signalling the direct child alone leaves ``node``
serving.  So the wrapper owns the whole tree:

* the command runs in a session and process group of its own (``setsid``),
  so one ``killpg`` reaches it and everything it started that stayed in the
  group (a new session, not only a group: a command in a background group of
  the user's terminal would be stopped by SIGTTIN when it reads it);
* the wrapper is a child subreaper (``PR_SET_CHILD_SUBREAPER``): a
  descendant whose parent exits (a double fork, a launcher that died) is
  reparented to the wrapper instead of init, so it is still found among the
  wrapper's descendants (:func:`descendants`) and reaped by it;
* the direct child gets ``PR_SET_PDEATHSIG`` = SIGKILL, set by a tiny exec
  shim (:data:`SHIM`) before it execs the command: if the wrapper dies
  without warning (SIGKILL, the OOM killer), the kernel kills it.  The
  kernel sends it when the *thread* that forked the child ends, so the tree
  is spawned from the thread that runs :func:`highlander._commands.run.run`, which
  lives until the tree has ended;
* a guard, ``sh`` in the command's process group, waits for end-of-file on
  a pipe whose only writer is the wrapper.  When the wrapper dies the pipe
  closes and the guard SIGKILLs its own group (``kill -KILL 0``): exactly
  the command's group, whose id cannot be reused while the guard is in it.
  Descendants that left the group (``setsid``) are ended by the successor
  from the wrapper's record (:mod:`highlander._commands.tree_record`).

Every process outside the group is signalled through a pidfd, opened
before its start time is checked against the one seen in the scan, so a
reused pid is never signalled.  Linux only (prctl, pidfd, /proc).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from highlander._core.values import Value
from highlander._host.descendants import Proc, descendants, open_verified, readable
from highlander._host.log import log
from highlander._host.termination import KILL_WAIT, signal_child, signal_own_group

#: prctl(2) options.
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: How often a winding-down tree reports that the wrapper is alive and working.
HEARTBEAT = 0.5
#: How long the shim may take to report its guard's pid.
GUARD_WAIT = 5.0
#: The guard: ignore the signals the group gets; at end-of-file, SIGKILL the group.
GUARD = "trap '' HUP INT QUIT TERM USR1 USR2 PIPE; read -r _; kill -KILL 0"
#: Run as ``python -I -S -c SHIM WRAPPER_PID GUARD_FD REPORT_FD CMD ARGS...`` in the new
#: session: start the guard (a grandchild, so it is reparented to the wrapper and
#: the command never sees it), report its pid, arm the death signal, exec the command.
SHIM = f"""
import ctypes, errno, os, signal, sys
parent, guard_in, report = (int(arg) for arg in sys.argv[1:4])
argv = sys.argv[4:]
middle = os.fork()
if middle == 0:
    try:
        guard = os.fork()
        if guard == 0:
            os.dup2(guard_in, 0)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.closerange(3, 65536)
            os.execv("/bin/sh", ["sh", "-c", {GUARD!r}])
        os.write(report, b"%d\\n" % guard)
    finally:
        os._exit(0)
os.waitpid(middle, 0)
os.close(guard_in)
os.close(report)
ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGKILL, 0, 0, 0)
if os.getppid() != parent:  # the wrapper died before the death signal was armed
    os._exit(128 + signal.SIGKILL)
for name in ("SIGPIPE", "SIGXFSZ"):  # Python ignores them; the command must not inherit that
    signal.signal(getattr(signal, name), signal.SIG_DFL)
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    sys.stderr.write(f"highlander: cannot run {{argv[0]}}: {{exc.strerror}}\\n")
    sys.stderr.flush()
    os._exit(127 if exc.errno == errno.ENOENT else 126)
"""


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants; ``False`` where impossible."""
    import ctypes  # noqa: PLC0415 - only `highlander run` needs it

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return False


class Ending(Value):
    """How a tree ended: the command's status, and what the wrapper had to do."""

    #: The command's ``returncode`` (negative: ended by that signal).
    returncode: int
    #: Processes still there at the wind-down limit were SIGKILLed.
    forced: bool
    #: Processes besides the command that the wrapper waited for or ended.
    leftovers: int
    seconds: float


class Tree:
    """The command (the shim's exec), its process group and its guard."""

    def __init__(
        self,
        argv: Sequence[str],
        child: subprocess.Popen[bytes],
        guard: int | None,
        guard_pipe: int,
    ) -> None:
        self.argv = list(argv)
        self.child = child
        self.pidfd = os.pidfd_open(child.pid)
        self.guard = guard
        #: Set once :meth:`end` reaps the tree: its ids are no longer ours to signal.
        self.reaped = False
        self._guard_pipe = guard_pipe
        self._guard_fd = -1
        if guard is not None:
            with contextlib.suppress(OSError):
                self._guard_fd = os.pidfd_open(guard)

    @property
    def pgid(self) -> int:
        """The command's process group (and session): the direct child's pid."""
        return self.child.pid

    @classmethod
    def spawn(cls, argv: Sequence[str], env: dict[str, str], pass_fds: Sequence[int]) -> Tree:
        """Start ``argv`` in a session of its own, with its guard and its death signal."""
        guard_read, guard_write = os.pipe()
        report_read, report_write = os.pipe()
        shim = [sys.executable, "-I", "-S", "-c", SHIM, str(os.getpid())]
        shim += [str(guard_read), str(report_write), *argv]
        try:
            child = subprocess.Popen(  # noqa: S603 - the user's command, through our shim
                shim,
                env=env,
                pass_fds=(*pass_fds, guard_read, report_write),
                start_new_session=True,
            )
        except BaseException:
            os.close(guard_write)
            raise
        finally:
            os.close(guard_read)
            os.close(report_write)
        try:
            guard = _guard_pid(report_read)
        finally:
            os.close(report_read)
        if guard is None:
            log(
                "warning",
                "no_guard",
                message="the command's guard did not start: if this wrapper is killed, "
                "its successor ends what is left of the command's tree",
            )
        return cls(argv, child, guard, guard_write)

    def exited(self) -> bool:
        """Whether the direct child has exited (it stays unreaped until :meth:`end`)."""
        return self.reaped or readable([self.pidfd], 0)

    def close(self) -> None:
        """Close the child's pidfd, once :meth:`end` is over (by the thread that waits on it).

        Not in :meth:`end`: another thread (the supervising one) may be
        waiting on the descriptor then, and a closed number can be reused.
        """
        if self.pidfd >= 0:
            fd, self.pidfd = self.pidfd, -1
            os.close(fd)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the command's process group.

        Safe from pid reuse: the group's id stays taken while the direct
        child is unreaped (it is reaped only at the end of :meth:`end`).
        """
        if not self.reaped:
            signal_own_group(self.pgid, signum)

    def signal_leader(self, signum: int) -> None:
        """Send ``signum`` to the direct child only."""
        if not self.reaped:
            signal_child(self.pidfd, signum)

    def look(self) -> list[Proc]:
        """Reap descendants reparented to us that have exited; return the live ones.

        The command is reaped only by :meth:`end` (while it is not, its
        group's id cannot be reused), the guard only once it is done.  The
        guard is not among the processes returned.
        """
        me, keep = os.getpid(), (self.child.pid, self.guard)
        live = []
        for proc in descendants(me):
            if proc.alive:
                if proc.pid != self.guard:
                    live.append(proc)
            elif proc.ppid == me and proc.pid not in keep:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(proc.pid, os.WNOHANG)
        return live

    def end(
        self,
        signum: int | None,
        limit: float,
        beat: Callable[[str], None],
        *,
        group_signalled: bool = False,
    ) -> Ending:
        """End the tree; return how.  ``beat(note)`` is called every :data:`HEARTBEAT` seconds.

        ``signum`` goes to the group first (``None``: the command exited, or
        ``group_signalled``: the group had a signal already).  Once the
        command exited, what it left gets SIGTERM: the group if it had no
        signal yet, and processes outside it.  At ``limit`` seconds
        everything left gets SIGKILL.
        """
        started = time.monotonic()
        deadline = started + limit
        if signum is not None:
            self.signal_group(signum)
        group_signalled = group_signalled or signum is not None

        def waiting(what: str) -> Callable[[], str]:
            return lambda: (
                f"waiting for {what} to exit: {time.monotonic() - started:.1f} s of {limit:g} s"
            )

        command = f"{os.path.basename(self.argv[0])} (pid {self.pgid})"
        ended = _wait(self.exited, [self.pidfd], deadline, beat, waiting(command))
        watched: dict[tuple[int, int], int] = {}
        try:
            if ended:
                ended = self._end_leftovers(not group_signalled, watched, deadline, beat, waiting)
            if not ended:
                self._kill_all(beat, limit, watched)
        finally:
            for fd in watched.values():
                os.close(fd)
            self.reaped = True  # from here the group's id may be freed: signal it no more
            self._end_guard()
        try:
            returncode = self.child.wait(timeout=KILL_WAIT)
        except subprocess.TimeoutExpired:  # SIGKILLed, and stuck in the kernel (D state)
            log("warning", "command_not_reaped", pid=self.pgid)
            returncode = -signal.SIGKILL
        self.look()
        others = sum(pid != self.pgid for pid, _ in watched)
        return Ending(returncode, not ended, others, time.monotonic() - started)

    def _end_leftovers(
        self,
        group_too: bool,
        watched: dict[tuple[int, int], int],
        deadline: float,
        beat: Callable[[str], None],
        waiting: Callable[[str], Callable[[], str]],
    ) -> bool:
        """SIGTERM what the command left (``group_too``: its group had no signal yet); wait.

        ``False`` if some of it is still there at ``deadline``.
        """
        while True:
            left = self.look()
            if not left:
                return True
            if time.monotonic() >= deadline:
                return False
            for proc in left:
                key = (proc.pid, proc.start_time)
                if key in watched or (fd := open_verified(*key)) is None:
                    continue
                watched[key] = fd
                # The group had the signal already: a second one may cut a clean exit short.
                if group_too or proc.pgid != self.pgid:
                    signal_child(fd, signal.SIGTERM)
            fds = [watched[key] for p in left if (key := (p.pid, p.start_time)) in watched]
            if not readable(fds, min(HEARTBEAT, deadline - time.monotonic())):
                beat(waiting(f"{len(left)} process(es) the command left")())

    def _kill_all(
        self, beat: Callable[[str], None], limit: float, seen: dict[tuple[int, int], int]
    ) -> None:
        """SIGKILL the group and every descendant left; wait (bounded) until they are gone."""
        left = self.look()
        beat(f"the wind-down limit of {limit:g} s passed: SIGKILL to {len(left)} process(es)")
        until = time.monotonic() + KILL_WAIT
        while left and time.monotonic() < until:
            self.signal_group(signal.SIGKILL)
            fds = []
            for proc in left:
                key = (proc.pid, proc.start_time)
                fd = seen.get(key)
                if fd is None and (fd := open_verified(*key)) is not None:
                    seen[key] = fd
                if fd is not None:
                    fds.append(fd)
                    signal_child(fd, signal.SIGKILL)
            readable(fds, min(0.1, until - time.monotonic()))
            left = self.look()

    def _end_guard(self) -> None:
        """Close the guard's pipe (it SIGKILLs what is left of its group, itself too); reap it."""
        if self._guard_pipe >= 0:
            os.close(self._guard_pipe)
            self._guard_pipe = -1
        if self.guard is None or self._guard_fd < 0:
            return
        if not readable([self._guard_fd], KILL_WAIT):
            signal_child(self._guard_fd, signal.SIGKILL)  # a pidfd names one process for good
            readable([self._guard_fd], KILL_WAIT)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.guard, os.WNOHANG)
        os.close(self._guard_fd)
        self._guard_fd = -1


def _wait(
    done: Callable[[], bool],
    fds: Sequence[int],
    deadline: float,
    beat: Callable[[str], None],
    note: Callable[[], str],
) -> bool:
    """Wait until ``done()`` or one of ``fds`` is readable, beating; ``False`` at ``deadline``."""
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if readable(fds, min(HEARTBEAT, left)):
            return True
        beat(note())
    return True


def _guard_pid(report: int) -> int | None:
    """The guard's pid, as the shim reports it (``None`` if it does not in :data:`GUARD_WAIT`)."""
    data, until = b"", time.monotonic() + GUARD_WAIT
    while not data.endswith(b"\n"):
        if not readable([report], until - time.monotonic()):
            return None
        chunk = os.read(report, 32)
        if not chunk:
            return None
        data += chunk
    return int(data)
