"""The etcd client and the claim against a real 3-member cluster (tests/support/etcd_cluster.py)."""

from __future__ import annotations

import contextlib
import uuid

import anyio
import pytest

from highlander._core.errors import EtcdError, EtcdUnavailableError
from highlander._etcd import api
from highlander._etcd.claim import Held, claim, commit, holder, still_held
from highlander._etcd.client import CREATED, Client
from highlander._etcd.endpoints import Target, parse
from tests.support.etcd_cluster import Cluster, free_port

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # The client is anyio's: it must run on both (issue #15).
    return str(request.param)


def _key() -> bytes:
    return f"/highlander-tests/{uuid.uuid4().hex}/holder".encode()


def _target(cluster: Cluster) -> Target:
    return parse(cluster.backend, {})


async def _lease(client: Client, ttl: int = 5) -> int:
    lease, granted = api.granted(await client.call("/v3/lease/grant", api.grant(ttl)))
    assert granted == ttl
    return lease


async def test_a_lease_is_granted_kept_alive_and_revoked(etcd: Cluster) -> None:
    async with Client(_target(etcd)) as client:
        lease = await _lease(client)
        assert api.kept_alive(await client.call("/v3/lease/keepalive", api.keepalive(lease))) == 5
        await client.call("/v3/lease/revoke", api.revoke(lease))
        # A revoked lease is gone: its keepalive renews nothing (TTL 0).
        assert api.kept_alive(await client.call("/v3/lease/keepalive", api.keepalive(lease))) == 0


async def test_one_claim_wins_and_the_other_reads_the_holder(etcd: Cluster) -> None:
    key = _key()
    async with Client(_target(etcd)) as client:
        first, second = await _lease(client), await _lease(client)
        won = await claim(client, key, b"first", first)
        lost = await claim(client, key, b"second", second)
        assert isinstance(won, Held)
        assert won.lease == first
        assert isinstance(lost, api.KeyValue)
        assert (lost.lease, lost.value, lost.mod_revision) == (first, b"first", won.token)
        assert lost.create_revision == won.token  # a claimed reign: create == mod
        assert await still_held(client, key, won)


async def test_a_retried_claim_on_our_own_lease_counts_as_won(etcd: Cluster) -> None:
    # What the client's retry after a timed-out txn meets: the first attempt was applied.
    key = _key()
    async with Client(_target(etcd)) as client:
        lease = await _lease(client)
        first = await claim(client, key, b"v", lease)
        again = await claim(client, key, b"v", lease)
        assert isinstance(first, Held)
        assert again == first


async def test_the_fencing_token_grows_from_reign_to_reign(etcd: Cluster) -> None:
    key = _key()
    tokens = []
    async with Client(_target(etcd)) as client:
        for _ in range(3):
            lease = await _lease(client)
            held = await claim(client, key, b"v", lease)
            assert isinstance(held, Held)
            tokens.append(held.token)
            # The fence: revoking the holder's lease deletes its key, and the reign is over.
            await client.call("/v3/lease/revoke", api.revoke(lease))
            assert await holder(client, key) is None
            assert not await still_held(client, key, held)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == 3


async def test_a_write_guarded_by_an_old_token_fails(etcd: Cluster) -> None:
    # docs/etcd.md "Fencing your own writes": compare mod_revision(holder) == token.
    key = _key()
    data = key + b"/data"
    async with Client(_target(etcd)) as client:
        old_lease = await _lease(client)
        old = await claim(client, key, b"old", old_lease)
        assert isinstance(old, Held)
        await client.call("/v3/lease/revoke", api.revoke(old_lease))
        new = await claim(client, key, b"new", await _lease(client))
        assert isinstance(new, Held)

        def guarded(token: int, value: bytes) -> api.Json:
            compare = {
                "key": api.b64(key),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": str(token),
            }
            put = {"request_put": {"key": api.b64(data), "value": api.b64(value)}}
            return {"compare": [compare], "success": [put]}

        stale = api.txn(await client.call("/v3/kv/txn", guarded(old.token, b"stale")))
        fresh = api.txn(await client.call("/v3/kv/txn", guarded(new.token, b"fresh")))
        assert (stale.succeeded, fresh.succeeded) == (False, True)
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(data)))
        assert [kv.value for kv in kvs] == [b"fresh"]


