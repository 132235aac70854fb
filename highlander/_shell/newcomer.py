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
   ended by the verified kill (:mod:`highlander._host.termination`), AUTO only;
   then the lock is free and step 1 claims it.

This module makes one attempt (:func:`turn`) and returns what it found when
it fails (a :class:`~highlander._core.findings.Setback`).  What to do then
(wait, retry, signal, give up) is decided by the pure
:mod:`highlander._core.policy` from that and one sample of the record, the
kernel and the clock, and carried out by :mod:`highlander._shell.retrying`,
which is imported only then: a succession's first attempt does not load it.
"""

from __future__ import annotations

import os
import time

from highlander._core.connection import Closed
from highlander._core.findings import Changed, Crowded, Leaving, Nobody, Setback
from highlander._core.messages import Busy, Intent, Refused, Saved
from highlander._core.sharing import ShareMode
from highlander._core.values import Value
from highlander._host.claim import Reign
from highlander._host.event_log import Event
from highlander._host.identity import Expected, is_halted
from highlander._host.modes import Mode
from highlander._host.settings import Settings
from highlander._host.waiting import Waiter
from highlander._shell.backend import LOCAL
from highlander._shell.client import Greeting, Mismatch, QueueFull, Silent, greet
from highlander._shell.live import SaveEcho
from highlander._shell.one_claim import claimed_twice
from highlander._shell.save_request import refusal_error, request_save
from highlander._shell.time_limit import OutOfTime, TimeLimit, check, out_of_time, unlimited
from highlander._shell.wire import Overdue, close_fds

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import socket

    from highlander._shell.attaching import Declined, Relay
    from highlander._shell.seam import Backend
    from highlander._shell.setbacks import HolderMissed


class Duplicate(Value):
    """OBSERVE/WARN: a live holder exists and we run beside it (who it is, the caller checks)."""


async def acquire(
    settings: Settings,
    waiter: Waiter,
    timeout: float | None = None,
    backend: Backend = LOCAL,
    *,
    first: tuple[socket.socket, int] | None = None,
    claimed: bool = False,
) -> Reign | Duplicate | Relay:
    """Hold the project (or learn that we run as a duplicate, or attach); see the module docstring.

    ``waiter`` is :data:`~highlander._host.waiting.BLOCKING` for the sync API (run
    with :func:`~highlander._host.waiting.run_blocking`), ``ANYIO`` for the async one.
    ``timeout`` bounds the whole wait (:mod:`highlander._shell.time_limit`); when it
    runs out, :class:`AcquireTimeoutError`.  ``backend``: where holders meet
    (:mod:`highlander._shell.backend`).  ``first``: a conversation the caller
    opened already (``backend.open``) and when (wall ms), for the first attempt.
    ``claimed``: the caller's claim just found the project held, so the first
    attempt talks to the holder without claiming again (on etcd a claim is a
    round trip to the cluster; a holder gone meanwhile is the setback of an
    attempt like any other).
    In share mode the holder may serve our client instead (:class:`Relay`:
    :mod:`highlander._shell.attaching`).
    """
    got: Reign | Duplicate | Relay | None = None
    try:
        if timeout is None:
            got = await _acquire(settings, waiter, backend, first, claimed)
        else:
            got = await _acquire(
                settings, TimeLimit(waiter, waiter.now() + timeout), backend, first, claimed
            )
        return got
    except OutOfTime:
        assert timeout is not None
        raise out_of_time(settings, timeout) from None
    finally:
        backend.leave_turn(holding=isinstance(got, Reign))
        if first is not None:
            first[0].close()  # unused (the project came free), or closed by its attempt already


async def _acquire(
    settings: Settings,
    waiter: Waiter,
    backend: Backend,
    first: tuple[socket.socket, int] | None,
    claimed: bool,
) -> Reign | Duplicate | Relay:
    # The first attempt usually ends it: what a setback needs (the policy and
    # how to carry out its decisions) loads only after one (about 1 ms).
    declined = None
    if settings.share is not ShareMode.OFF:
        from highlander._shell.attaching import Declined  # noqa: PLC0415 - share mode only

        declined = Declined()
    found = await turn(settings, waiter, backend, declined, first, claimed=claimed)
    if not isinstance(found, Setback):
        return found
    from highlander._shell.retrying import retry  # noqa: PLC0415 - after a setback only

    return await retry(settings, waiter, backend, declined, found)


async def turn(
    settings: Settings,
    waiter: Waiter,
    backend: Backend,
    declined: Declined | None,
    first: tuple[socket.socket, int] | None = None,
    *,
    claimed: bool = False,
) -> Reign | Duplicate | Relay | Setback:
    """One attempt: claim a free project, or talk to its holder; what it found if neither.

    ``declined``: share mode's memory across attempts (``None``: share mode is off).
    ``claimed``: a claim just found the project held (:func:`acquire`): talk at once.
    """
    check(waiter)
    if not claimed:
        reign = backend.claim(settings)
        if reign is not None:
            return reign
    if settings.mode is not Mode.AUTO:
        return Duplicate()
    if first is None:
        await backend.take_turn(settings, waiter)
    return await _attempt(settings, waiter, backend, declined, first)


async def _attempt(
    settings: Settings,
    waiter: Waiter,
    backend: Backend,
    declined: Declined | None,
    dialled: tuple[socket.socket, int] | None = None,
) -> Reign | Relay | Setback:
    if dialled is not None:
        sock: socket.socket | None
        sock, connected_ms = dialled
    else:
        connected_ms = int(time.time() * 1000)
        try:
            sock = backend.open(settings)
        except QueueFull:
            return Crowded()
    if sock is None:
        return Nobody()
    fds: list[int] = []
    try:
        greeting = await greet(settings, sock, waiter, backend)
        if isinstance(greeting, Mismatch):
            return greeting
        if isinstance(greeting, Silent):
            return backend.silent(settings, greeting, connected_ms)
        if greeting.hello.pid == os.getpid():
            raise claimed_twice(settings)
        shared = await _shared(settings, greeting, declined)
        return shared if shared is not None else await _succeed(settings, greeting, fds, backend)
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        # The holder went away mid-conversation (e.g. it was just deposed), or
        # stopped reading: the next attempt finds out which, under deadlines.
        return Changed()
    finally:
        close_fds(fds)
        sock.close()


async def _shared(
    settings: Settings, greeting: Greeting, declined: Declined | None
) -> Relay | Setback | None:
    """Share mode: attach to the holder (or why not); ``None``: succeed it."""
    if declined is None:  # share mode is off
        return None
    from highlander._shell.attaching import attach  # noqa: PLC0415 - share mode only

    try:
        return await attach(settings, greeting, declined)
    except Overdue as exc:
        return _missed(settings, greeting, exc)


def _hello_target(greeting: Greeting, lock_path: str | None) -> Expected:
    """The holder as its verified HELLO describes it.

    ``lock_path``: while saving it still holds the lock file; after
    ACK_SUCCESSION it has closed its copy (the successor holds the lock).
    """
    hello = greeting.hello
    return Expected(hello.pid, hello.start_time, hello.exe, greeting.peer.uid, None, lock_path)


def _missed(settings: Settings, greeting: Greeting, exc: Overdue) -> HolderMissed:
    """The verified holder missed its answer's deadline (to SAVE or ATTACH); it holds the lock."""
    from highlander._shell.setbacks import HolderMissed  # noqa: PLC0415 - a setback only

    target = _hello_target(greeting, settings.paths.lock)
    halted = greeting.local and is_halted(greeting.peer.pid)
    return HolderMissed(exc.deadline.phase.value, halted, target=target)


