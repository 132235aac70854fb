"""The newcomer's side: claim a free project, or take it over from the incumbent.

:func:`acquire` loops, each turn bounded, until this process holds the
project (or, in OBSERVE/WARN, knows it runs as a duplicate):

1. take the lock without waiting: free or stale project, claim it at once;
2. otherwise talk to the holder: HELLO, SAVE, PROGRESS*, SAVED (with the
   lock and listener descriptors), ACK_SUCCESSION, then wait for the
   incumbent to leave (end of stream) before believing we hold it;
3. BUSY: another succession runs; wait for that incumbent to exit (a pidfd
   wakes us, no polling) and try again against whoever holds then.
"""

from __future__ import annotations

import errno
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from highlander._claim import Listener, ProjectLock
from highlander._connection import Closed, Connection
from highlander._errors import (
    AuthenticationError,
    ForeignHolderError,
    IncumbentUnreachableError,
    ModeRefusedError,
    Reason,
    RemoteProtocolError,
    SaveFailedError,
    SignatureError,
    SuccessionRefused,
    ThrashError,
    VersionMismatchError,
)
from highlander._events import Event, Outcome
from highlander._identity import own_identity, peer_credentials, process_identity
from highlander._incumbent import Reign
from highlander._messages import (
    AckSuccession,
    Busy,
    Hello,
    Intent,
    ProgressReport,
    Refused,
    Save,
    Saved,
)
from highlander._modes import Mode
from highlander._record import HolderRecord, read_record, write_record
from highlander._settings import Settings
from highlander._state import Role
from highlander._wire import Overdue, close_fds, receive_event, send_frame, unix_socket

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
}


@dataclass(frozen=True, slots=True)
class Duplicate:
    """OBSERVE/WARN: a live holder exists and we run beside it."""

    record: HolderRecord | None


@dataclass(frozen=True, slots=True)
class _Mismatch:
    """HELLO contradicts the kernel; ``problem`` says how."""

    pid: int
    problem: str


@dataclass(frozen=True, slots=True)
class _Wait:
    """BUSY: wait for ``pid`` to exit, then try again."""

    pid: int


class _Retry:
    """The holder changed or vanished under us: try again now."""


_RETRY = _Retry()


def claim_free(settings: Settings) -> Reign | None:
    """Claim the project if no live process holds it (no waiting, no network)."""
    lock = ProjectLock.try_acquire(settings.paths.lock)
    if lock is None:
        return None
    try:
        listener, stale = Listener.bind(settings.paths)
    except BaseException:
        lock.release()
        raise
    outcome = Outcome.CLAIMED_STALE if stale else Outcome.CLAIMED_FREE
    previous = read_record(settings.paths.state)
    record = _new_record(settings, previous, successor_of=None)
    write_record(settings.paths.state, record)
    if stale:
        settings.events.emit(Event.STALE_CLEARED, socket=settings.paths.socket)
    settings.events.emit(Event.CLAIMED, outcome=outcome, generation=record.generation)
    return Reign(lock, listener, record, None, outcome)


def _new_record(
    settings: Settings, previous: HolderRecord | None, *, successor_of: int | None
) -> HolderRecord:
    from highlander._identity import boot_id, cmdline  # noqa: PLC0415

    me, now_ms = own_identity(), int(time.time() * 1000)
    generation = max(previous.generation if previous else 0, successor_of or 0) + 1
    history = list(previous.successions_ms) if previous else []
    if successor_of is not None:
        history.append(now_ms)
    return HolderRecord(
        pid=me.pid,
        start_time=me.start_time,
        exe=me.exe,
        uid=me.uid,
        boot_id=boot_id(),
        app=settings.app,
        mode=settings.mode.value,
        generation=generation,
        since_ms=now_ms,
        cmdline=cmdline(me.pid),
        successions_ms=settings.thrash.recent(history, now_ms),
    )


