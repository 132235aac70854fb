"""The etcd client's HTTP/1.1 connections on anyio: kept alive, bounded, closed on any doubt.

:mod:`highlander._etcd.http11` reads and writes the bytes; this module
owns the sockets.  A :class:`Pool` keeps the connections that finished a
response cleanly, per member, and gives one back to the next request to
that member unless it idled past :data:`KEEPALIVE_EXPIRY` or the server
closed it meanwhile (the socket reads as ready: a closed connection's end,
or bytes nobody asked for).  A connection that timed out, was cancelled,
or read anything unexpected is closed, never reused: the next request
must not read the last one's answer.

Every failure to reach a member or to read its answer is one
:class:`TransportError`, so the client has one thing to catch before it
asks the next member.  anyio's ``connect_tcp`` closes the TCP stream when
a TLS handshake fails or is cancelled (a budget cut short), so no
descriptor is left to the garbage collector.
"""

from __future__ import annotations

import contextlib
import select
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import anyio
import anyio.abc

from highlander._etcd.http11 import End, Head, ProtocolError, Response, request

#: A kept-alive connection idle longer than this is closed rather than reused (httpx's default).
KEEPALIVE_EXPIRY = 5.0
#: Idle connections kept per member; more are closed when they finish.
MAX_IDLE = 20
_READ = 65536
#: What anyio and the kernel raise when a connection cannot be made or breaks.
_BROKEN = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    ProtocolError,
)


class TransportError(Exception):
    """The member could not be reached, or its answer could not be read: ask another."""


class _Connection:
    """One TCP (or TLS) connection to one member, reading one response at a time."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.idle_since = 0.0
        self.response = Response()

    def dead(self) -> bool:
        """Whether a kept-alive connection was closed or spoken on by the server meanwhile."""
        try:
            raw = self.stream.extra(anyio.abc.SocketAttribute.raw_socket)  # noqa: S610 (anyio's, not Django's)
        except anyio.TypedAttributeLookupError:
            return True
        poller = select.poll()  # not select(): descriptors above 1024 (1,000 holders)
        poller.register(raw.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    async def send(self, data: bytes) -> None:
        """Write a request; a new :class:`Response` reads its answer."""
        self.response = Response()
        await self.stream.send(data)

    async def event(self) -> Head | bytes | None:
        """The response's next head or body piece; ``None`` at its end."""
        while (event := self.response.next_event()) is None:
            try:
                data = await self.stream.receive(_READ)
            except anyio.EndOfStream:
                data = b""
            self.response.feed(data)
        return None if isinstance(event, End) else event

    async def close(self) -> None:
        """Close at once, even under a cancellation (no TLS goodbye)."""
        await anyio.aclose_forcefully(self.stream)


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
        try:
            with anyio.fail_after(self._idle):
                event = await self._connection.event()
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

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        """``ssl_context`` for ``https://`` members (none needed for ``http://``)."""
        self._ssl = ssl_context
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]:
        """POST ``body`` and read the whole answer, all within ``timeout`` seconds."""
        try:
            with anyio.fail_after(timeout):
                async with self._exchange(url, body, headers) as (connection, head):
                    pieces = []
                    while (piece := await connection.event()) is not None:
                        assert isinstance(piece, bytes)
                        pieces.append(piece)
                    return head.status, b"".join(pieces)
        except TimeoutError:
            raise TransportError(f"no whole answer within {timeout:g} s") from None

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
                with anyio.fail_after(timeout + idle):
                    connection, head = await stack.enter_async_context(
                        self._exchange(url, body, headers)
                    )
            except TimeoutError:
                raise TransportError(f"no answer within {timeout + idle:g} s") from None
            yield Body(connection, head, idle)

    @contextlib.asynccontextmanager
    async def _exchange(
        self, url: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[tuple[_Connection, Head]]:
        """Send one request on a kept-alive or new connection; yield it with the answer's head.

        The connection goes back to the pool only if its response was read
        to the end and may be followed by another; otherwise it is closed.
        """
        if self._closed:
            raise RuntimeError("the etcd client's connections are closed")
        parts = urlsplit(url)
        host = parts.hostname or ""
        origin = (host, parts.port or (443 if parts.scheme == "https" else 80))
        data = request("POST", parts.netloc, parts.path or "/", headers, body)
        connection, head = await self._send(origin, data)
        try:
            yield connection, head
        except BaseException:
            await connection.close()
            raise
        await self._release(origin, connection)

    async def _send(self, origin: tuple[str, int], data: bytes) -> tuple[_Connection, Head]:
        """The request sent and its answer's head read, on a kept-alive connection if any."""
        connection = await self._reuse(origin)
        if connection is not None:
            try:
                return connection, await _ask(connection, data)
            except _BROKEN:
                pass  # closed by the server as we sent (idle ones may be): once more, anew
        try:
            connection = await self._connect(*origin)
        except _BROKEN as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:
            return connection, await _ask(connection, data)
        except _BROKEN as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def _connect(self, host: str, port: int) -> _Connection:
        if self._ssl is None:
            stream: anyio.abc.ByteStream = await anyio.connect_tcp(host, port)
        else:
            stream = await anyio.connect_tcp(
                host, port, ssl_context=self._ssl, tls_hostname=host, tls_standard_compatible=False
            )
        return _Connection(stream)

    async def _reuse(self, origin: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(origin, [])
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < KEEPALIVE_EXPIRY and not connection.dead():
                return connection
            await connection.close()
        return None

    async def _release(self, origin: tuple[str, int], connection: _Connection) -> None:
        idle = self._idle.setdefault(origin, [])
        if connection.response.reusable and not self._closed and len(idle) < MAX_IDLE:
            connection.idle_since = time.monotonic()
            idle.append(connection)
        else:
            await connection.close()

    async def aclose(self) -> None:
        """Close every idle connection; those in use close when their request ends."""
        self._closed = True
        for idle in self._idle.values():
            while idle:
                await idle.pop().close()


async def _ask(connection: _Connection, data: bytes) -> Head:
    """Send ``data`` on ``connection`` and read the answer's head; close it on any failure."""
    try:
        await connection.send(data)
        event = await connection.event()
        if not isinstance(event, Head):
            raise ProtocolError("an answer without a head")
        return event
    except BaseException:
        await connection.close()
        raise