async def test_the_commit_moves_the_holder_key_to_the_successor_once(etcd: Cluster) -> None:
    key = _key()
    async with Client(_target(etcd)) as client:
        old_lease, new_lease, third_lease = [await _lease(client) for _ in range(3)]
        incumbent = await claim(client, key, b"incumbent", old_lease)
        assert isinstance(incumbent, Held)
        successor = await commit(client, key, b"successor", incumbent, new_lease)
        assert isinstance(successor, Held)
        assert successor.token > incumbent.token  # a new reign, a greater token
        assert not await still_held(client, key, incumbent)
        assert await still_held(client, key, successor)
        # A retried commit (its first answer lost) finds the key on our lease: won.
        assert await commit(client, key, b"successor", incumbent, new_lease) == successor
        # Nobody else can commit from the old reign any more.
        late = await commit(client, key, b"third", incumbent, third_lease)
        assert isinstance(late, api.KeyValue)
        assert (late.lease, late.value) == (new_lease, b"successor")
        # The old lease's end no longer takes the key with it: it moved.
        await client.call("/v3/lease/revoke", api.revoke(old_lease))
        assert await still_held(client, key, successor)
        await client.call("/v3/lease/revoke", api.revoke(new_lease))
        assert await commit(client, key, b"x", successor, third_lease) is None


async def test_a_write_guarded_by_the_predecessors_token_fails_after_the_commit(
    etcd: Cluster,
) -> None:
    key = _key()
    data = key + b"/data"
    async with Client(_target(etcd)) as client:
        incumbent = await claim(client, key, b"i", await _lease(client))
        assert isinstance(incumbent, Held)
        successor = await commit(client, key, b"n", incumbent, await _lease(client))
        assert isinstance(successor, Held)
        guard = {"key": api.b64(key), "target": "MOD", "result": "EQUAL"}
        put = [{"request_put": {"key": api.b64(data), "value": ""}}]
        stale = {"compare": [{**guard, "mod_revision": str(incumbent.token)}], "success": put}
        fresh = {"compare": [{**guard, "mod_revision": str(successor.token)}], "success": put}
        assert not api.txn(await client.call("/v3/kv/txn", stale)).succeeded
        assert api.txn(await client.call("/v3/kv/txn", fresh)).succeeded


async def test_a_watch_delivers_every_change_in_order_from_a_revision(etcd: Cluster) -> None:
    prefix = _key()
    async with Client(_target(etcd)) as client:
        _, kvs = api.got(await client.call("/v3/kv/range", api.get(prefix)))
        start = api.header(await client.call("/v3/kv/range", api.get(prefix))).revision + 1
        for i in range(3):
            await client.call("/v3/kv/put", {"key": api.b64(prefix + b"/%d" % i), "value": ""})
        seen = []
        with anyio.fail_after(10):
            async with contextlib.aclosing(client.watch(prefix, start, prefix=True)) as events:
                async for event in events:
                    seen.append(event.kv.key)
                    if len(seen) == 3:
                        break
        assert kvs == ()
        assert seen == [prefix + b"/%d" % i for i in range(3)]


async def test_a_watch_from_now_says_when_etcd_has_it_and_then_sees_what_follows(
    etcd: Cluster,
) -> None:
    """A conversation listens before it speaks (channel.listen): the watch starts "from
    now" and reports its creation, so an answer written after it is never missed."""
    prefix = _key()
    async with Client(_target(etcd)) as client:
        await client.call("/v3/kv/put", {"key": api.b64(prefix + b"/before"), "value": ""})
        watch = client.watch(prefix, 0, prefix=True, report_created=True)
        with anyio.fail_after(10):
            async with contextlib.aclosing(watch) as events:
                assert await anext(events) is CREATED
                await client.call("/v3/kv/put", {"key": api.b64(prefix + b"/after"), "value": ""})
                event = await anext(events)
        assert (event.kind, event.kv.key) == ("put", prefix + b"/after")


