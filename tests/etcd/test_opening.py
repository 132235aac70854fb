"""A newcomer's first claim also queues it and opens its conversation (``_etcd/opening.py``).

Against the suite's real cluster, requests counted on the real client: a
held project with nobody queued is joined and spoken to in the claim's one
request (our queue place and our ``here`` at the claim's revision, on our
lease); one with an older newcomer queued is joined without a ``here``; a
free project takes the success branch and writes neither; and the holder's
one watch on every conversation sees the ``here`` at once.
"""

from __future__ import annotations

import os
import uuid

import pytest

from highlander._core.codec import FrameDecoder, NeedData, decode_payload, split_body
from highlander._core.messages import Hello
from highlander._etcd import api
from highlander._etcd.channel import incoming, newcomer_side
from highlander._etcd.claim import Held, claim_reign, mark_released
from highlander._etcd.opening import Opening
from highlander._etcd.queue import join, queue_prefix
from highlander._host.settings import Settings
from highlander._shell.backend import backend_for
from highlander._shell.etcd_backend import EtcdBackend
from tests.etcd.test_claim_count import Counting, _lease, _value
from tests.etcd.test_handle import SETTLE, Hosts, _in_this_process, hosts
from tests.support.etcd_cluster import Cluster

__all__ = ["hosts"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _root() -> bytes:
    return f"/highlander-tests/{uuid.uuid4().hex}/".encode()


def _opening(client: Counting, root: bytes, lease: int) -> Opening:
    channel = newcomer_side(client, root, lease, None)
    place = queue_prefix(root) + f"me/{os.urandom(4).hex()}".encode()
    return Opening(root, root + b"holder", (place, b"me"), (channel.here_key(), b"here"), lease)


async def _held(client: Counting, root: bytes) -> int:
    """Claim the project at ``root`` on a lease of its own (the holder's); the lease."""
    lease = await _lease(client)
    assert isinstance(await claim_reign(client, root + b"holder", lease, _value), Held)
    return lease


async def _keys(client: Counting, prefix: bytes) -> tuple[api.KeyValue, ...]:
    return api.got(await client.call("/v3/kv/range", api.get(prefix, prefix=True)))[1]


async def _first_claim(
    client: Counting, root: bytes, lease: int
) -> tuple[Held | api.KeyValue, Opening, int]:
    """A first claim with its opening, and how many requests it made."""
    opening = _opening(client, root, lease)
    before = len(client.paths)
    result = await claim_reign(client, root + b"holder", lease, _value, opening)
    return result, opening, len(client.paths) - before


@pytest.mark.anyio
async def test_a_held_project_with_nobody_queued_is_joined_and_spoken_to_at_once(
    etcd: Cluster,
) -> None:
    root = _root()
    async with Counting(etcd) as client:
        holder, newcomer = await _held(client, root), await _lease(client)
        result, opening, asked = await _first_claim(client, root, newcomer)
        assert isinstance(result, api.KeyValue) and result.lease == holder
        assert (asked, opening.queued, opening.spoke) == (1, True, True)
        assert opening.found == ([], opening.revision)  # nobody ahead of us
        for key, value in (opening.place, opening.here):
            (kv,) = await _keys(client, key)
            assert (kv.value, kv.lease, kv.create_revision) == (value, newcomer, opening.revision)


@pytest.mark.anyio
async def test_a_held_project_with_a_newcomer_queued_is_joined_without_a_word(
    etcd: Cluster,
) -> None:
    root = _root()
    async with Counting(etcd) as client:
        await _held(client, root)
        older, newcomer = await _lease(client), await _lease(client)
        ahead = queue_prefix(root) + b"older/1"
        await join(client, root, ahead, b"older", older)
        result, opening, asked = await _first_claim(client, root, newcomer)
        assert isinstance(result, api.KeyValue)
        assert (asked, opening.queued, opening.spoke) == (1, True, False)
        assert opening.found is not None and opening.found[0] == [ahead]
        assert await _keys(client, opening.here[0]) == ()  # it waits its turn in silence
        assert len(await _keys(client, opening.place[0])) == 1


@pytest.mark.anyio
async def test_a_free_project_is_claimed_and_nothing_else_written(etcd: Cluster) -> None:
    root = _root()
    async with Counting(etcd) as client:
        lease = await _lease(client)
        result, opening, asked = await _first_claim(client, root, lease)
        assert isinstance(result, Held) and result.value == _value(1)
        assert (asked, opening.queued, opening.spoke) == (1, False, False)
        assert await _keys(client, queue_prefix(root)) == ()
        assert await _keys(client, root + b"conv/") == ()


@pytest.mark.anyio
async def test_a_counted_free_project_takes_a_second_request_and_writes_nothing_else(
    etcd: Cluster,
) -> None:
    """The counter's guess fails with nobody holding: the branch must not queue or speak."""
    root = _root()
    async with Counting(etcd) as client:
        first = await _lease(client)
        won = await claim_reign(client, root + b"holder", first, _value)
        assert isinstance(won, Held)
        await mark_released(client, root + b"holder", won, 1)
        await client.call("/v3/lease/revoke", api.revoke(first))
        result, opening, asked = await _first_claim(client, root, await _lease(client))
        assert isinstance(result, Held) and result.value == _value(2)
        assert (asked, opening.queued, opening.spoke) == (2, False, False)
        assert await _keys(client, queue_prefix(root)) == ()
        assert await _keys(client, root + b"conv/") == ()


@pytest.mark.anyio
async def test_the_holders_watch_sees_the_here_of_the_claim(etcd: Cluster) -> None:
    root = _root()
    async with Counting(etcd) as client:
        await _held(client, root)
        newcomer = await _lease(client)
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(root + b"holder")))
        opened = incoming(client, root, kvs[0].mod_revision)
        try:
            _, opening, _ = await _first_claim(client, root, newcomer)
            _, kv = await anext(opened)
        finally:
            await opened.aclose()
        assert (kv.key, kv.lease, kv.mod_revision) == (opening.here[0], newcomer, opening.revision)


