"""The verified kill: the only code in Highlander that sends a signal.

A process is signalled only through a pidfd opened *before* its identity is
verified, so a pid that dies and is reused between the check and the signal
cannot redirect the signal: the pidfd still names the dead process and the
kernel refuses.  The procedure, for an incumbent that missed a deadline
(AUTO mode only):

1. open a pidfd on the pid;
2. verify through /proc: start time, uid, executable, and (when the evidence
   is the holder's record) that it holds the ``flock`` on the project's lock
   file (its descriptor owns the lock: having the file open is not enough);
3. SIGTERM; wait ``term_grace`` on the pidfd (readable when the process
   ends: event-driven, no polling);
4. SIGKILL; wait until it is gone.

A process that fails verification is never signalled: :class:`ForeignHolderError`.

``highlander run`` signals its own command's tree here too
(:mod:`highlander._commands.tree`): through pidfds on its unreaped child or opened
before a descendant's start time was checked (:func:`signal_child`), and,
the one signal not sent through a pidfd, to the process group of its own
unreaped child (:func:`signal_own_group`), whose id cannot be reused.
"""

from __future__ import annotations

import os
import select
import signal

from highlander._core.deadlines import Timeouts
from highlander._core.errors import ForeignHolderError, IncumbentUnreachableError
from highlander._host.event_log import Event, EventLog
from highlander._host.identity import Expected, is_halted, mismatch
from highlander._host.waiting import Waiter

#: How long a SIGKILLed process may take to be gone (uninterruptible sleep can delay it).
KILL_WAIT = 10.0
#: How long a process that fails verification may take to finish exiting before
#: the failure counts (an exiting process no longer shows its exe or its fds).
EXITING_WAIT = 0.5


async def wait_for_exit(pid: int, timeout: float, waiter: Waiter) -> bool:
    """Wait until process ``pid`` exits (pidfd: no polling); ``False`` on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OverflowError, ValueError):
        return True
    try:
        return await waiter.readable(fd, timeout)
    finally:
        os.close(fd)


async def terminate(
    expected: Expected,
    timeouts: Timeouts,
    events: EventLog,
    why: str,
    waiter: Waiter,
    *,
    halted: bool = False,
) -> bool:
    """SIGTERM then SIGKILL the verified process ``expected``; ``True`` once it is gone.

    ``halted``: the verdict was taken while the kernel showed it stopped.  If
    it runs again by the time the signal would go (SIGCONT after a pause, a
    debugger detached), it is no longer hung: it is spared and this returns
    ``False`` (the caller asks it again).  No kernel call signals "only if
    still stopped", so the check comes last, right before the signal.
    """
    if expected.pid == os.getpid():
        # Last line of defence: callers detect this case and say what to do.
        raise ForeignHolderError(f"refusing to signal this process itself (pid {expected.pid})")
    try:
        fd = os.pidfd_open(expected.pid)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError) as exc:  # pid 0, negative, or beyond pid_t
        raise ForeignHolderError(
            f"the holder's record names pid {expected.pid}, which no process can have "
            f"({exc}): the record is corrupt; remove it and stop the holder yourself"
        ) from None
    try:
        problem = mismatch(expected)
        if problem is not None:
            # A process in the middle of exiting has lost its exe and fds but
            # its pidfd is not readable yet: give it a moment to finish.
            if not _alive(fd) or await waiter.readable(fd, EXITING_WAIT):
                return True
            events.emit(Event.IDENTITY_MISMATCH, peer_pid=expected.pid, reason=problem)
            raise ForeignHolderError(
                f"pid {expected.pid} holds the project but is not the verified incumbent "
                f"({problem}); Highlander never signals an unverified process: stop it yourself"
            )
        if halted and not is_halted(expected.pid) and _alive(fd):
            events.emit(Event.SPARED, peer_pid=expected.pid, reason=f"{why}, then resumed")
            return False
        _signal(fd, signal.SIGTERM, expected, events, Event.TERMINATED, why)
        if await waiter.readable(fd, timeouts.term_grace):
            return True
        _signal(fd, signal.SIGKILL, expected, events, Event.KILLED, why)
        if not await waiter.readable(fd, KILL_WAIT):
            raise IncumbentUnreachableError(
                f"pid {expected.pid} did not die within {KILL_WAIT:g} s of SIGKILL "
                "(uninterruptible sleep?): check it with ps, then retry"
            )
        return True
    finally:
        os.close(fd)


def _signal(
    fd: int, signum: int, expected: Expected, events: EventLog, event: Event, why: str
) -> None:
    try:
        signal.pidfd_send_signal(fd, signum)
    except ProcessLookupError:
        return  # it ended on its own meanwhile
    events.emit(
        event,
        peer_pid=expected.pid,
        start_time=expected.start_time,
        signal=signal.Signals(signum).name,
        reason=why,
    )


def _alive(fd: int) -> bool:
    # A pidfd polls readable once its process has ended.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return not poller.poll(0)


def signal_child(pidfd: int, signum: int) -> bool:
    """Send ``signum`` through ``pidfd``; ``False`` if its process is gone (or not ours).

    For a pidfd on our own unreaped child (no other process can replace it),
    or one opened before the process's start time was checked
    (:func:`highlander._host.descendants.open_verified`): either way the pidfd
    names the verified process for good.
    """
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_own_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to process group ``pgid``, led by our own child that we have not reaped.

    A group's id is its leader's pid, and the pid of a child that is not
    reaped yet (running or a zombie) cannot be reused: the signal reaches
    that group and no other.  The caller stops once it reaps the leader.
    ``False`` if nobody is left in it (or nobody we may signal).
    """
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True
