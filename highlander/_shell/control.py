"""Operator requests to a holder: STATUS, STOP, and the forced stop.

STATUS only asks; STOP asks the holder to save, hand nothing on and leave;
the forced stop (the verified kill, no save) is for a holder that cannot be
asked.
Used by the ``highlander status`` and ``highlander stop`` commands.  STATUS
and STOP talk the signed protocol like a newcomer, so they need the same
token; all three verify the holder's identity against the kernel before
sending anything, or signalling it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from highlander._core.connection import Closed
from highlander._core.deadlines import Phase
from highlander._core.errors import (
    ForeignHolderError,
    HighlanderError,
    IncumbentUnreachableError,
    Reason,
)
from highlander._core.messages import (
    AckSuccession,
    Busy,
    Intent,
    ProgressReport,
    Refused,
    Saved,
    Status,
    StatusReply,
)
from highlander._host.files import open_regular
from highlander._host.record import HolderRecord, read_record
from highlander._host.settings import Settings
from highlander._host.termination import terminate
from highlander._host.waiting import Waiter
from highlander._shell.backend import LOCAL
from highlander._shell.client import Greeting, Mismatch, QueueFull, Silent, connect, greet
from highlander._shell.observe import record_target
from highlander._shell.save_request import refusal_error, request_save
from highlander._shell.wire import Overdue, receive_event, send_message

if TYPE_CHECKING:
    from highlander._shell.seam import Backend


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

    Raises :class:`~highlander._core.errors.UnsafeFileError` when ``path`` is not
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
        await send_message(sock, conn, query, waiter)
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


#: The way out of every stop that failed with the holder still holding the project.
FORCE = "`highlander stop --force` ends it without saving (after verifying who it is)"


async def request_stop(
    settings: Settings,
    on_progress: Callable[[ProgressReport], None],
    waiter: Waiter,
    backend: Backend = LOCAL,
) -> tuple[int, dict[str, Any] | None]:
    """Ask the holder to save and leave; return ``(its pid, its handoff)``.

    Every failure says what to do next (usually :data:`FORCE`).  Raises
    :class:`IncumbentUnreachableError` when the holder cannot be asked or
    did not finish, :class:`SuccessionRefused` when it refused.  ``backend``:
    where the holder is met (this machine, or etcd).
    """
    socket_path = backend.place(settings)
    try:
        sock = backend.open(settings)
    except QueueFull:
        raise IncumbentUnreachableError(
            f"the holder on {socket_path} is not accepting connections (its queue is full): "
            f"retry in a moment; if it stays full, {FORCE}"
        ) from None
    if sock is None:
        raise IncumbentUnreachableError(
            f"a process holds the project's lock but nobody listens on {socket_path}: {FORCE}"
        )
    try:
        greeting = await greet(settings, sock, waiter, backend)
        if not isinstance(greeting, Greeting):
            raise IncumbentUnreachableError(_not_greeted(settings, greeting))
        return await _ask_to_stop(settings, greeting, on_progress)
    except OSError as exc:  # it went away mid-conversation, or stopped reading
        raise IncumbentUnreachableError(
            f"the conversation with the holder broke off ({exc}): retry; "
            "`highlander status` says whether it still holds the project"
        ) from None
    finally:
        sock.close()


async def _ask_to_stop(
    settings: Settings, greeting: Greeting, on_progress: Callable[[ProgressReport], None]
) -> tuple[int, dict[str, Any] | None]:
    """SAVE (intent STOP), PROGRESS*, SAVED, ACK_SUCCESSION with the greeted holder."""
    sock, conn, waiter, pid = greeting.sock, greeting.conn, greeting.waiter, greeting.hello.pid
    try:
        event = await request_save(settings, greeting, Intent.STOP, on_progress)
    except Overdue as exc:
        phase, timeouts = exc.deadline.phase, settings.timeouts
        what = {
            Phase.STALL: f"its save made no progress for {timeouts.stall:g} s",
            Phase.CEILING: f"its save did not end within {timeouts.ceiling:g} s",
        }.get(phase, "it stopped answering")
        raise IncumbentUnreachableError(
            f"the holder (pid {pid}) missed its {phase.value} deadline: {what}, and it "
            f"still holds the project (a hung on_save?): {FORCE}"
        ) from None
    if isinstance(event, Refused):
        advice = "fix its save hook (its stderr has the traceback), or " + FORCE
        raise refusal_error(
            event,
            f"the holder (pid {pid}) refused and keeps the project: {event.detail}; "
            + (advice if event.reason is Reason.INTERNAL else "retry"),
        )
    if isinstance(event, Busy):
        raise IncumbentUnreachableError(
            f"the holder (pid {pid}) is handing the project over to pid {event.pid}: "
            "retry once that is done (`highlander status` names the new holder)"
        )
    if not isinstance(event, Saved):
        raise IncumbentUnreachableError(
            f"the holder (pid {pid}) closed the connection before saving: it may have "
            "been leaving; `highlander status` says whether it still holds the project"
        )
    await send_message(sock, conn, AckSuccession(), waiter)
    try:  # the holder leaving; it has saved already, so a slow exit changes nothing
        while not isinstance(await receive_event(sock, conn, waiter), Closed):
            pass
    except (Overdue, OSError):
        pass
    return pid, event.handoff


def _not_greeted(settings: Settings, greeting: Silent | Mismatch) -> str:
    """Why the holder could not be asked to stop, and what to do about it."""
    pid = greeting.pid
    if isinstance(greeting, Mismatch):
        return (
            f"the process on {settings.paths.socket} is not the verified holder "
            f"({greeting.problem}): retry; if it persists, see `highlander status`"
        )
    if greeting.closed:
        return f"the holder (pid {pid}) hung up without a word: it may be leaving; retry"
    if greeting.halted:
        return (
            f"the holder (pid {pid}) is stopped (SIGSTOP, or a debugger holds it): "
            f"`kill -CONT {pid}` resumes it, or {FORCE}"
        )
    return (
        f"the holder (pid {pid}) did not introduce itself within "
        f"{settings.timeouts.hello:g} s (hung, or a very busy machine): retry, or {FORCE}"
    )


async def force_stop(settings: Settings, waiter: Waiter) -> int:
    """End the holder without a save: the verified kill (SIGTERM, then SIGKILL); its pid.

    The process signalled is the one the holder's record names, and only if
    the kernel confirms it (pid, start time, executable, uid, boot, and that
    it holds the project's lock: :func:`highlander._host.termination.terminate`);
    anything else raises :class:`ForeignHolderError` and nothing is signalled.
    """
    lock = settings.paths.lock
    target = record_target(settings, read_record(settings.paths.state))
    if target is None:
        raise IncumbentUnreachableError(
            f"a process holds {lock} but the holder's record is missing or unreadable, "
            "so nobody can verify who it is: Highlander signals nothing; find it with "
            f"`fuser -v {lock}` and stop it yourself"
        )
    try:
        await terminate(target, settings.timeouts, settings.events, "stop --force", waiter)
    except ForeignHolderError as exc:
        raise ForeignHolderError(
            f"{exc}: the holder's record does not name the process holding {lock} "
            f"(find that with `fuser -v {lock}`)"
        ) from None
    if lock_is_held(lock):
        raise IncumbentUnreachableError(
            f"pid {target.pid} is gone, but another process holds {lock} (a successor "
            "just claimed, or a child that inherited the lock): see `highlander status`"
        )
    return target.pid


def uptime(record: HolderRecord | None) -> float | None:
    """Seconds since the holder's reign began."""
    return None if record is None else max(0.0, time.time() - record.since_ms / 1000)
