"""Newcomers over etcd take turns (highlander/_etcd/queue.py), on a real cluster.

A herd of newcomers, each conversing with the holder at once, overloaded it
until it missed deadlines and was fenced while healthy (chaos-etcd). Now
one converses at a time: no holder ever answers BUSY (a conversation beside
a handover), nobody is fenced. And the queue never wedges: a place held by
a newcomer that makes no way is passed after a handover's patience.
"""

from __future__ import annotations

import time
import uuid

from highlander._etcd import api
from highlander._etcd.queue import queue_prefix
from highlander._etcd.session import app_root
from tests.etcd.test_handle import SETTLE, Hosts, hosts
from tests.support.etcd_cluster import Cluster, post
from tests.support.proctools import wait_until_one_left

__all__ = ["hosts"]


def test_newcomers_on_several_hosts_converse_one_at_a_time(hosts: Hosts) -> None:
    first = hosts.start("h0", hold=120, thrash_limit=100)
    first.wait_for("ready")
    herd = [hosts.start(f"h{1 + n % 4}", hold=120, thrash_limit=100) for n in range(8)]
    survivor = wait_until_one_left([first, *herd], timeout=240)
    if not any(report.get("event") == "ready" for report in survivor.heard):
        survivor.wait_for("ready", timeout=SETTLE)  # its predecessor left the moment it held
    assert hosts.events("busy") == []  # never a conversation beside a handover
    assert hosts.events("fenced") == [] and hosts.events("timeout") == []
    succeeded = [e for e in hosts.events("claimed") if e["outcome"] == "succeeded"]
    assert len(succeeded) == len(herd)  # each one took over in its turn, with the handoff
    for child in [first, *herd]:
        if child is not survivor:
            assert child.finish(SETTLE)[0] == 0  # deposed, never killed


def test_a_newcomer_that_holds_gives_its_place_up(hosts: Hosts, etcd: Cluster) -> None:
    # It gives it up in the background (acquire() does not wait for the delete),
    # but it does: the key would otherwise stay while it holds, its lease kept alive.
    first = hosts.start("h1", hold=120)
    first.wait_for("ready")
    second = hosts.start("h2", hold=120)
    assert second.wait_for("ready", timeout=SETTLE)["outcome"] == "succeeded"
    env = hosts.kids.env(HIGHLANDER_PROJECT_ID=hosts.project)
    prefix = queue_prefix(app_root("child", hosts.project, env))
    deadline = time.monotonic() + SETTLE
    while places := api.got(post(etcd.endpoints[0], "/v3/kv/range", api.get(prefix, prefix=True)))[
        1
    ]:
        assert time.monotonic() < deadline, f"still queued while holding: {places}"
        time.sleep(0.05)
    assert second.proc.poll() is None  # it holds still: its lease did not take the key
    assert first.finish(SETTLE)[0] == 0


def test_a_place_that_makes_no_way_is_passed(hosts: Hosts, etcd: Cluster) -> None:
    """A queue key older than ours whose owner never converses (a lease kept alive by
    the test): the newcomer waits a handover's patience, then converses anyway."""
    first = hosts.start("h1", hold=120)
    first.wait_for("ready")
    endpoint = etcd.endpoints[0]
    lease = int(str(post(endpoint, "/v3/lease/grant", {"TTL": 60})["ID"]))
    env = hosts.kids.env(HIGHLANDER_PROJECT_ID=hosts.project)
    planted = queue_prefix(app_root("child", hosts.project, env)) + b"h9-1/planted"
    body = {"key": api.b64(planted), "value": api.b64(b"x"), "lease": str(lease)}
    post(endpoint, "/v3/kv/put", body)
    try:
        second = hosts.start("h2")
        report = second.wait_for("ready", timeout=SETTLE)
        assert report["outcome"] == "succeeded" and report["handoff"]["from"] == first.pid
        _, kvs = api.got(post(endpoint, "/v3/kv/range", api.get(planted)))
        assert [kv.key for kv in kvs] == [planted]  # passed, not deleted
        assert first.finish(SETTLE)[0] == 0
    finally:
        post(endpoint, "/v3/lease/revoke", {"ID": str(lease)})


def test_joining_takes_the_first_look_in_the_same_request(etcd: Cluster) -> None:
    """``join`` puts a place and reads the queue at once: what ``ahead`` would say then."""
    import anyio

    from highlander._etcd.client import Client
    from highlander._etcd.endpoints import parse
    from highlander._etcd.queue import ahead, join

    root = f"/highlander-tests/{uuid.uuid4().hex}/".encode()
    first, second = queue_prefix(root) + b"h1/a", queue_prefix(root) + b"h2/b"

    async def main() -> None:
        async with Client(parse(etcd.backend, {})) as client:
            lease = api.granted(await client.call("/v3/lease/grant", api.grant(30)))[0]
            mine, found = await join(client, root, first, b"1", lease)
            assert found is not None and found[0] == []  # nobody ahead of the first
            theirs, found = await join(client, root, second, b"2", lease)
            assert theirs > mine
            assert found is not None and found[0] == [first]
            assert found[1] == theirs  # the project's last write: our own place
            assert await ahead(client, root, second, theirs) == found
            again, _ = await join(client, root, first, b"1", lease)  # retried: still our place
            assert again == mine
            await client.call("/v3/kv/deleterange", {"key": api.b64(second)})
            assert await ahead(client, root, second, theirs) is None  # our place went
            await client.call("/v3/lease/revoke", api.revoke(lease))

    anyio.run(main)