async def acquire(settings: Settings, *, intent: Intent = Intent.SUCCEED) -> Reign | Duplicate:
    """Hold the project (or learn that we run as a duplicate); see the module docstring."""
    timeouts, events = settings.timeouts, settings.events
    unreachable_since: float | None = None
    mismatches = 0
    delay = 0.001
    for _ in range(MAX_ATTEMPTS):
        reign = claim_free(settings)
        if reign is not None:
            return reign
        if settings.mode is not Mode.AUTO:
            record = read_record(settings.paths.state)
            events.emit(Event.DETECTED, holder_pid=record.pid if record else None)
            return Duplicate(record)
        result = await _attempt(settings, intent)
        if isinstance(result, Reign):
            return result
        if isinstance(result, _Wait):
            await wait_for_exit(result.pid, timeouts.stall)
            continue
        if isinstance(result, _Mismatch):
            # A client that connected while the listener was being handed over
            # sees the predecessor's credentials; a fresh connection sees the
            # holder's.  A mismatch that persists is not a handover.
            mismatches += 1
            if mismatches >= MAX_MISMATCHES:
                events.emit(Event.IDENTITY_MISMATCH, peer_pid=result.pid, reason=result.problem)
                raise ForeignHolderError(
                    f"{settings.paths.socket} is served by pid {result.pid}, which is not a "
                    f"verified holder ({result.problem}); Highlander will not depose it"
                )
            continue
        if result is None:  # nobody answers although the lock is held
            now = time.monotonic()
            unreachable_since = unreachable_since or now
            if now - unreachable_since > timeouts.hello:
                events.emit(Event.UNREACHABLE, socket=settings.paths.socket)
                raise IncumbentUnreachableError(_unreachable_message(settings))
            # A holder between taking the lock and renaming its socket into
            # place: microseconds.  Back off briefly, bounded by the hello timeout.
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)
            continue
        unreachable_since = None
    raise IncumbentUnreachableError(  # pragma: no cover - every attempt is bounded
        f"gave up after {MAX_ATTEMPTS} attempts to hold {settings.paths.socket}"
    )


def _unreachable_message(settings: Settings) -> str:
    record = read_record(settings.paths.state)
    who = f"pid {record.pid} ({record.exe})" if record else "an unknown process"
    return (
        f"the project is held by {who} but nobody answers on {settings.paths.socket} "
        f"within {settings.timeouts.hello:g} s: run `highlander status`, and stop that "
        "process if it is hung"
    )


async def _connect(path: str) -> socket.socket | None:
    sock = unix_socket()
    try:
        sock.connect(path)
    except BlockingIOError:
        # Backlog full: wait (bounded by the caller's deadlines) for room.
        await anyio.wait_writable(sock)
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            sock.close()
            return None
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.EAGAIN):
            return None
        raise
    return sock


async def _attempt(settings: Settings, intent: Intent) -> Reign | _Wait | _Retry | _Mismatch | None:
    sock = await _connect(settings.paths.socket)
    if sock is None:
        return None
    fds: list[int] = []
    try:
        return await _converse(settings, sock, intent, fds)
    except (BrokenPipeError, ConnectionResetError):
        return _RETRY  # the holder went away mid-conversation (e.g. it was just deposed)
    except Overdue as exc:
        settings.events.emit(Event.TIMEOUT, phase=exc.deadline.phase.value)
        if exc.deadline.phase.value == "hello":
            return None
        raise IncumbentUnreachableError(
            f"the incumbent missed its {exc.deadline.phase.value} deadline: run "
            "`highlander status`, and stop it if it is hung"
        ) from None
    except SignatureError as exc:
        settings.events.emit(Event.AUTH_FAILED, reason=str(exc))
        raise AuthenticationError(
            f"the incumbent on {settings.paths.socket} does not share this token ({exc}); "
            "give every client the same HIGHLANDER_TOKEN"
        ) from None
    except RemoteProtocolError as exc:
        settings.events.emit(Event.PROTOCOL_ERROR, reason=str(exc))
        if exc.reason is Reason.VERSION:
            raise VersionMismatchError(str(exc)) from None
        raise
    finally:
        close_fds(fds)
        sock.close()


