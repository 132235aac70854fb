"""Operator requests to a holder: read-only STATUS, and STOP (save, hand nothing on, leave).

Used by the ``highlander status`` and ``highlander stop`` commands.  Both
talk the signed protocol like a newcomer, so they need the same token; both
verify the holder's identity against the kernel before sending anything.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from highlander._client import Greeting, Mismatch, QueueFull, Silent, connect, greet
from highlander._connection import Closed
from highlander._errors import HighlanderError, IncumbentUnreachableError, SuccessionRefused
from highlander._files import open_regular
from highlander._messages import (
    AckSuccession,
    Intent,
    ProgressReport,
    Refused,
    Save,
    Saved,
    Status,
    StatusReply,
)
from highlander._record import HolderRecord, read_record
from highlander._settings import Settings
from highlander._waiting import Waiter
from highlander._wire import Overdue, receive_event, send_frame


@dataclass
class HolderStatus:
    """What ``highlander status`` reports."""

    held: bool
    socket: str
    record: HolderRecord | None = None
    reply: StatusReply | None = None
    problem: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def lock_is_held(path: str) -> bool:
    """Whether a live process holds the project's lock (a try that is undone at once).

    Raises :class:`~highlander._errors.UnsafeFileError` when ``path`` is not
    our own regular file (opening a FIFO read-only would wait for a writer).
    """
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing also drops the lock if we just took it
    return False


async def query_status(settings: Settings, waiter: Waiter) -> HolderStatus:
    """Ask the holder for its status; fall back on its record when it cannot answer."""
    status = HolderStatus(held=False, socket=settings.paths.socket)
    status.record = read_record(settings.paths.state)
    try:
        sock = connect(settings.paths.socket)
    except QueueFull:
        status.held = True
        status.problem = "its queue of pending connections is full: it is not accepting"
        return status
    if sock is None:
        status.held = lock_is_held(settings.paths.lock)
        if status.held:
            status.problem = "the lock is held but nobody listens on the socket"
        return status
    status.held = True
    try:
        greeting = await greet(settings, sock, waiter)
        if isinstance(greeting, Silent | Mismatch):
            status.problem = (
                greeting.problem if isinstance(greeting, Mismatch) else "no HELLO in time"
            )
            return status
        conn = greeting.conn
        assert conn.peer_nonce is not None
        query = Status(nonce=conn.local_nonce.hex(), echo=conn.peer_nonce.hex())
        await send_frame(sock, conn.send(query, waiter.now()), waiter)
        reply = await receive_event(sock, conn, waiter)
        if isinstance(reply, StatusReply):
            status.reply = reply
        else:
            status.problem = f"unexpected answer: {reply}"
    except (HighlanderError, Overdue, OSError) as exc:
        status.problem = str(exc)
    finally:
        sock.close()
    return status


async def request_stop(
    settings: Settings, on_progress: Callable[[ProgressReport], None], waiter: Waiter
) -> tuple[int, dict[str, Any] | None]:
    """Ask the holder to save and leave; return ``(its pid, its handoff)``.

    Raises :class:`IncumbentUnreachableError` when there is no holder to ask.
    """
    try:
        sock = connect(settings.paths.socket)
    except QueueFull:
        raise IncumbentUnreachableError(
            f"the holder on {settings.paths.socket} is not accepting connections (its queue "
            "is full); retry, or see `highlander status`"
        ) from None
    if sock is None:
        raise IncumbentUnreachableError(f"no holder listens on {settings.paths.socket}")
    try:
        greeting = await greet(settings, sock, waiter)
        if not isinstance(greeting, Greeting):
            raise IncumbentUnreachableError(
                f"the holder on {settings.paths.socket} did not introduce itself: "
                f"{getattr(greeting, 'problem', 'no HELLO in time')}"
            )
        conn, me = greeting.conn, os.getpid()
        assert conn.peer_nonce is not None
        start = _own_start_time()
        nonces = conn.local_nonce.hex(), conn.peer_nonce.hex()
        save = Save(me, start, *nonces, Intent.STOP, settings.app)
        await send_frame(sock, conn.send(save, waiter.now()), waiter)
        event = await receive_event(sock, conn, waiter)
        while isinstance(event, ProgressReport):
            on_progress(event)
            event = await receive_event(sock, conn, waiter)
        if isinstance(event, Refused):
            raise SuccessionRefused(f"the holder refused: {event.detail}", reason=event.reason)
        if not isinstance(event, Saved):
            raise IncumbentUnreachableError(f"the holder went away before saving ({event})")
        await send_frame(sock, conn.send(AckSuccession(), waiter.now()), waiter)
        try:  # the holder leaving; it has saved already, so a slow exit changes nothing
            while not isinstance(await receive_event(sock, conn, waiter), Closed):
                pass
        except (Overdue, OSError):
            pass
        return greeting.hello.pid, event.handoff
    except Overdue as exc:
        raise IncumbentUnreachableError(
            f"the holder missed its {exc.deadline.phase.value} deadline"
        ) from None
    except OSError as exc:  # it went away mid-conversation, or stopped reading
        raise IncumbentUnreachableError(
            f"the conversation with the holder broke off ({exc}); see `highlander status`"
        ) from None
    finally:
        sock.close()


def _own_start_time() -> int:
    from highlander._identity import own_identity  # noqa: PLC0415

    return own_identity().start_time


def uptime(record: HolderRecord | None) -> float | None:
    """Seconds since the holder's reign began."""
    return None if record is None else max(0.0, time.time() - record.since_ms / 1000)
