"""The etcd client's connections (highlander/_etcd/http.py) against real sockets.

A small server on 127.0.0.1 answers as each test scripts it (keep-alive,
a close at the worst moment, silence, a stream), and the test checks what
reached the kernel: how many connections were opened, which were closed,
and that no descriptor is left open.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest

from highlander._etcd.http import Pool, TransportError, split_url

pytestmark = pytest.mark.anyio

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@dataclass
class Server:
    """What the scripted server saw."""

    port: int
    accepted: int = 0
    requests: list[bytes] = field(default_factory=list)
    ended: anyio.Event = field(default_factory=anyio.Event)  # a connection's end seen
    ends: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v3/kv/range"


Script = Callable[[Server, int, int], Awaitable[bytes | None]]


async def _request(stream: anyio.abc.ByteStream) -> bytes | None:
    """One request (head + Content-Length body), or None at the connection's end."""
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            data += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += await stream.receive()
    return head


@contextlib.asynccontextmanager
async def serve(script: Script, *, hang_up: bool = False) -> AsyncIterator[Server]:
    """Serve each request with ``script(server, connection number, request number)``.

    The script returns the bytes to send, or None to close the connection
    without an answer; it may sleep (a silent member).  ``hang_up``: close
    each connection after its first answer.
    """
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = Server(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def handle(stream: anyio.abc.SocketStream) -> None:
        server.accepted += 1
        number = server.accepted
        async with stream:
            for index in range(100):
                head = await _request(stream)
                if head is None:
                    break
                server.requests.append(head)
                answer = await script(server, number, index)
                if answer is None:
                    break
                await stream.send(answer)
                if hang_up:
                    break
        server.ends += 1
        server.ended.set()

    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, handle)
        try:
            yield server
        finally:
            group.cancel_scope.cancel()
    await listener.aclose()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def _answer_ok(server: Server, connection: int, index: int) -> bytes:
    return OK


async def _silent(server: Server, connection: int, index: int) -> bytes:
    await anyio.sleep(30)  # a frozen member: the connection is accepted, nothing answered
    return OK


async def test_a_kept_alive_connection_carries_the_next_request() -> None:
    async with serve(_answer_ok) as server:
        pool = Pool()
        for _ in range(3):
            assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        await pool.aclose()
    assert server.accepted == 1
    assert len(server.requests) == 3


async def test_a_request_the_server_hangs_up_on_is_sent_once_more_on_a_new_connection() -> None:
    async def once_per_connection(server: Server, connection: int, index: int) -> bytes | None:
        return OK if index == 0 else None  # then it closes without an answer

    async with serve(once_per_connection) as server:
        pool = Pool()
        assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        await pool.aclose()
    # Request 2 went on connection 1 (hung up on there) and again on connection 2.
    assert server.accepted == 2
    assert len(server.requests) == 3


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async with serve(_answer_ok, hang_up=True) as server:
        pool = Pool()
        assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        with anyio.fail_after(5):
            await server.ended.wait()
        assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        await pool.aclose()
    # Seen closed before reuse: the second request was sent once, on a new connection.
    assert server.accepted == 2
    assert len(server.requests) == 2


async def test_a_response_that_says_close_is_not_reused() -> None:
    async def close(server: Server, connection: int, index: int) -> bytes:
        return OK.replace(b"200 OK\r\n", b"200 OK\r\nConnection: close\r\n")

    async with serve(close) as server:
        pool = Pool()
        for _ in range(2):
            assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        await pool.aclose()
    assert server.accepted == 2


async def test_a_silent_member_costs_one_timeout_and_its_connection() -> None:
    before = _fds()
    async with serve(_silent) as server:
        pool = Pool()
        with pytest.raises(TransportError, match=r"within 0\.2 s"):
            await pool.post(server.url, b"{}", {}, timeout=0.2)
        await pool.aclose()
        assert server.accepted == 1
    assert _fds() == before


async def test_a_cancelled_request_closes_its_connection() -> None:
    before = _fds()
    async with serve(_silent) as server:
        pool = Pool()
        with anyio.move_on_after(0.2):
            await pool.post(server.url, b"{}", {}, timeout=10)
        with anyio.fail_after(5):
            while not server.requests:
                await anyio.sleep(0.01)
        await pool.aclose()
    assert _fds() == before


async def test_a_stream_delivers_pieces_as_they_come_and_times_out_when_silent() -> None:
    async def stream(server: Server, connection: int, index: int) -> bytes:
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"

    before = _fds()
    async with serve(stream) as server:
        pool = Pool()
        pieces = []
        with pytest.raises(TransportError, match=r"for 0\.3 s"):
            async with pool.stream(server.url, b"{}", {}, timeout=1, idle=0.3) as body:
                assert body.status == 200
                async for piece in body:
                    pieces.append(piece)
        assert pieces == [b"abc"]
        with anyio.fail_after(5):
            await server.ended.wait()  # a half-read stream is closed, never pooled
        await pool.aclose()
    assert _fds() == before


async def test_a_stream_left_early_closes_its_connection() -> None:
    async def stream_first(server: Server, connection: int, index: int) -> bytes:
        if connection == 1:
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"
        return OK

    async with serve(stream_first) as server:
        pool = Pool()
        async with pool.stream(server.url, b"{}", {}, timeout=1, idle=5) as body:
            async for _ in body:
                break
        with anyio.fail_after(5):
            await server.ended.wait()
        assert await pool.post(server.url, b"{}", {}, timeout=2) == (200, b"{}")
        await pool.aclose()
    assert server.accepted == 2


async def test_garbage_from_a_member_is_a_transport_error() -> None:
    async def garbage(server: Server, connection: int, index: int) -> bytes:
        return b"SSH-2.0-OpenSSH_9.2\r\n\r\n"

    async with serve(garbage) as server:
        pool = Pool()
        with pytest.raises(TransportError, match="ProtocolError"):
            await pool.post(server.url, b"{}", {}, timeout=2)
        await pool.aclose()


async def test_nothing_listening_is_a_transport_error() -> None:
    async with serve(_answer_ok) as server:
        url = server.url
    pool = Pool()
    with pytest.raises(TransportError):
        await pool.post(url, b"{}", {}, timeout=2)
    await pool.aclose()


async def test_a_tls_handshake_cut_short_leaves_no_descriptor() -> None:
    """A member that accepts TCP and never answers the TLS hello: the budget ends it."""
    context = ssl.create_default_context()

    before = _fds()
    async with serve(_answer_ok) as server:
        pool = Pool(context)
        url = server.url.replace("http://", "https://")
        for _ in range(3):
            with anyio.move_on_after(0.2):
                await pool.post(url, b"{}", {}, timeout=10)
        await pool.aclose()
        assert server.accepted == 3
    assert _fds() == before


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:2379/v3/kv/txn",
        "https://Etcd-1.Example.COM:2379/v3/watch",
        "http://[::1]:2379/v3/lease/grant",
        "http://[FE80::1]:32379",
        "https://h1/v3/kv/range",
    ],
)
def test_the_urls_are_split_as_urlsplit_splits_them(url: str) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    expected = (parts.scheme, parts.netloc, parts.hostname, parts.port or 0, parts.path or "/")
    assert split_url(url) == expected