async def test_a_request_gets_past_a_frozen_member(faulty: Cluster) -> None:
    key = _key()
    async with Client(_target(faulty), timeout=0.3) as client:
        lease = await _lease(client)
        frozen = next(m for m in faulty.members if m.endpoint == client.endpoint)
        faulty.stop(frozen)  # connections open, nothing answered: only the timeout sees it
        held = await claim(client, key, b"v", lease)
        assert isinstance(held, Held)
        assert client.endpoint != frozen.endpoint
        assert api.kept_alive(await client.call("/v3/lease/keepalive", api.keepalive(lease))) > 0


async def test_a_watch_resumes_on_another_member_without_loss_or_repeat(faulty: Cluster) -> None:
    prefix = _key()
    async with Client(_target(faulty), timeout=0.5) as writer, Client(_target(faulty)) as reader:
        start = api.header(await writer.call("/v3/kv/range", api.get(prefix))).revision + 1
        watched = next(m for m in faulty.members if m.endpoint == reader.endpoint)
        # The writer asks another member first, so the kill below costs it nothing.
        writer._current = (faulty.members.index(watched) + 1) % len(faulty.members)

        async def write(i: int) -> None:
            await writer.call("/v3/kv/put", {"key": api.b64(prefix + b"/%d" % i), "value": ""})

        await write(0)
        seen: list[bytes] = []
        watch = reader.watch(prefix, start, prefix=True, idle=1.0)
        with anyio.fail_after(30):
            async with contextlib.aclosing(watch) as events:
                async for event in events:
                    seen.append(event.kv.key)
                    if len(seen) == 1:
                        faulty.kill(watched)  # the stream's member goes mid-watch
                        for i in range(1, 4):
                            await write(i)
                    if len(seen) == 4:
                        break
        assert seen == [prefix + b"/%d" % i for i in range(4)]
        assert reader.endpoint != watched.endpoint


async def test_no_member_answering_is_one_error_that_names_the_fix() -> None:
    target = parse(f"etcd://127.0.0.1:{free_port()},127.0.0.1:{free_port()}", {})
    async with Client(target, timeout=0.2) as client:
        with pytest.raises(EtcdUnavailableError) as caught:
            await client.call("/v3/kv/range", api.get(b"k"), budget=1.0)
    message = str(caught.value)
    assert "HIGHLANDER_BACKEND" in message
    assert "majority" in message
    assert isinstance(caught.value, EtcdError)
    assert caught.value.code == api.UNAVAILABLE


async def test_a_refusal_is_an_error_with_etcds_code(etcd: Cluster) -> None:
    async with Client(_target(etcd)) as client:
        with pytest.raises(EtcdError) as caught:
            # A lease that does not exist: etcd answers NOT_FOUND, nothing to retry.
            await client.call("/v3/kv/put", {"key": api.b64(_key()), "value": "", "lease": "12345"})
    assert caught.value.code == api.NOT_FOUND
    assert not isinstance(caught.value, EtcdUnavailableError)


async def test_the_error_names_each_members_failure_and_the_budgets_end_hides_none() -> None:
    # One member refuses connections; the other answers once with a 503 that
    # is not JSON, then accepts and never answers: the call's budget ends
    # inside that silent request, which must not hide the 503 it gave before.
    refused = f"127.0.0.1:{free_port()}"
    connections = 0

    async def serve(stream: anyio.abc.SocketStream) -> None:
        nonlocal connections
        connections += 1
        async with stream:
            await stream.receive()
            if connections == 1:
                await stream.send(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 3\r\n\r\nbad")
                return
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    silent = f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, serve)
        async with Client(parse(f"etcd://{silent},{refused}", {}), timeout=30.0) as client:
            with pytest.raises(EtcdUnavailableError) as caught:
                await client.call("/v3/kv/range", api.get(b"k"), budget=1.0)
        group.cancel_scope.cancel()
    await listener.aclose()
    message = str(caught.value)
    assert connections >= 2  # the budget ended inside the silent member's second request
    assert f"{silent}: HTTP 503, not JSON" in message
    assert f"{refused}: " in message
