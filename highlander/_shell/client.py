"""The client half of a conversation: connect to the holder and verify who answers.

Shared by the newcomer's succession, the status and stop requests and the
read-only probe of OBSERVE/WARN.  Before anything is sent, the peer is
checked against the kernel: same uid (from ``SO_PEERCRED``), and HELLO's
pid, start time and executable must match what ``/proc`` says about the
process behind the socket; its app must be ours, name for name.
"""

from __future__ import annotations

import os
import socket

from highlander._core.connection import Closed, Connection
from highlander._core.deadlines import Phase, looks_busy
from highlander._core.errors import (
    AuthenticationError,
    ForeignHolderError,
    HighlanderError,
    OtherAppError,
    Reason,
    RemoteProtocolError,
    SignatureError,
    VersionMismatchError,
)
from highlander._core.findings import Impostor
from highlander._core.messages import Hello
from highlander._core.state import Role
from highlander._core.values import Value
from highlander._host.event_log import Event
from highlander._host.identity import PeerCredentials, process_identity, run_state
from highlander._host.settings import Settings
from highlander._host.waiting import Waiter
from highlander._shell.backend import LOCAL
from highlander._shell.dial import QueueFull, connect
from highlander._shell.wire import Baseline, Overdue, receive_event

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

    from highlander._shell.seam import Backend

__all__ = ["Greeting", "Mismatch", "QueueFull", "Silent", "connect", "greet", "probe"]


class Greeting(Value):
    """A connection whose HELLO was received and verified."""

    sock: socket.socket
    conn: Connection
    hello: Hello
    peer: PeerCredentials
    waiter: Waiter
    #: Whether this machine's kernel can see the peer (``/proc``): never another host.
    local: bool = True


class Silent(Value):
    """Connected, but no HELLO in time (or the stream closed): ``pid`` per the kernel.

    ``busy``: the kernel says it was working meanwhile (not stopped, running or
    gaining CPU time): a loaded machine, not a hang.
    """

    pid: int
    closed: bool
    busy: bool = False
    #: The kernel showed it stopped when the deadline passed.
    halted: bool = False


class Mismatch(Impostor):
    """HELLO contradicts the kernel (``pid`` per the kernel); ``problem`` says how."""


def check_uid(settings: Settings, peer: PeerCredentials) -> None:
    """Refuse a peer of another uid: it is never talked to, never signalled."""
    if peer.uid != os.geteuid():
        settings.events.emit(Event.IDENTITY_MISMATCH, peer_pid=peer.pid, reason=f"uid {peer.uid}")
        raise ForeignHolderError(
            f"{settings.paths.socket} is served by pid {peer.pid} of uid {peer.uid}, not by "
            "you: Highlander will not talk to it or signal it; its owner must stop it"
        )


