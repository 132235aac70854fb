"""The etcd commit carried out (``_etcd/handover``) against the real cluster.

What the model check (tests/core/test_etcd_model_check.py) assumes of etcd
is checked here too: a move onto a lease that is gone is refused as a whole
and applies nothing, but only when its compares held.
"""

from __future__ import annotations

import uuid

import anyio
import pytest

from highlander._core.etcd_commit import Key, Then
from highlander._core.lease import MIN_TTL
from highlander._etcd import api
from highlander._etcd.claim import Held, claim, holder
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from highlander._etcd.handover import fence, incumbent_moves, where
from highlander._etcd.keeper import boottime
from tests.support.etcd_cluster import Cluster

pytestmark = pytest.mark.anyio
TTL = 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _key() -> bytes:
    return f"/highlander-tests/{uuid.uuid4().hex}/holder".encode()


async def _lease(client: Client, ttl: int = 30) -> int:
    return api.granted(await client.call("/v3/lease/grant", api.grant(ttl)))[0]


async def _reign(client: Client, key: bytes) -> Held:
    held = await claim(client, key, b"incumbent", await _lease(client))
    assert isinstance(held, Held)
    return held


def _always() -> bool:
    return True


async def test_a_timely_ack_moves_the_key_and_deposes_the_incumbent(etcd: Cluster) -> None:
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        then = await incumbent_moves(client, key, b"newcomer", incumbent, newcomer, _always)
        assert then is Then.DEPOSED
        assert await where(client, key, newcomer, incumbent) is Key.OURS


async def test_the_move_marks_the_conversation_with_the_new_reign(etcd: Cluster) -> None:
    # The newcomer's watch learns the commit from the mark, without a read: the holder
    # key's new value and token (mod revision); gone with the incumbent's lease, the
    # end of its stream, while the holder key stays on the newcomer's lease.
    key = _key()
    mark = key + b"/conv/0/i/moved"
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        then = await incumbent_moves(
            client, key, b"newcomer", incumbent, newcomer, _always, (), mark
        )
        assert then is Then.DEPOSED
        moved = await holder(client, key)
        marked = await holder(client, mark)
        assert moved is not None and marked is not None
        assert (moved.value, moved.lease) == (b"newcomer", newcomer)
        assert (marked.value, marked.mod_revision) == (b"newcomer", moved.mod_revision)
        assert marked.lease == incumbent.lease
        await client.call("/v3/lease/revoke", api.revoke(incumbent.lease))
        assert await holder(client, mark) is None
        assert await holder(client, key) == moved


async def test_a_move_that_applies_nothing_marks_nothing(etcd: Cluster) -> None:
    key = _key()
    mark = key + b"/conv/0/i/moved"
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        await client.call("/v3/lease/revoke", api.revoke(newcomer))  # the newcomer died
        then = await incumbent_moves(client, key, b"n", incumbent, newcomer, _always, (), mark)
        assert then is Then.KEEP
        assert await holder(client, mark) is None


async def test_a_move_whose_answer_was_lost_is_settled_by_trying_again(etcd: Cluster) -> None:
    # The first attempt applied, its answer never came: the retry's failed compare shows OURS.
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        await client.call(
            "/v3/kv/txn", api.move(key, b"n", incumbent.token, incumbent.lease, newcomer)
        )
        then = await incumbent_moves(client, key, b"n", incumbent, newcomer, _always)
        assert then is Then.DEPOSED


async def test_a_move_onto_a_lease_that_is_gone_applies_nothing_and_the_incumbent_keeps(
    etcd: Cluster,
) -> None:
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        await client.call("/v3/lease/revoke", api.revoke(newcomer))  # the newcomer died
        then = await incumbent_moves(client, key, b"n", incumbent, newcomer, _always)
        assert then is Then.KEEP
        assert await where(client, key, newcomer, incumbent) is Key.THEIRS_INTACT
        # etcd checks the lease only on the branch it takes: a failed compare is no refusal.
        stale = api.move(key, b"n", incumbent.token + 1, incumbent.lease, newcomer)
        assert not api.txn(await client.call("/v3/kv/txn", stale)).succeeded


async def test_an_incumbent_fenced_meanwhile_steps_down(etcd: Cluster) -> None:
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        await client.call("/v3/lease/revoke", api.revoke(incumbent.lease))
        newcomer = await _lease(client)
        then = await incumbent_moves(client, key, b"n", incumbent, newcomer, _always)
        assert then is Then.STEP_DOWN
        assert await holder(client, key) is None


async def test_with_no_member_answering_the_incumbent_retries_then_steps_down(
    faulty: Cluster,
) -> None:
    key = _key()
    async with Client(parse(faulty.backend, {}), timeout=0.2, budget=0.5) as client:
        incumbent = await _reign(client, key)
        newcomer = await _lease(client)
        for member in faulty.members:
            faulty.stop(member)
        tries = [0]

        def twice() -> bool:
            tries[0] += 1
            return tries[0] < 2

        with anyio.fail_after(60):
            then = await incumbent_moves(client, key, b"n", incumbent, newcomer, twice)
        assert then is Then.STEP_DOWN
        assert tries[0] == 2  # one retry, then the bound said stop


async def test_a_fence_moves_the_key_revokes_the_incumbent_and_waits_a_ttl(
    etcd: Cluster,
) -> None:
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        mine = await _lease(client, ttl=2 * MIN_TTL)
        unread = (key + b"/conv/c/i/0000000000000003", key + b"/conv/c/i/fin")
        started = boottime()
        found = await fence(client, key, b"newcomer", incumbent, mine, TTL, unread)
        assert found is Key.OURS
        assert boottime() - started >= TTL  # it waited out the fenced holder's belief
        answer = await client.call("/v3/lease/timetolive", {"ID": str(incumbent.lease)})
        assert api.integer(answer.get("TTL")) == -1  # revoked: etcd knows it no more


async def test_a_fence_never_lands_on_an_incumbent_whose_stream_moved_on(
    etcd: Cluster,
) -> None:
    key = _key()
    async with Client(parse(etcd.backend, {})) as client:
        incumbent = await _reign(client, key)
        mine = await _lease(client)
        unread = key + b"/conv/c/i/0000000000000003"
        # The incumbent answered after all (its next chunk is there): no fence.
        await client.call("/v3/kv/put", {"key": api.b64(unread), "value": ""})
        found = await fence(client, key, b"n", incumbent, mine, TTL, (unread,))
        assert found is Key.THEIRS_INTACT
        assert await where(client, key, mine, incumbent) is Key.THEIRS_INTACT
