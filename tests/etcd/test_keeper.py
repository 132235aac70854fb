"""The lease keeper against a real cluster: alive through a frozen member, gone on time."""

from __future__ import annotations

import anyio
import pytest

from highlander._core import lease
from highlander._etcd import api
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from highlander._etcd.keeper import Keeper, boottime, grant
from tests.support.etcd_cluster import Cluster, Member

pytestmark = pytest.mark.anyio
#: Shorter than a user may choose (MIN_TTL 5): the tests wait through several TTLs.
TTL = 2


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _ttl_left(cluster: Cluster, held: int) -> int:
    async with Client(parse(cluster.backend, {})) as other:
        answer = await other.call("/v3/lease/timetolive", {"ID": str(held)})
        return api.integer(answer.get("TTL"))


async def test_a_kept_lease_outlives_several_ttls(etcd: Cluster) -> None:
    async with Client(parse(etcd.backend, {})) as client:
        held, clock = await grant(client, TTL)
        keeper = Keeper(client, held, clock)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(keeper.run)
            await anyio.sleep(3 * TTL)
            assert keeper.holds()
            assert await _ttl_left(etcd, held) > 0
            tasks.cancel_scope.cancel()
        assert keeper.answered >= 3 * 3  # four a TTL, some slack for a slow start
        await keeper.revoke()


async def test_a_lease_revoked_elsewhere_ends_the_reign_at_the_next_keepalive(
    etcd: Cluster,
) -> None:
    async with Client(parse(etcd.backend, {})) as client:
        held, clock = await grant(client, TTL)
        keeper = Keeper(client, held, clock)
        async with Client(parse(etcd.backend, {})) as fencer:
            await fencer.call("/v3/lease/revoke", api.revoke(held))
        with anyio.fail_after(10 * TTL):
            assert await keeper.run() == "gone"
        assert not keeper.holds()


async def _survives(cluster: Cluster, frozen: Member, ttl: int) -> None:
    async with Client(parse(cluster.backend, {}), timeout=0.2) as client:
        client._current = cluster.members.index(frozen)  # the keeper's member freezes
        held, clock = await grant(client, ttl)
        keeper = Keeper(client, held, clock)
        cluster.stop(frozen)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(keeper.run)
            await anyio.sleep(2 * ttl)
            assert keeper.holds(), keeper.why
            tasks.cancel_scope.cancel()
        assert client.endpoint != frozen.endpoint
        await keeper.revoke()


async def test_a_frozen_follower_does_not_cost_the_lease(faulty: Cluster) -> None:
    leader = faulty.leader()
    await _survives(faulty, next(m for m in faulty.members if m is not leader), TTL)


async def test_the_shortest_ttl_a_user_may_choose_rides_out_a_frozen_leader(
    faulty: Cluster,
) -> None:
    # TTL 2 does not: the survivors take 1 s to notice and more to elect (issue #15).
    await _survives(faulty, faulty.leader(), lease.MIN_TTL)


async def test_with_no_member_answering_the_holder_lets_go_before_the_lease_can_end(
    faulty: Cluster,
) -> None:
    async with Client(parse(faulty.backend, {}), timeout=0.2) as client:
        held, clock = await grant(client, TTL)
        keeper = Keeper(client, held, clock)
        await anyio.sleep(TTL / 2)  # a keepalive or two answered first
        for member in faulty.members:
            faulty.stop(member)
        with anyio.fail_after(10 * TTL):
            why = await keeper.run()
        let_go = boottime()
        assert why == "expired"
        # Let go after the bound and before the earliest moment etcd could expire
        # the lease: counted from the newest answered keepalive's *send*.
        assert clock.valid_until <= let_go < clock.earliest_end
        assert keeper.sent > keeper.answered


async def test_the_holder_stops_at_its_bound_before_the_keepalive_loop_notices(
    etcd: Cluster,
) -> None:
    # A process resumed after a SIGSTOP: its main thread asks before the keeper's
    # thread has run; the answer must come from the clock, not from the loop.
    now = [0.0]
    async with Client(parse(etcd.backend, {})) as client:
        held, clock = await grant(client, TTL, now=lambda: now[0])
        keeper = Keeper(client, held, clock, now=lambda: now[0])
        assert keeper.holds()
        now[0] = clock.valid_until
        assert keeper.why is None  # the loop never ran
        assert not keeper.holds()
        await keeper.revoke()


async def test_a_stopped_keeper_sends_nothing_more_and_the_lease_ends_by_its_ttl(
    etcd: Cluster,
) -> None:
    async with Client(parse(etcd.backend, {})) as client:
        held, clock = await grant(client, TTL)
        keeper = Keeper(client, held, clock)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(keeper.run)
            await anyio.sleep(TTL / 2)
            keeper.stop("handed over")
            sent = keeper.sent
            with anyio.fail_after(10 * TTL):
                while await _ttl_left(etcd, held) > 0:
                    await anyio.sleep(0.1)
            assert keeper.sent == sent
        assert not keeper.holds()
        assert keeper.why == "handed over"
