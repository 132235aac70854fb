"""The newcomer's side: claim a free project, or take it over from the incumbent.

:func:`acquire` loops, each turn bounded, until this process holds the
project (or, in OBSERVE/WARN, knows it runs as a duplicate):

1. take the lock without waiting: free or stale project, claim it at once;
2. otherwise talk to the holder: HELLO (verified against the kernel), SAVE,
   PROGRESS*, SAVED (with the lock and listener descriptors),
   ACK_SUCCESSION, then wait for the incumbent to leave (end of stream)
   before believing we hold it;
3. BUSY: another succession runs; wait for that incumbent to exit (a pidfd
   wakes us, no polling) and try again against whoever holds then;
4. a verified holder that misses a deadline (or holds the lock with no
   socket, or with a queue of connections that stays full for ``hello``) is
   ended by the verified kill (:mod:`highlander._termination`), AUTO only;
   then the lock is free and step 1 claims it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from highlander._await_saved import await_saved
from highlander._claim import Reign, claim_free
from highlander._client import Greeting, Mismatch, QueueFull, Silent, connect, greet
from highlander._connection import Closed
from highlander._deadlines import Phase
from highlander._errors import (
    AuthenticationError,
    ForeignHolderError,
    IncumbentUnreachableError,
    ModeRefusedError,
    OtherAppError,
    Reason,
    SaveFailedError,
    SuccessionRefused,
    ThrashError,
    VersionMismatchError,
)
from highlander._events import Event
from highlander._handover import conclude
from highlander._identity import Expected, holds_lock, is_halted, own_identity
from highlander._messages import Busy, Intent, Refused, Save, Saved
from highlander._modes import Mode
from highlander._observe import record_target
from highlander._one_claim import claimed_twice
from highlander._patience import Patience
from highlander._record import read_record
from highlander._settings import Settings
from highlander._termination import terminate, wait_for_exit
from highlander._time_limit import OutOfTime, TimeLimit, check, out_of_time, unlimited
from highlander._unreachable import blocked_error, end_unreachable_holder
from highlander._values import Value
from highlander._waiting import Waiter
from highlander._watch import in_the_way
from highlander._wire import Overdue, close_fds, send_frame

#: Upper bound on acquisition attempts (each one is itself bounded by deadlines).
MAX_ATTEMPTS = 200
#: Identity mismatches tolerated (a handover in flight) before the holder is called foreign.
MAX_MISMATCHES = 3
_REFUSALS: dict[Reason, Callable[[str], SuccessionRefused]] = {
    Reason.AUTH: AuthenticationError,
    Reason.VERSION: VersionMismatchError,
    Reason.MODE: ModeRefusedError,
    Reason.THRASH: ThrashError,
    Reason.INTERNAL: SaveFailedError,
    Reason.OTHER_APP: OtherAppError,
}


class Duplicate(Value):
    """OBSERVE/WARN: a live holder exists and we run beside it (who it is, the caller checks)."""


class _Wait(Value):
    """BUSY: wait for ``pid`` to exit, then try again."""

    pid: int


class _Hung(Value):
    """The holder ``expected`` missed its ``phase`` deadline (``halted``: stopped meanwhile)."""

    expected: Expected
    phase: str
    halted: bool = False


class _Transition(Value):
    """A silent listener in the middle of a handover: wait, bounded, never signal.

    Either the record names another process than ``pid`` (a successor serves
    the inherited listener before writing its record), or the recorded holder
    ``recorded`` committed a handover and let go of the lock while its
    successor has not taken the listener yet (it does once its predecessor left).
    """

    pid: int
    recorded: int


class _Fresh(Value):
    """A silent holder that claimed after we connected: it may not be serving yet.

    A successor starts answering only once its claim is complete, so a
    connection made during the handover can time out on a holder that is
    fine.  It gets one fresh connection per generation before it counts as hung.
    """

    target: Expected
    generation: int


class _Busy(Value):
    """The holder missed HELLO but the kernel says it was working (a loaded machine).

    It is spared until it has used ``ceiling`` seconds of CPU under one
    record (the longest anything may take) without answering, and at most 4
    x ``ceiling`` of wall time: long enough for a storm's load to pass, while
    a holder spinning without answering is still ended.  A holder
    that is stopped, or asleep without gaining CPU time, gets no such grace.
    """

    target: Expected


class _Retry:
    """The holder changed or vanished under us: try again now."""


_RETRY = _Retry()
#: The holder's queue of pending connections is full (a storm, or a holder
#: that stopped accepting): back off and try again, for at most ``hello``.
_QUEUE_FULL = _Retry()


async def acquire(
    settings: Settings, waiter: Waiter, timeout: float | None = None
) -> Reign | Duplicate:
    """Hold the project (or learn that we run as a duplicate); see the module docstring.

    ``waiter`` is :data:`~highlander._waiting.BLOCKING` for the sync API (run
    with :func:`~highlander._waiting.run_blocking`), ``ANYIO`` for the async one.
    ``timeout`` bounds the whole wait (:mod:`highlander._time_limit`); when it
    runs out, :class:`AcquireTimeoutError`.
    """
    if timeout is None:
        return await _acquire(settings, waiter)
    try:
        return await _acquire(settings, TimeLimit(waiter, waiter.now() + timeout))
    except OutOfTime:
        raise out_of_time(settings, timeout) from None


async def _acquire(settings: Settings, waiter: Waiter) -> Reign | Duplicate:
    progress = _Progress(settings, waiter)
    delay = 0.001
    for _ in range(MAX_ATTEMPTS):
        check(waiter)
        reign = claim_free(settings)
        if reign is not None:
            return reign
        if settings.mode is not Mode.AUTO:
            return Duplicate()
        result = await _attempt(settings, waiter)
        if isinstance(result, Reign):
            return result
        if not await progress.settle(result):
            await waiter.sleep(delay)  # bounded back-off before the next attempt
            delay = min(delay * 2, 0.05)
    raise IncumbentUnreachableError(  # pragma: no cover - every attempt is bounded
        f"gave up after {MAX_ATTEMPTS} attempts to hold {settings.paths.socket}"
    )


class _Progress:
    """What the failed attempts so far add up to, and what to do about the last one."""

    def __init__(self, settings: Settings, waiter: Waiter) -> None:
        self.settings = settings
        self.waiter = waiter
        self.socketless = Patience(settings)
        self.transition = Patience(settings)
        self.mismatches = Patience(settings)
        #: Generations whose holder got a second chance to answer (see _Fresh).
        self.pardoned: set[int] = set()
        self.queue_full = Patience(settings)
        self.busy = Patience(settings)
        #: How long something nobody can publish over has stood at the socket path.
        self.blocked = Patience(settings)

    async def settle(
        self, result: _Wait | _Hung | _Fresh | _Busy | _Transition | _Retry | Mismatch | None
    ) -> bool:
        """Act on a failed attempt; return whether the next one may start at once."""
        settings, timeouts, events = self.settings, self.settings.timeouts, self.settings.events
        waiter = self.waiter
        if isinstance(result, _Fresh | _Busy):
            result = self._pardon(result)
        if isinstance(result, _Wait):
            await wait_for_exit(result.pid, timeouts.stall, waiter)
            return True
        if isinstance(result, _Hung):
            check(waiter)  # a kill once begun runs to its end: never begin one out of time
            events.emit(Event.HUNG, peer_pid=result.expected.pid, phase=result.phase)
            why = f"missed {result.phase}"
            await terminate(
                result.expected, timeouts, events, why, unlimited(waiter), halted=result.halted
            )
            return True
        if isinstance(result, Mismatch):
            # A client that connected while the listener was being handed over
            # sees the predecessor's credentials; a fresh connection sees the
            # holder's.  A mismatch that persists under one holder is not a handover.
            if self.mismatches.tally() >= MAX_MISMATCHES:
                events.emit(Event.IDENTITY_MISMATCH, peer_pid=result.pid, reason=result.problem)
                raise ForeignHolderError(
                    f"{settings.paths.socket} is served by pid {result.pid}, which is not a "
                    f"verified holder ({result.problem}); Highlander will not depose it"
                )
            return True
        if isinstance(result, _Transition):
            if self.transition.exceeded(timeouts.exit_grace + timeouts.term_grace + timeouts.hello):
                raise ForeignHolderError(
                    f"pid {result.pid} listens on {settings.paths.socket} without answering "
                    f"while the record names pid {result.recorded}, and no handover finished: "
                    "Highlander will not signal it; run `highlander status`"
                )
            return False
        if result is None or result is _QUEUE_FULL:
            return await self._unreachable(queue_full=result is not None)
        return False

    async def _unreachable(self, *, queue_full: bool) -> bool:
        """The lock is held and nobody listens (or accepts: the queue stays full).

        Until that has lasted ``hello`` under one holder: a holder between
        taking the lock and renaming its socket into place, or a storm's queue
        draining; back off, try again.  Past it, a holder the kernel shows
        working (a loaded machine, a serving side still starting) gets up to
        ``ceiling`` of CPU time more (see _Busy); then it is ended.
        """
        timeouts = self.settings.timeouts
        patience = self.queue_full if queue_full else self.socketless
        blocker = None if queue_full else in_the_way(self.settings.paths.socket)
        if blocker is not None:
            # Nobody can publish a socket over it: while it stands there the
            # holder is not to blame, so its time does not count against it.
            patience.reset()
            if self.blocked.exceeded(timeouts.hello):
                raise blocked_error(self.settings, blocker)
            return False
        self.blocked.reset()
        if not patience.exceeded(timeouts.hello):
            return False
        if not queue_full and self.settings.renamed():
            return True  # the directory was wiped and renamed its socket: look there
        if patience.busy() and self.busy.spares(timeouts.ceiling):
            await self.waiter.sleep(min(0.1, timeouts.hello))  # it is working: look again soon
            return False
        seen = patience.seen
        patience.reset()
        await end_unreachable_holder(self.settings, self.waiter, queue_full=queue_full, seen=seen)
        return True

    def _pardon(self, silent: _Fresh | _Busy) -> _Hung | _Retry:
        """A silent holder that may be fine gets another chance (bounded): try again."""
        if isinstance(silent, _Busy):
            if not self.busy.spares(self.settings.timeouts.ceiling):
                return _Hung(silent.target, Phase.HELLO.value)
            return _RETRY
        if silent.generation in self.pardoned:
            return _Hung(silent.target, Phase.HELLO.value)
        self.pardoned.add(silent.generation)
        return _RETRY


async def _attempt(
    settings: Settings, waiter: Waiter
) -> Reign | _Wait | _Hung | _Fresh | _Busy | _Transition | _Retry | Mismatch | None:
    connected_ms = int(time.time() * 1000)
    try:
        sock = connect(settings.paths.socket)
    except QueueFull:
        return _QUEUE_FULL
    if sock is None:
        return None
    fds: list[int] = []
    try:
        greeting = await greet(settings, sock, waiter)
        if isinstance(greeting, Mismatch):
            return greeting
        if isinstance(greeting, Silent):
            return _silent(settings, greeting, connected_ms)
        if greeting.hello.pid == os.getpid():
            raise claimed_twice(settings)
        return await _succeed(settings, greeting, fds)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        # The holder went away mid-conversation (e.g. it was just deposed), or
        # stopped reading: the next attempt finds out which, under deadlines.
        return _RETRY
    finally:
        close_fds(fds)
        sock.close()


def _silent(
    settings: Settings, greeting: Silent, connected_ms: int
) -> _Hung | _Fresh | _Busy | _Transition | _Retry:
    """Connected, but no HELLO: decide from the holder's record, never from a guess."""
    if greeting.closed:
        return _RETRY
    record = read_record(settings.paths.state)
    target = record_target(settings, record)
    if target is None or record is None:
        raise ForeignHolderError(
            f"pid {greeting.pid} listens on {settings.paths.socket} without answering, "
            "and no holder's record names it: Highlander will not signal it"
        )
    if target.pid == os.getpid():
        raise claimed_twice(settings)
    if target.pid != greeting.pid or not holds_lock(target.pid, settings.paths.lock):
        # Either a successor serves the inherited listener before its record
        # exists, or the recorded holder has committed a handover (it let go
        # of the lock) and its successor has not taken the listener yet.
        return _Transition(greeting.pid, target.pid)
    if record.since_ms >= connected_ms:
        return _Fresh(target, record.generation)
    if greeting.busy:
        return _Busy(target)
    return _Hung(target, Phase.HELLO.value, greeting.halted)


