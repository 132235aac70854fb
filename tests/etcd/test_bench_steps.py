"""``make bench``'s etcd scripts still run against the library.

The script drives the floor's functions directly (claim, commit, the
channel), so a change of their signatures breaks it without breaking any
other test: it did once (the channel's opening key became a KeyValue).
Two rounds each, against the suite's cluster; no time is asserted.
"""

from __future__ import annotations

import shutil
import tempfile
import urllib.request
import uuid
from functools import partial
from pathlib import Path

import anyio
import pytest

from scripts.bench.env import REPO
from scripts.bench.etcd import measure
from scripts.bench.etcd_load import Watches, watch_like_holders
from scripts.bench.etcd_succession import measure_against
from tests.support.etcd_cluster import Cluster


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
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


@pytest.mark.timeout(300)
def test_the_succession_bench_runs_interleaved(etcd: Cluster) -> None:
    """``scripts.bench.etcd_succession --against``: both trees hand over, each its own sample.

    Against this very checkout (the comparison's code path, not a comparison).
    A short scratch directory: pytest's own is too long for a socket path.
    """
    base = Path(tempfile.mkdtemp(prefix="hl-ab-"))
    try:
        ours, theirs = measure_against(base, etcd, 1, str(REPO))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert len(ours) == len(theirs) == 1
    # acquire(), start -> HELLO, HELLO -> claimed (each seen in the events), and
    # claimed -> returned: the event is logged before acquire() returns.
    assert all(len(sample) == 4 and min(sample) > 0 for sample in ours + theirs)


def _watchers(etcd: Cluster) -> int:
    """etcd's own count of its watchers, every member's together (its ``/metrics``)."""
    total = 0
    for endpoint in etcd.endpoints:
        with urllib.request.urlopen(endpoint + "/metrics", timeout=5) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith("etcd_debugging_mvcc_watcher_total "):
                    total += int(float(line.split()[1]))
    return total


@pytest.mark.anyio
async def test_the_scale_bench_holds_a_real_watch_for_each_holder(etcd: Cluster) -> None:
    """``scripts.bench.etcd_scale``'s holders' watches are watches etcd serves, and end with it.

    The 1,000-holder figure counts them (docs/performance.md); a generator whose
    requests etcd took for something else would make that figure a keepalive one.
    """
    keys = [b"/highlander-bench-test/%s/%d" % (uuid.uuid4().hex.encode(), i) for i in range(4)]
    baseline = _watchers(etcd)
    load = Watches()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(
            partial(watch_like_holders, etcd.endpoints, keys, 600.0, 600.0, load, spread=0.0)
        )
        with anyio.fail_after(60):  # a hang guard
            while _watchers(etcd) < baseline + len(keys) or load.open < len(keys):
                await anyio.sleep(0.05)
        assert (load.created, load.failed) == (len(keys), 0)
        tasks.cancel_scope.cancel()
    with anyio.fail_after(60):  # closed with the generator: etcd lets them go
        while _watchers(etcd) > baseline:
            await anyio.sleep(0.05)