@pytest.mark.parametrize("made", ["for a claim", "plain"])
def test_a_newcomers_first_claim_hands_its_first_attempt_an_open_conversation(
    hosts: Hosts, monkeypatch: pytest.MonkeyPatch, made: str
) -> None:
    """The backend in this process as a newcomer on its own host; the holder a real child.

    Its first claim (sent as the backend is made for a claim, ``backend_for``;
    or at the claim, for a backend made plain) leaves a conversation open (the
    early dial of the seam), whose first frame is the holder's HELLO, and its
    place in the queue taken.
    """
    _in_this_process(hosts, monkeypatch)
    holder = hosts.start("h1")
    holder.wait_for("ready")
    monkeypatch.setenv("HIGHLANDER_HOST_ID", "h2")
    settings = Settings.resolve(
        app="child", project=None, mode=None, token=None, timeouts=None, runtime_dir=None
    )
    newcomer = backend_for(settings) if made == "for a claim" else EtcdBackend(settings)
    assert isinstance(newcomer, EtcdBackend)
    try:
        assert newcomer.claim(settings) is None  # held by the child
        early = newcomer.opened_early()
        assert early is not None
        sock, _ = early
        assert newcomer.opened_early() is None  # handed out once
        assert newcomer.ours.turn.revision is not None  # joined with the claim
        sock.settimeout(SETTLE)  # a hang guard: the holder answers at once
        frames = FrameDecoder()
        while isinstance(body := frames.next_frame(), NeedData):
            data = sock.recv(4096)
            assert data, "the holder ended the conversation before its HELLO"
            frames.feed(data)
        _, hello = decode_payload(split_body(body)[0])
        assert isinstance(hello, Hello) and hello.pid == holder.pid
        sock.close()
    finally:
        newcomer.leave_turn(holding=False)
        newcomer.session.close()
    assert holder.proc.poll() is None  # a conversation that ends unfinished costs it nothing
