"""The etcd client's HTTP/1.1 connections: kept alive, bounded, closed on any doubt.

:mod:`highlander._etcd.http11` reads and writes the bytes; this module
owns the sockets.  They are non-blocking and every wait goes through a
:class:`~highlander._host.waiting.Runtime`: the session's own loop
(:class:`~highlander._host.loop.SelectorLoop`, no asyncio: a newcomer does
not import an event loop to talk to etcd) or anyio's (the tests run it on
asyncio and trio).  Every wait has the request's deadline.

A :class:`Pool` keeps the connections that finished a response cleanly,
per member, and gives one back to the next request to that member unless
it idled past :data:`KEEPALIVE_EXPIRY` or the server closed it meanwhile
(the socket reads as ready: a closed connection's end, or bytes nobody
asked for).  A connection that timed out, was cancelled, or read anything
unexpected is closed, never reused: the next request must not read the
last one's answer.

Every failure to reach a member or to read its answer is one
:class:`TransportError`, so the client has one thing to catch before it
asks the next member.  A socket is closed by whoever made it on every
failure, a failed TLS handshake included: no descriptor is left to the
garbage collector.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import AsyncIterator, Mapping

from highlander._etcd.http11 import End, Head, ProtocolError, Response, request
from highlander._host.tasks import Closed

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import ssl
    from typing import Any

    from highlander._host.waiting import Runtime

#: A kept-alive connection idle longer than this is closed rather than reused (httpx's default).
KEEPALIVE_EXPIRY = 5.0
#: Idle connections kept per member; more are closed when they finish.
MAX_IDLE = 20
_READ = 65536
#: What the kernel and the parser raise when a connection cannot be made or breaks
#: (ssl's errors are ``OSError``s; ``Closed``: a descriptor closed under a wait).
_BROKEN = (OSError, ProtocolError, Closed)
#: "Not yet" from a plain non-blocking socket.
_AGAIN = (BlockingIOError, InterruptedError)


def split_url(url: str) -> tuple[str, str, str, int, str]:
    """``scheme://netloc/path`` as (scheme, netloc, host, port or 0, path), as ``urlsplit``.

    For the member URLs :mod:`highlander._etcd.endpoints` writes, without
    importing ``urllib.parse`` (3 ms with ``ipaddress``, on every newcomer's path).
    """
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    host, port = netloc, ""
    if netloc.startswith("["):  # [::1]:2379
        host, _, port = netloc[1:].partition("]")
        port = port.removeprefix(":")
    elif ":" in netloc:
        host, _, port = netloc.rpartition(":")
    return (
        scheme.lower(),
        netloc,
        host.lower(),
        int(port) if port.isdigit() else 0,
        slash + path or "/",
    )


class TransportError(Exception):
    """The member could not be reached, or its answer could not be read: ask another."""


class _Connection:
    """One TCP (or TLS) connection to one member, reading one response at a time."""

    def __init__(self, sock: socket.socket, runtime: Runtime) -> None:
        self.sock = sock
        self.runtime = runtime
        self.idle_since = 0.0
        self.response = Response()
        # What "not yet" is, for a receive and for a send, and which way to wait:
        # a TLS socket may need to read to send, and to write to receive.
        self._recv_read: tuple[type[Exception], ...] = _AGAIN
        self._recv_write: tuple[type[Exception], ...] = ()
        self._send_read: tuple[type[Exception], ...] = ()
        self._send_write: tuple[type[Exception], ...] = _AGAIN
        if type(sock) is not socket.socket:
            import ssl  # noqa: PLC0415 - a TLS socket's module is loaded already

            self._recv_read = (*_AGAIN, ssl.SSLWantReadError)
            self._recv_write = (ssl.SSLWantWriteError,)
            self._send_read = (ssl.SSLWantReadError,)
            self._send_write = (*_AGAIN, ssl.SSLWantWriteError)

    def dead(self) -> bool:
        """Whether a kept-alive connection was closed or spoken on by the server meanwhile."""
        if self.sock.fileno() < 0:
            return True
        poller = select.poll()  # not select(): descriptors above 1024 (1,000 holders)
        poller.register(self.sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    async def wait(self, readable: bool, deadline: float) -> None:
        """Wait until the socket is ready as asked; ``TimeoutError`` at ``deadline``."""
        left = deadline - self.runtime.now()
        if left <= 0:
            raise TimeoutError
        if readable:
            ready = await self.runtime.readable(self.sock, left)
        else:
            ready = await self.runtime.writable(self.sock, left)
        if not ready:
            raise TimeoutError

    async def send(self, data: bytes, deadline: float) -> None:
        """Write a request; a new :class:`Response` reads its answer."""
        self.response = Response()
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view) :]
            except self._send_write:
                await self.wait(False, deadline)
            except self._send_read:
                await self.wait(True, deadline)

    async def event(self, deadline: float) -> Head | bytes | None:
        """The response's next head or body piece; ``None`` at its end."""
        while (event := self.response.next_event()) is None:
            try:
                data = self.sock.recv(_READ)
            except self._recv_read:
                await self.wait(True, deadline)
                continue
            except self._recv_write:  # TLS renegotiation: rare, but it must not spin
                await self.wait(False, deadline)
                continue
            self.response.feed(data)
        return None if isinstance(event, End) else event

    async def handshake(self, deadline: float) -> None:
        """Finish a TLS socket's handshake (wrapped with ``do_handshake_on_connect=False``)."""
        while True:
            try:
                self.sock.do_handshake()  # type: ignore[attr-defined]
                return
            except self._recv_read:
                await self.wait(True, deadline)
            except self._recv_write:
                await self.wait(False, deadline)

    def close(self) -> None:
        """Close at once (no TLS goodbye)."""
        self.sock.close()


class Body:
    """A streamed response's body, piece by piece; each piece due within ``idle`` seconds."""

    def __init__(self, connection: _Connection, head: Head, idle: float) -> None:
        """The body of ``head``'s response on ``connection``."""
        self.head = head
        self._connection = connection
        self._idle = idle
        self.ended = False

    @property
    def status(self) -> int:
        """The response's status code."""
        return self.head.status

    def __aiter__(self) -> Body:
        """Iterate over the body's pieces (no generator: nothing left for the GC to close)."""
        return self

    async def __anext__(self) -> bytes:
        """The next piece; :class:`TransportError` when it is late or the stream breaks."""
        if self.ended:
            raise StopAsyncIteration
        connection = self._connection
        try:
            event = await connection.event(connection.runtime.now() + self._idle)
        except TimeoutError:
            raise TransportError(f"no byte of the answer for {self._idle:g} s") from None
        except _BROKEN as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        if event is None:
            self.ended = True
            raise StopAsyncIteration
        assert isinstance(event, bytes)
        return event


class Pool:
    """Kept-alive connections to the members of one cluster; ``aclose()`` when done."""

    def __init__(
        self, ssl_context: ssl.SSLContext | None = None, runtime: Runtime | None = None
    ) -> None:
        """``ssl_context`` for ``https://`` members; ``runtime``: whose waits (anyio's if none)."""
        if runtime is None:
            from highlander._host.waiting import ANYIO  # noqa: PLC0415

            runtime = ANYIO
        self._ssl = ssl_context
        self.runtime = runtime
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]:
        """POST ``body`` and read the whole answer, all within ``timeout`` seconds."""
        deadline = self.runtime.now() + timeout
        try:
            async with self._exchange(url, body, headers, deadline) as (connection, head):
                pieces = []
                while (piece := await connection.event(deadline)) is not None:
                    assert isinstance(piece, bytes)
                    pieces.append(piece)
                return head.status, b"".join(pieces)
        except TimeoutError:
            raise TransportError(f"no whole answer within {timeout:g} s") from None
        except _BROKEN as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, body: bytes, headers: Mapping[str, str], *, timeout: float, idle: float
    ) -> AsyncIterator[Body]:
        """POST ``body``, then read the answer's body as it comes (a watch).

        Connecting, sending and the head are bounded by ``timeout + idle``;
        each piece after it by ``idle``.
        """
        async with contextlib.AsyncExitStack() as stack:
            try:
                connection, head = await stack.enter_async_context(
                    self._exchange(url, body, headers, self.runtime.now() + timeout + idle)
                )
            except TimeoutError:
                raise TransportError(f"no answer within {timeout + idle:g} s") from None
            yield Body(connection, head, idle)

    @contextlib.asynccontextmanager
    async def _exchange(
        self, url: str, body: bytes, headers: Mapping[str, str], deadline: float
    ) -> AsyncIterator[tuple[_Connection, Head]]:
        """Send one request on a kept-alive or new connection; yield it with the answer's head.

        The connection goes back to the pool only if its response was read
        to the end and may be followed by another; otherwise it is closed.
        """
        if self._closed:
            raise RuntimeError("the etcd client's connections are closed")
        scheme, netloc, host, port, path = split_url(url)
        origin = (host, port or (443 if scheme == "https" else 80))
        data = request("POST", netloc, path, headers, body)
        connection, head = await self._send(origin, data, deadline)
        try:
            yield connection, head
        except BaseException:
            connection.close()
            raise
        self._release(origin, connection)

    async def _send(
        self, origin: tuple[str, int], data: bytes, deadline: float
    ) -> tuple[_Connection, Head]:
        """The request sent and its answer's head read, on a kept-alive connection if any."""
        connection = self._reuse(origin)
        if connection is not None:
            try:
                return connection, await _ask(connection, data, deadline)
            except TimeoutError:
                raise
            except _BROKEN:
                pass  # closed by the server as we sent (idle ones may be): once more, anew
        try:
            connection = await self._connect(*origin, deadline)
            return connection, await _ask(connection, data, deadline)
        except TimeoutError:
            raise
        except _BROKEN as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def _connect(self, host: str, port: int, deadline: float) -> _Connection:
        """A new connection to ``host:port`` (every address in turn), TLS if configured."""
        last: Exception = OSError(f"{host!r} has no address")
        for family, _, _, _, address in await self._addresses(host, port):
            sock = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connection = await self._open(sock, host, address, deadline)
            except BaseException as exc:
                sock.close()
                if isinstance(exc, TimeoutError) or not isinstance(exc, OSError):
                    raise
                last = exc
                continue
            return connection
        raise last

    async def _open(
        self, sock: socket.socket, host: str, address: tuple[str, int], deadline: float
    ) -> _Connection:
        plain = _Connection(sock, self.runtime)
        try:
            sock.connect(address)
        except (BlockingIOError, InterruptedError):
            await plain.wait(False, deadline)
            failed = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if failed:
                import os  # noqa: PLC0415 - a refused connection's message only

                raise OSError(failed, os.strerror(failed)) from None
        if self._ssl is None:
            return plain
        tls = self._ssl.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
        connection = _Connection(tls, self.runtime)
        try:
            await connection.handshake(deadline)
        except BaseException:
            tls.close()
            raise
        return connection

    async def _addresses(self, host: str, port: int) -> list[Any]:
        """``getaddrinfo``'s answer; a name is resolved on a worker thread (it may block)."""
        for family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                socket.inet_pton(family, host)
                return [(family, socket.SOCK_STREAM, 0, "", (host, port))]
        found = await self.runtime.to_thread(
            socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM, abandon_on_cancel=True
        )
        return list(found)

    def _reuse(self, origin: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(origin, [])
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < KEEPALIVE_EXPIRY and not connection.dead():
                return connection
            connection.close()
        return None

    def _release(self, origin: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if connection.response.reusable and not self._closed and len(idle) < MAX_IDLE:
            connection.idle_since = time.monotonic()
            idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        """Close every idle connection; those in use close when their request ends."""
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


async def _ask(connection: _Connection, data: bytes, deadline: float) -> Head:
    """Send ``data`` on ``connection`` and read the answer's head; close it on any failure."""
    try:
        await connection.send(data, deadline)
        event = await connection.event(deadline)
        if not isinstance(event, Head):
            raise ProtocolError("an answer without a head")
        return event
    except BaseException:
        connection.close()
        raise
