"""The I/O half of a connection: move a :class:`Connection`'s bytes over a Unix socket.

Like httpcore's ``_async/http11.py`` driving h11: the socket, the clock and
descriptor passing live here; every protocol decision stays in the sans-IO
core.  Waits are bounded by the connection's own deadlines; a missed one
raises :class:`Overdue`.
"""

from __future__ import annotations

import array
import contextlib
import os
import select
import socket
from collections.abc import Callable, Sequence

from highlander._core.codec import NEED_DATA
from highlander._core.connection import Closed, Connection
from highlander._core.deadlines import Deadline, Sample
from highlander._core.errors import RemoteProtocolError
from highlander._core.messages import Message
from highlander._host.identity import run_state
from highlander._host.waiting import Waiter
from highlander._shell.dial import unix_socket

__all__ = [
    "Baseline",
    "Overdue",
    "close_fds",
    "receive_event",
    "send_frame",
    "send_message",
    "unix_socket",
]

READ_SIZE = 65536
#: How long a peer may read nothing of a frame we are sending before we give
#: up on it.  A frame fits a Unix socket's buffer many times over, so only a
#: peer that stopped reading, with the buffer already full, ever waits at all.
SEND_STALL = 5.0
MAX_FDS = 4
_ANC_SIZE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
_RECV_FLAGS = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


class Baseline:
    """The watchdog's sample of a local peer before a wait, taken only if the wait happens.

    Pass :meth:`take` as :func:`receive_event`'s ``on_wait``: a frame that
    is already here needs no sample (each costs a few ``/proc`` reads).
    ``pid`` ``None``: the kernel cannot see the peer (another host).
    """

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.sample: Sample | None = None

    def take(self) -> None:
        """Sample the peer now, unless a sample is held already."""
        if self.pid is not None and self.sample is None:
            self.sample = run_state(self.pid, threads=False)


class Overdue(Exception):  # noqa: N818 - a condition, caught by the shell, never escapes
    """The peer missed ``deadline``."""

    def __init__(self, deadline: Deadline) -> None:
        super().__init__(f"peer missed the {deadline.phase.value} deadline")
        self.deadline = deadline


async def send_frame(
    sock: socket.socket, data: bytes, waiter: Waiter, fds: Sequence[int] = ()
) -> None:
    """Write ``data``; ``fds`` travel as ``SCM_RIGHTS`` with its first byte.

    Raises :class:`TimeoutError` (an ``OSError``, like the socket's own
    failures) if the peer reads nothing of it for :data:`SEND_STALL` seconds.
    """
    view = memoryview(data)
    pending = list(fds)
    while view:
        if not await waiter.writable(sock, SEND_STALL):
            raise TimeoutError(f"the peer left {len(view)} bytes unread for {SEND_STALL:g} s")
        try:
            if pending:
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", pending))]
                sent = sock.sendmsg([view], ancillary)
                pending = []
            else:
                sent = sock.send(view)
        except BlockingIOError:
            continue
        view = view[sent:]


async def send_message(
    sock: socket.socket, conn: Connection, message: Message, waiter: Waiter, fds: Sequence[int] = ()
) -> None:
    """Have ``conn`` frame ``message`` (signed, in sequence, at the waiter's time) and write it."""
    await send_frame(sock, conn.send(message, waiter.now()), waiter, fds)


async def receive_event(
    sock: socket.socket,
    conn: Connection,
    waiter: Waiter,
    fds: list[int] | None = None,
    *,
    on_wait: Callable[[], object] | None = None,
) -> Message | Closed:
    """Read until ``conn`` yields a message or :class:`Closed`.

    Descriptors that arrive are appended to ``fds`` (closed if ``fds`` is
    ``None``: we never keep what we did not ask for).  ``on_wait`` runs once,
    just before the first wait for bytes that have not arrived yet: the
    watchdog's sample of the peer, which a frame already here never needs.
    """
    while True:
        event = conn.next_event(waiter.now())
        if event is not NEED_DATA:
            assert isinstance(event, Message | Closed)
            return event
        deadline = conn.deadline
        if deadline is None:  # pragma: no cover - the table never waits without a deadline
            raise RuntimeError(f"waiting for the peer in {conn.state} without a deadline")
        if on_wait is not None and not _arrived(sock):
            on_wait()  # the first wait for bytes not here yet
            on_wait = None
        if not await waiter.readable(sock, deadline.at - waiter.now()):
            raise Overdue(deadline)
        try:
            data, ancdata, flags, _ = sock.recvmsg(READ_SIZE, _ANC_SIZE, _RECV_FLAGS)
        except BlockingIOError:
            continue
        except ConnectionResetError:
            data, ancdata, flags = b"", [], 0
        received = _take_fds(ancdata)
        if fds is None or flags & socket.MSG_CTRUNC:
            for fd in received:
                os.close(fd)
            if flags & socket.MSG_CTRUNC:
                raise RemoteProtocolError(
                    "peer sent more file descriptors than the protocol allows"
                )
        else:
            fds.extend(received)
        conn.receive_data(data)


def _arrived(sock: socket.socket) -> bool:
    """Whether bytes (or the end of stream) wait to be read on ``sock`` right now."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _take_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % array.array("i").itemsize
            fds.extend(array.array("i", payload[:usable]))
    return fds


def close_fds(fds: Sequence[int]) -> None:
    """Close descriptors, ignoring ones already closed."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
