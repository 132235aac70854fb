"""A conversation carried as sealed etcd keys, bridged to socketpairs (``_etcd/channel``).

The last test runs the protocol core's own handshake (HELLO, SAVE, PROGRESS,
SAVED with a handoff, ACK) through the shell's ``send_message`` and
``receive_event`` over the bridge: the same code that runs over a Unix socket.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from collections.abc import AsyncGenerator, Callable, Coroutine
from typing import Any

import anyio
import pytest

from highlander._core import sealing
from highlander._core.connection import Closed, Connection
from highlander._core.messages import AckSuccession, Hello, ProgressReport, Save, Saved
from highlander._core.state import Role
from highlander._etcd import api
from highlander._etcd.channel import (
    Channel,
    accept_channel,
    bridge,
    carry,
    incoming,
    moved_key,
    open_channel,
)
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from highlander._host.waiting import ANYIO
from highlander._shell.wire import receive_event, send_message
from tests.support.core import build_hello, build_save
from tests.support.etcd_cluster import Cluster
from tests.support.imports import loaded_after

pytestmark = pytest.mark.anyio
SECRET = b"the application's state, which no etcd operator may read"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # The client is anyio's: it must run on both (issue #15).
    return str(request.param)


def _root() -> bytes:
    return f"/highlander-tests/{uuid.uuid4().hex}/".encode()


def _channel_key(token: bytes = b"test-token-0123456789") -> bytes:
    return sealing.channel_key(token, hashlib.sha256(b"github.com/Org/Repo").digest())


async def _lease(client: Client) -> int:
    return api.granted(await client.call("/v3/lease/grant", api.grant(10)))[0]


async def _first(stream: AsyncGenerator[tuple[bytes, int], None]) -> tuple[bytes, int]:
    async with contextlib.aclosing(stream) as items:
        async for item in items:
            return item
    raise AssertionError("the stream ended")


async def _read_all(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    data = b""
    while True:
        await anyio.wait_readable(sock)
        try:
            chunk = sock.recv(65536)
        except BlockingIOError:
            continue
        if not chunk:
            return data
        data += chunk


async def _bridged_read(channel: Channel) -> bytes:
    """Everything the peer's stream delivers through a bridge, up to its end."""
    app, end = socket.socketpair()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(bridge, channel, end)
            try:
                return await _read_all(app)
            finally:
                app.close()


async def _pair(
    client: Client, root: bytes, newcomer_key: bytes, holder_key: bytes
) -> tuple[Channel, Channel]:
    """A newcomer's channel and the holder's side of it, found by the holder's watch."""
    start = api.header(await client.call("/v3/kv/range", api.get(root))).revision
    newcomer = await open_channel(client, root, await _lease(client), newcomer_key)
    conversation, opening = await _first(incoming(client, root, start))
    revision = opening.mod_revision
    assert conversation == newcomer.conversation
    holder = accept_channel(client, root, conversation, revision, await _lease(client), holder_key)
    await holder.announce()
    return newcomer, holder


async def _across(
    client: Client,
    root: bytes,
    run: Callable[[Channel, socket.socket], Coroutine[Any, Any, None]],
    there: bytes,
    back: bytes,
) -> Channel:
    """A pair of channels, each run by ``run``: ``there`` goes across, ``back`` comes back."""
    newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
    n_app, n_end = socket.socketpair()
    i_app, i_end = socket.socketpair()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run, newcomer, n_end)
            tasks.start_soon(run, holder, i_end)
            n_app.sendall(there)
            n_app.shutdown(socket.SHUT_WR)
            assert await _read_all(i_app) == there
            i_app.sendall(back)
            i_app.close()
            assert await _read_all(n_app) == back
            n_app.close()
    return newcomer


async def test_bytes_cross_both_ways_and_each_close_is_an_eof(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer = await _across(client, root, bridge, b"hello " * 20_000, SECRET)  # 120 kB
        await newcomer.forget()
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(root, prefix=True)))
        assert kvs == ()


async def test_carried_conversations_leave_no_keys_behind(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        await _across(client, root, carry, b"SAVE", b"SAVED")
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(root, prefix=True)))
        assert kvs == ()  # nobody called forget(): each side's carry did


async def test_what_etcd_stores_is_sealed(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
        await holder.send(SECRET)
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(root, prefix=True)))
        values = b"".join(kv.value for kv in kvs)
        assert SECRET not in values
        assert b"no etcd operator" not in values
        with anyio.fail_after(10):
            async with contextlib.aclosing(newcomer.chunks()) as chunks:
                async for chunk in chunks:
                    assert chunk == SECRET
                    break