def _hello_target(greeting: Greeting, lock_path: str | None) -> Expected:
    """The holder as its verified HELLO describes it.

    ``lock_path``: while saving it still holds the lock file; after
    ACK_SUCCESSION it has closed its copy (the successor holds the lock).
    """
    hello = greeting.hello
    return Expected(hello.pid, hello.start_time, hello.exe, greeting.peer.uid, None, lock_path)


async def _succeed(
    settings: Settings, greeting: Greeting, fds: list[int]
) -> Reign | _Wait | _Hung | _Retry:
    events, me, started = settings.events, own_identity(), time.monotonic()
    sock, conn, peer, waiter = greeting.sock, greeting.conn, greeting.peer, greeting.waiter
    assert conn.peer_nonce is not None
    nonces = conn.local_nonce.hex(), conn.peer_nonce.hex()
    save = Save(me.pid, me.start_time, *nonces, Intent.SUCCEED, settings.app)
    await send_frame(sock, conn.send(save, waiter.now()), waiter)
    try:
        event = await await_saved(settings, greeting, fds)
    except Overdue as exc:
        target = _hello_target(greeting, settings.paths.lock)
        return _Hung(target, exc.deadline.phase.value, is_halted(peer.pid))
    if isinstance(event, Closed):
        events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="save", reason="incumbent vanished")
        return _RETRY
    if isinstance(event, Busy):
        events.emit(Event.BUSY, peer_pid=peer.pid, successor_pid=event.pid)
        return _Wait(peer.pid)
    if isinstance(event, Refused):
        events.emit(Event.REFUSED, peer_pid=peer.pid, reason=event.reason, detail=event.detail)
        raise _REFUSALS.get(event.reason, SaveFailedError)(
            f"the incumbent (pid {peer.pid}) refused: {event.detail}"
        )
    assert isinstance(event, Saved)
    # From here the takeover runs to its end (commit or abort), time limit or not.
    greeting = greeting._replace(waiter=unlimited(waiter))
    reign = await conclude(settings, greeting, event, fds, started)
    return _RETRY if reign is None else reign