async def _converse(
    settings: Settings, sock: socket.socket, intent: Intent, fds: list[int]
) -> Reign | _Wait | _Retry | _Mismatch:
    events, me = settings.events, own_identity()
    peer = peer_credentials(sock)
    if peer.uid != os.geteuid():
        events.emit(Event.IDENTITY_MISMATCH, peer_pid=peer.pid, reason=f"uid {peer.uid}")
        raise ForeignHolderError(
            f"{settings.paths.socket} is served by pid {peer.pid} of uid {peer.uid}, not by "
            "you: Highlander will not talk to it; its owner must stop it"
        )
    started = time.monotonic()
    conn = Connection(
        Role.NEWCOMER,
        key=settings.key(),
        nonce=secrets.token_bytes(16),
        now=anyio.current_time(),
        timeouts=settings.timeouts,
    )
    hello = await receive_event(sock, conn)
    if isinstance(hello, Closed):
        return _RETRY
    assert isinstance(hello, Hello)
    problem = _hello_problem(settings, hello, peer.pid)
    if problem is not None:
        return _Mismatch(peer.pid, problem)
    events.emit(Event.HELLO, peer_pid=peer.pid, generation=hello.generation)
    assert conn.peer_nonce is not None
    save = Save(me.pid, me.start_time, conn.local_nonce.hex(), conn.peer_nonce.hex(), intent)
    await send_frame(sock, conn.send(save, anyio.current_time()))
    while True:
        event = await receive_event(sock, conn, fds)
        if isinstance(event, ProgressReport):
            events.emit(Event.PROGRESS, peer_pid=peer.pid, counter=event.counter, note=event.note)
            continue
        break
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
    lock, listener = _adopt(settings, fds, intent)
    fds.clear()
    await send_frame(sock, conn.send(AckSuccession(), anyio.current_time()))
    try:
        gone = await receive_event(sock, conn)  # the incumbent leaving: end of stream
        assert isinstance(gone, Closed)
    except BaseException:
        if listener is not None:
            listener.close(unlink=False)
        if lock is not None:
            lock.release()
        raise
    return _take_over(settings, lock, listener, event.handoff, event.generation, peer.pid, started)


def _hello_problem(settings: Settings, hello: Hello, kernel_pid: int) -> str | None:
    """What is wrong with HELLO's identity claim, or ``None``."""
    if hello.pid != kernel_pid:
        return f"HELLO claims pid {hello.pid} but the kernel says {kernel_pid}"
    identity = process_identity(kernel_pid)
    if identity is None or identity.start_time != hello.start_time:
        return f"HELLO's start time does not match pid {kernel_pid}'s"
    if hello.app != settings.app:
        return f"HELLO is from app {hello.app!r}, expected {settings.app!r}"
    return None


def _adopt(
    settings: Settings, fds: list[int], intent: Intent
) -> tuple[ProjectLock | None, Listener | None]:
    if intent is Intent.STOP:
        return None, None
    if len(fds) != 2:
        raise RemoteProtocolError(
            f"SAVED arrived with {len(fds)} descriptors instead of the lock and the listener"
        )
    lock = ProjectLock.adopt(fds[0], settings.paths.lock)
    listener = Listener.adopt(fds[1], settings.paths)
    if lock is None or listener is None:
        if lock is not None:
            lock.release()
        if listener is not None:
            listener.close(unlink=False)
        raise RemoteProtocolError("SAVED carried descriptors that are not this project's")
    return lock, listener


def _take_over(
    settings: Settings,
    lock: ProjectLock | None,
    listener: Listener | None,
    handoff: dict[str, Any] | None,
    generation: int,
    predecessor: int,
    started: float,
) -> Reign | _Retry:
    if lock is None or listener is None:  # intent STOP: the project is left free
        return _RETRY
    record = _new_record(settings, read_record(settings.paths.state), successor_of=generation)
    write_record(settings.paths.state, record)
    settings.events.emit(
        Event.CLAIMED,
        outcome=Outcome.SUCCEEDED,
        generation=record.generation,
        peer_pid=predecessor,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    return Reign(lock, listener, record, handoff, Outcome.SUCCEEDED)


async def wait_for_exit(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` exits (pidfd: no polling); ``False`` on timeout."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(fd)
            return True
        return False
    finally:
        os.close(fd)
