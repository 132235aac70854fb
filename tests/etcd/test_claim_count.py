"""The counted claim (``claim_reign``) against a real cluster: one request when it can be.

A newcomer's claim that finds the project held is on the critical path of
every succession across hosts, so the claim guesses that no counter exists
and its transaction's failure branch reads both the holder key and the
counter: a held project is known in one request, a free one that was
counted before is claimed in a second with the counter just read.  The
requests are counted on the real client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from highlander._etcd import api
from highlander._etcd.claim import Held, claim_reign, counter_key, mark_released
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from tests.support.etcd_cluster import Cluster

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Counting(Client):
    """The real client, counting the requests it was asked to make, by path."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(parse(cluster.backend, {}))
        self.paths: list[str] = []

    async def call(self, path: str, body: api.Json, **kwargs: float | None) -> api.Json:
        self.paths.append(path)
        return await super().call(path, body, **kwargs)


@pytest.fixture
def key() -> Iterator[bytes]:
    yield f"/highlander-tests/{uuid.uuid4().hex}/holder".encode()


async def _lease(client: Client) -> int:
    lease, _ = api.granted(await client.call("/v3/lease/grant", api.grant(5)))
    return lease


def _value(generation: int) -> bytes:
    return f"reign {generation}".encode()


async def _claim(client: Counting, key: bytes, lease: int) -> tuple[Held | api.KeyValue, int]:
    """The claim and how many requests it made."""
    before = len(client.paths)
    result = await claim_reign(client, key, lease, _value)
    return result, len(client.paths) - before


async def test_a_projects_first_claim_is_one_request(etcd: Cluster, key: bytes) -> None:
    async with Counting(etcd) as client:
        held, asked = await _claim(client, key, await _lease(client))
        assert isinstance(held, Held)
        assert (held.value, held.stale, asked) == (_value(1), False, 1)


async def test_a_held_project_is_known_in_one_request(etcd: Cluster, key: bytes) -> None:
    async with Counting(etcd) as client:
        first, second = await _lease(client), await _lease(client)
        won, _ = await _claim(client, key, first)
        lost, asked = await _claim(client, key, second)
        assert isinstance(won, Held)
        assert isinstance(lost, api.KeyValue)
        assert (lost.lease, lost.value, asked) == (first, _value(1), 1)


async def test_a_counted_project_is_claimed_above_its_count(etcd: Cluster, key: bytes) -> None:
    """After a release the next reign counts on, not stale; after a lost lease, stale."""
    async with Counting(etcd) as client:
        lease = await _lease(client)
        won, _ = await _claim(client, key, lease)
        assert isinstance(won, Held)
        await mark_released(client, key, won, 1)
        await client.call("/v3/lease/revoke", api.revoke(lease))
        after_release, asked = await _claim(client, key, await _lease(client))
        assert isinstance(after_release, Held)
        # The guess (no counter) failed; its failure branch held the counter.
        assert (after_release.value, after_release.stale, asked) == (_value(2), False, 2)
        await client.call("/v3/lease/revoke", api.revoke(after_release.lease))
        after_loss, _ = await _claim(client, key, await _lease(client))
        assert isinstance(after_loss, Held)
        assert (after_loss.value, after_loss.stale) == (_value(3), True)
        _, counted = api.got(await client.call("/v3/kv/range", api.get(counter_key(key))))
        assert counted[0].value == b"3"


async def test_a_retried_counted_claim_on_our_own_lease_counts_as_won(
    etcd: Cluster, key: bytes
) -> None:
    """What a retry after a timed-out but applied txn meets: the key on our own lease."""
    async with Counting(etcd) as client:
        lease = await _lease(client)
        first, _ = await _claim(client, key, lease)
        again, asked = await _claim(client, key, lease)
        assert isinstance(first, Held)
        assert isinstance(again, Held)
        assert (again.token, again.lease, asked) == (first.token, lease, 1)
