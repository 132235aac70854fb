"""The holder's side over etcd: every conversation let in through one watch (``_etcd/holding``).

Real etcd, real sockets: a stand-in incumbent accepts on the holder's
private listener (it writes its greeting at once, as the incumbent writes
HELLO, then answers what it reads in upper case), and newcomers open
conversations with :func:`~highlander._etcd.channel.open_channel` and a
bridge, as a newcomer does.
"""

from __future__ import annotations

import hashlib
import socket
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pytest

from highlander._core import sealing
from highlander._etcd import api
from highlander._etcd.channel import bridge, open_channel
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from highlander._etcd.holding import FEED_BOUND, Incoming, let_in, private_listener
from tests.support.etcd_cluster import Cluster

pytestmark = pytest.mark.anyio
GREETING = b"hello from the incumbent\n"
CHANNEL_KEY = sealing.channel_key(b"test-token-0123456789", hashlib.sha256(b"holding").digest())


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Counting(Client):
    """The holder's client, counting the watches it opens (each is a request to etcd)."""

    watches = 0

    def watch(self, *args: Any, **kwargs: Any) -> AsyncGenerator[api.Event, None]:
        self.watches += 1
        return super().watch(*args, **kwargs)


class _Session:
    """What :func:`let_in` uses of a session: its client."""

    def __init__(self, client: Client) -> None:
        self.client = client


async def _recv(sock: socket.socket) -> bytes:
    while True:
        await anyio.wait_readable(sock)
        try:
            return sock.recv(65536)
        except BlockingIOError:
            continue


async def _answer(conn: socket.socket) -> None:
    """The stand-in incumbent's side of one connection: greet, then echo in upper case."""
    with conn:
        conn.setblocking(False)
        conn.sendall(GREETING)
        while data := await _recv(conn):
            conn.sendall(data.upper())


async def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await _recv(sock)
        assert chunk, f"EOF after {data!r}"
        data += chunk
    return data


async def _incumbent(
    listening: socket.socket, tasks: anyio.abc.TaskGroup, held: list[socket.socket]
) -> None:
    """Accept every connection and answer it, but park the next one while ``held`` asks.

    ``held == [listening]`` parks the next connection unread in ``held[0]``.
    """
    while True:
        await anyio.wait_readable(listening)
        try:
            conn, _ = listening.accept()
        except BlockingIOError:
            continue
        if held and held[0] is listening:  # the test asked to park the next connection
            held[0] = conn
            continue
        tasks.start_soon(_answer, conn)


async def _converse(client: Client, root: bytes, lease: int, said: bytes) -> bytes:
    """One newcomer's conversation: read the greeting, say ``said``, read the answer."""
    channel = await open_channel(client, root, lease, CHANNEL_KEY)
    app, end = socket.socketpair()
    app.setblocking(False)
    with app:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(bridge, channel, end)
            assert await _read(app, len(GREETING)) == GREETING
            app.sendall(said)
            answer = await _read(app, len(said))
            app.shutdown(socket.SHUT_WR)
            assert await _recv(app) == b""  # the incumbent's end closed: our EOF
    await channel.forget()
    return answer


async def test_every_conversation_is_read_from_the_holders_one_watch(etcd: Cluster) -> None:
    # A watch per conversation is a round trip before HELLO; worse, one that
    # starts at a revision etcd has passed (any write in the cluster between
    # the newcomer's here and the watch) waits up to 100 ms for etcd's resync.
    root = f"/highlander-tests/{uuid.uuid4().hex}/".encode()
    listener = private_listener()
    peers: dict[bytes, Incoming] = {}
    async with (
        Client(parse(etcd.backend, {})) as newcomers,
        _Counting(parse(etcd.backend, {})) as holder,
    ):
        lease = api.granted(await holder.call("/v3/lease/grant", api.grant(10)))[0]
        since = api.header(await holder.call("/v3/kv/range", api.get(root))).revision
        with anyio.fail_after(30), listener.sock:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_incumbent, listener.sock, tasks, [])
                tasks.start_soon(
                    let_in, _Session(holder), root, since, CHANNEL_KEY,
                    listener.sock.getsockname(), peers, lambda: lease,
                )  # fmt: skip
                for n in range(3):
                    said = b"save %d" % n
                    assert await _converse(newcomers, root, lease, said) == said.upper()
                tasks.cancel_scope.cancel()
    assert holder.watches == 1
    assert peers == {}  # each conversation's entry went with it


async def test_a_newcomer_that_floods_an_unread_conversation_is_cut_off_alone(
    etcd: Cluster,
) -> None:
    # The incumbent parks one connection unread; its newcomer writes far more
    # chunks than the socket buffer and the feed's bound hold.  That
    # conversation ends (its incumbent end reads a prefix of the bytes, then
    # EOF); a conversation opened meanwhile is answered as usual.
    root = f"/highlander-tests/{uuid.uuid4().hex}/".encode()
    listener = private_listener()
    chunk = b"x" * 16384
    chunks = FEED_BOUND + 40  # 64 + 40 chunks of 16 KiB: more than an AF_UNIX buffer holds
    async with (
        Client(parse(etcd.backend, {})) as newcomers,
        Client(parse(etcd.backend, {})) as holder,
    ):
        lease = api.granted(await holder.call("/v3/lease/grant", api.grant(10)))[0]
        since = api.header(await holder.call("/v3/kv/range", api.get(root))).revision
        parked: list[socket.socket] = [listener.sock]
        with anyio.fail_after(60), listener.sock:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_incumbent, listener.sock, tasks, parked)
                tasks.start_soon(
                    let_in, _Session(holder), root, since, CHANNEL_KEY,
                    listener.sock.getsockname(), {}, lambda: lease,
                )  # fmt: skip
                flood = await open_channel(newcomers, root, lease, CHANNEL_KEY)
                for _ in range(chunks):
                    await flood.send(chunk)
                assert await _converse(newcomers, root, lease, b"meanwhile") == b"MEANWHILE"
                conn = parked[0]
                assert conn is not listener.sock, "the flooding conversation never connected"
                with conn:
                    conn.setblocking(False)
                    got = b""
                    while data := await _recv(conn):
                        got += data
                await flood.forget()
                await flood.close()  # the watch open_channel opened, never read here
                tasks.cancel_scope.cancel()
    assert 0 < len(got) < chunks * len(chunk)
    assert got == chunk * (len(got) // len(chunk))  # a whole-chunk prefix, in order
