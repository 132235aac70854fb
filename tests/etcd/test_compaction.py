"""A watch outlives etcd's compaction of its history: real processes and a real cluster.

A quiet watch resumes (its member gone, or silent past ``idle``) from the
revision after its last event, which can be hours old; once etcd has
compacted history past it (auto-compaction is common in production,
Kubernetes compacts every 5 minutes) that resume was refused and the
watch raised.  The holder's one watch ended with it: a healthy holder went
deaf, and the next newcomer fenced it and lost its state.  The watch now
lists, then watches again: puts for what was written since, deletes for
what it had reported (or was told of) and is gone.
"""

from __future__ import annotations

import base64
import contextlib
import time
import uuid

import pytest

from highlander._etcd import api
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from tests.etcd.test_handle import SETTLE, Hosts, hosts
from tests.support.etcd_cluster import Cluster, post

__all__ = ["hosts"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _compact(cluster: Cluster) -> int:
    """Compact the cluster's whole history (every test's: each starts from new revisions)."""
    endpoint = cluster.endpoints[0]
    body: dict[str, object] = {"key": _b64(b"/highlander-tests/compaction"), "value": ""}
    for _ in range(2):  # so the newest revision before them is compacted too
        revision = api.header(post(endpoint, "/v3/kv/put", body)).revision
    post(endpoint, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_watch_from_compacted_history_lists_then_watches(
    etcd: Cluster, anyio_backend: str
) -> None:
    root = f"/highlander-tests/{uuid.uuid4().hex}/".encode()
    async with Client(parse(etcd.backend, {})) as client:

        async def put(name: bytes) -> int:
            body = {"key": _b64(root + name), "value": _b64(name)}
            return api.header(await client.call("/v3/kv/put", body)).revision

        start = await put(b"kept")  # seen before, unchanged: not reported again
        await put(b"changed")
        await client.call("/v3/kv/deleterange", {"key": _b64(root + b"changed")})
        await put(b"changed")  # deleted and written again: one put
        await put(b"new")
        _compact(etcd)
        events = client.watch(root, start + 1, prefix=True, known=(root + b"told",))
        async with contextlib.aclosing(events) as watch:
            seen = [(e.kind, e.kv.key[len(root) :]) for e in [await anext(watch) for _ in range(3)]]
            assert seen == [("put", b"changed"), ("put", b"new"), ("delete", b"told")]
            after = await put(b"later")  # and on, live
            event = await anext(watch)
            assert (event.kind, event.kv.key, event.kv.mod_revision) == (
                "put",
                root + b"later",
                after,
            )


def test_a_quiet_holder_answers_after_a_compaction(hosts: Hosts) -> None:
    # Before: its watch, resumed after 5 s of silence from its claim's revision, was
    # refused; it never let a conversation in again, and the newcomer fenced it.
    first = hosts.start("h1")
    first.wait_for("ready")
    _compact(hosts.etcd)
    time.sleep(6.0)  # past the watch's idle resume (WATCH_IDLE, 5 s): the path that failed
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["outcome"] == "succeeded" and report["handoff"] is not None, report
    assert hosts.events("fenced") == []