async def _succeed(
    settings: Settings, greeting: Greeting, fds: list[int], backend: Backend
) -> Reign | Setback:
    events, peer, waiter = settings.events, greeting.peer, greeting.waiter
    started = waiter.now()
    try:
        with SaveEcho(events, peer.pid) as live:
            event = await request_save(
                settings,
                greeting,
                Intent.SUCCEED,
                live.report,
                fds,
                spare_starved=greeting.local,
                meanwhile=backend.prepare_conclusion,
            )
    except Overdue as exc:
        return _missed(settings, greeting, exc)
    if isinstance(event, Closed):
        events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="save", reason="incumbent vanished")
        return Changed()
    if isinstance(event, Busy):
        events.emit(Event.BUSY, peer_pid=peer.pid, successor_pid=event.pid)
        return Leaving(peer.pid)
    if isinstance(event, Refused):
        events.emit(Event.REFUSED, peer_pid=peer.pid, reason=event.reason, detail=event.detail)
        raise refusal_error(event, f"the incumbent (pid {peer.pid}) refused: {event.detail}")
    assert isinstance(event, Saved)
    # From here the takeover runs to its end (commit or abort), time limit or not.
    greeting = greeting._replace(waiter=unlimited(waiter))
    reign = await backend.conclude(settings, greeting, event, fds, started)
    return Changed() if reign is None else reign
