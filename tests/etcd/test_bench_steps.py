"""``make bench``'s etcd steps (scripts/bench/etcd.py) still run against the library.

The script drives the floor's functions directly (claim, commit, the
channel), so a change of their signatures breaks it without breaking any
other test: it did once (the channel's opening key became a KeyValue).
Two rounds each, against the suite's cluster; no time is asserted.
"""

from __future__ import annotations

import pytest

from scripts.bench.etcd import measure
from tests.support.etcd_cluster import Cluster

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_every_step_of_the_etcd_bench_runs(etcd: Cluster) -> None:
    rows = await measure(etcd, 2)
    names = [row.split("|")[1].strip() for row in rows]
    assert names == [
        "lease grant",
        "claim (put-if-absent txn)",
        "check_current (linearizable read)",
        "commit (move txn)",
        "keepalive",
        "keepalive, the client's CPU",
        "frame round trip (sealed channel)",
    ]
    for row in rows:
        median = float(row.split("|")[2])
        assert median > 0