async def test_a_peer_with_another_token_reads_nothing(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(
            client, root, _channel_key(), _channel_key(b"another-token-0123")
        )
        await holder.send(SECRET)
        # What does not open is not delivered: the local end sees EOF.
        assert await _bridged_read(newcomer) == b""


async def test_a_peer_whose_lease_ends_is_an_eof(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
        await holder.send(b"part of a frame")
        await client.call("/v3/lease/revoke", api.revoke(holder.lease))  # it died
        assert await _bridged_read(newcomer) == b"part of a frame"


async def test_the_incumbents_moved_key_is_noted_and_ends_its_stream(etcd: Cluster) -> None:
    # The commit applied: the newcomer holds from here, without waiting for the
    # incumbent's fin or its lease's end (nothing of neither is written here).
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
        await holder.send(b"SAVED stand-in")
        moved = moved_key(newcomer.here_key())
        assert moved == holder._name(sealing.INCUMBENT, b"moved")
        value, lease = api.b64(b"the new reign"), str(holder.lease)
        put = {"key": api.b64(moved), "value": value, "lease": lease}
        revision = api.header(await client.call("/v3/kv/put", put)).revision
        await holder.send(b"never read: the stream ended at the move")
        assert await _bridged_read(newcomer) == b"SAVED stand-in"
        assert newcomer.moved is not None
        assert (newcomer.moved.value, newcomer.moved.mod_revision) == (b"the new reign", revision)


def test_the_first_requests_code_loads_neither_the_frames_nor_the_cipher() -> None:
    # A newcomer's conversation watch goes out beside its lease grant, before the
    # rest of its code loads (etcd_first.start): what it imports first must stay light.
    heavy = (
        "highlander._core.messages",
        "highlander._core.signing",
        "cryptography",
        "highlander._etcd.opening",
        "highlander._shell.etcd_backend",
    )
    assert loaded_after("import highlander._shell.etcd_first", heavy) == []


def test_a_moved_key_belongs_to_an_opening() -> None:
    with pytest.raises(ValueError, match="not a conversation's opening key"):
        moved_key(b"/r/conv/00/i/here")


async def test_chunks_out_of_order_break_the_stream(etcd: Cluster) -> None:
    root = _root()
    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
        holder._sent = 1  # a forger skips chunk 0
        await holder.send(b"x")
        assert await _bridged_read(newcomer) == b""


async def test_the_protocols_handshake_runs_over_etcd_unchanged(etcd: Cluster) -> None:
    key = os.urandom(32)
    root = _root()
    handoff = {"index": "/srv/index.db", "entries": 12_345}
    received: dict[str, object] = {}

    async def incumbent_side(sock: socket.socket) -> None:
        conn = Connection(Role.INCUMBENT, key=key, nonce=os.urandom(16), now=ANYIO.now())
        await send_message(sock, conn, build_hello(conn.local_nonce), ANYIO)
        save = await receive_event(sock, conn, ANYIO)
        assert isinstance(save, Save)
        for step in range(3):
            await send_message(sock, conn, ProgressReport(step, step + 1, 3, "saving"), ANYIO)
        await send_message(sock, conn, Saved(handoff=handoff, generation=7), ANYIO)
        received["ack"] = await receive_event(sock, conn, ANYIO)
        sock.close()

    async def newcomer_side(sock: socket.socket) -> None:
        conn = Connection(Role.NEWCOMER, key=key, nonce=os.urandom(16), now=ANYIO.now())
        hello = await receive_event(sock, conn, ANYIO)
        assert isinstance(hello, Hello)
        await send_message(sock, conn, build_save(conn.local_nonce, conn.peer_nonce), ANYIO)
        while True:
            event = await receive_event(sock, conn, ANYIO)
            if not isinstance(event, ProgressReport):
                break
        assert isinstance(event, Saved)
        received["handoff"] = event.handoff
        await send_message(sock, conn, AckSuccession(), ANYIO)
        received["end"] = await receive_event(sock, conn, ANYIO)
        sock.close()

    async with Client(parse(etcd.backend, {})) as client:
        newcomer, holder = await _pair(client, root, _channel_key(), _channel_key())
        n_app, n_end = socket.socketpair()
        i_app, i_end = socket.socketpair()
        n_app.setblocking(False)
        i_app.setblocking(False)
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(bridge, newcomer, n_end)
                tasks.start_soon(bridge, holder, i_end)
                tasks.start_soon(incumbent_side, i_app)
                await newcomer_side(n_app)
    assert received["handoff"] == handoff
    assert isinstance(received["ack"], AckSuccession)
    assert isinstance(received["end"], Closed)