async def greet(
    settings: Settings,
    sock: socket.socket,
    waiter: Waiter,
    backend: Backend = LOCAL,
) -> Greeting | Silent | Mismatch:
    """Read and verify HELLO on a fresh connection.

    Who answers, and whether HELLO matches it, is the ``backend``'s to say
    (locally ``SO_PEERCRED`` and ``/proc``).
    Raises :class:`AuthenticationError`
    (token), :class:`VersionMismatchError`, :class:`ForeignHolderError` (another
    uid) or :class:`OtherAppError`.
    """
    peer = backend.peer(sock)
    check_uid(settings, peer)
    local, place = backend.sees(sock), backend.place(settings)
    conn = Connection(
        Role.NEWCOMER,
        key=settings.key(),
        nonce=os.urandom(16),
        now=waiter.now(),
        timeouts=settings.timeouts,
    )
    before = Baseline(peer.pid if local else None)
    try:
        hello = await receive_event(sock, conn, waiter, on_wait=before.take)
    except Overdue:
        after = run_state(peer.pid) if local else None
        busy = looks_busy(before.sample, after)
        settings.events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="hello", busy=busy)
        halted = after is not None and after.state in "Tt"
        return Silent(peer.pid, closed=False, busy=busy, halted=halted)
    except SignatureError as exc:
        settings.events.emit(Event.AUTH_FAILED, peer_pid=peer.pid, reason=str(exc))
        raise AuthenticationError(
            f"the holder (pid {peer.pid}) on {place} does not share this "
            f"token ({exc}); give every client the same HIGHLANDER_TOKEN"
        ) from None
    except RemoteProtocolError as exc:
        settings.events.emit(Event.PROTOCOL_ERROR, peer_pid=peer.pid, reason=str(exc))
        if exc.reason is Reason.VERSION:
            raise VersionMismatchError(str(exc)) from None
        raise ForeignHolderError(
            f"pid {peer.pid} on {place} does not speak the Highlander protocol "
            f"({exc}): it is not a Highlander holder; Highlander will not signal it"
        ) from None
    if isinstance(hello, Closed):
        return Silent(peer.pid, closed=True)
    assert isinstance(hello, Hello)
    problem = backend.hello_problem(settings, hello, sock, peer.pid)
    if problem is not None:
        return Mismatch(peer.pid, problem)
    if hello.app != settings.app:
        raise other_app(settings, hello, peer.pid)
    settings.events.emit(Event.HELLO, peer_pid=peer.pid, generation=hello.generation)
    return Greeting(sock, conn, hello, peer, waiter, local)


def hello_problem(settings: Settings, hello: Hello, kernel_pid: int) -> str | None:
    """What is wrong with HELLO's identity claim, or ``None``."""
    if hello.pid != kernel_pid:
        return f"HELLO claims pid {hello.pid} but the kernel says {kernel_pid}"
    actual = process_identity(kernel_pid)
    if actual is None or actual.start_time != hello.start_time:
        return f"HELLO's start time does not match pid {kernel_pid}'s"
    if hello.exe and actual.exe != hello.exe:
        return f"HELLO claims executable {hello.exe!r} but pid {kernel_pid} runs {actual.exe!r}"
    if actual.uid != os.geteuid():
        return f"pid {kernel_pid} runs as uid {actual.uid}"
    return None


def other_app(settings: Settings, hello: Hello, pid: int) -> OtherAppError:
    """A verified holder of another app answered: never ours to take over, stop or wait for.

    Not a :class:`Mismatch` (which a handover in flight can cause and a retry
    cures): the holder is who it says, it is just not this app.
    """
    settings.events.emit(Event.IDENTITY_MISMATCH, peer_pid=pid, reason=f"app {hello.app!r}")
    return OtherAppError(
        f"the holder on {settings.paths.socket} (pid {pid}) is app {hello.app!r}, not "
        f"{settings.app!r}: Highlander hands nothing from one app to another; pass a distinct "
        "--app (app=) to each server"
    )


async def probe(
    settings: Settings, waiter: Waiter, backend: Backend | None = None
) -> dict[str, Any]:
    """OBSERVE/WARN: look at the holder without asking anything of it.

    Returns what was learnt (``answering``, ``pid``); a holder that does not
    answer in time is reported (event ``hung``), never signalled.
    """
    backend = backend or LOCAL
    try:
        sock = backend.open(settings)
    except QueueFull:
        return {"answering": False, "pid": None, "error": "its connection queue is full"}
    if sock is None:
        settings.events.emit(Event.UNREACHABLE, socket=settings.paths.socket)
        return {"answering": False, "pid": None, "error": "no socket"}
    try:
        greeting = await greet(settings, sock, waiter, backend)
        if isinstance(greeting, Greeting):
            return {"answering": True, "pid": greeting.hello.pid}
        if isinstance(greeting, Silent) and not greeting.closed:
            settings.events.emit(Event.HUNG, peer_pid=greeting.pid, phase=Phase.HELLO.value)
        return {"answering": False, "pid": greeting.pid}
    except HighlanderError as exc:
        return {"answering": False, "pid": None, "error": str(exc)}
    finally:
        sock.close()
