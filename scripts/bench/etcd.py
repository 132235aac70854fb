"""``python -m scripts.bench.etcd``: what the etcd backend's steps cost on a local 3-member cluster.

The backend's parts, each the way the backend uses it (issue #15): a lease
grant, the claim transaction, a linearizable read of the holder key
(``check_current()``), the commit transaction, a keepalive (its time, and
the CPU it costs this process), and one frame's round trip over a
conversation (newcomer → holder → newcomer through the sealed channel and
the socketpair bridges).  Medians and p90 over ``--rounds``; the cluster is
started here (tests/support/etcd_cluster.py) and ended by pid.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from highlander._core import sealing
from highlander._etcd import api
from highlander._etcd.channel import accept_channel, bridge, incoming, open_channel
from highlander._etcd.claim import Held, claim, commit, still_held
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from tests.support.etcd_cluster import Cluster, start_cluster


def _row(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    return f"| {name} | {statistics.median(ms):.2f} | {p90:.2f} | {len(ms)} |"


async def _timed(
    rounds: int,
    step: Callable[[], Awaitable[object]],
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = clock()
        await step()
        samples.append(clock() - started)
    return samples


async def _frame_round_trips(client: Client, rounds: int) -> list[float]:
    root = f"/highlander-bench/{uuid.uuid4().hex}/".encode()
    key = sealing.channel_key(b"bench-token-0123456789", hashlib.sha256(b"bench").digest())
    start = api.header(await client.call("/v3/kv/range", api.get(root))).revision
    lease = api.granted(await client.call("/v3/lease/grant", api.grant(30)))[0]
    newcomer = await open_channel(client, root, lease, key)
    async with contextlib.aclosing(incoming(client, root, start)) as opened:
        async for conversation, opening in opened:
            holder = accept_channel(client, root, conversation, opening.mod_revision, lease, key)
            break
    n_app, n_end = socket.socketpair()
    i_app, i_end = socket.socketpair()
    for sock in (n_app, i_app):
        sock.setblocking(False)
    samples = []

    async def receive(sock: socket.socket) -> bytes:
        while True:
            await anyio.wait_readable(sock)
            try:
                return sock.recv(65536)
            except BlockingIOError:
                continue

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge, newcomer, n_end)
        tasks.start_soon(bridge, holder, i_end)
        for _ in range(rounds):
            started = time.perf_counter()
            n_app.send(b"x" * 200)  # about one signed frame
            await receive(i_app)
            i_app.send(b"y" * 200)
            await receive(n_app)
            samples.append(time.perf_counter() - started)
        n_app.close()
        i_app.close()
    await newcomer.forget()
    return samples


async def measure(cluster: Cluster, rounds: int) -> list[str]:
    """The table's rows."""
    rows = []
    async with Client(parse(cluster.backend, {})) as client:
        prefix = f"/highlander-bench/{uuid.uuid4().hex}/".encode()
        leases: list[int] = []

        async def grant() -> None:
            leases.append(api.granted(await client.call("/v3/lease/grant", api.grant(30)))[0])

        rows.append(_row("lease grant", await _timed(rounds, grant)))
        helds: list[Held] = []

        async def claim_one() -> None:
            key = prefix + uuid.uuid4().hex.encode()
            held = await claim(client, key, b"holder", leases[len(helds)])
            assert isinstance(held, Held)
            helds.append(held)

        rows.append(_row("claim (put-if-absent txn)", await _timed(rounds, claim_one)))
        key = prefix + b"moved"
        claimed = await claim(client, key, b"v", leases[0])
        assert isinstance(claimed, Held)
        current = claimed

        async def check() -> None:
            assert await still_held(client, key, current)

        rows.append(_row("check_current (linearizable read)", await _timed(rounds, check)))
        turn = [1]

        async def move() -> None:
            nonlocal current
            moved = await commit(client, key, b"v", current, leases[turn[0] % len(leases)])
            assert isinstance(moved, Held)
            current = moved
            turn[0] += 1

        rows.append(_row("commit (move txn)", await _timed(rounds, move)))

        async def keepalive() -> None:
            await client.call("/v3/lease/keepalive", api.keepalive(leases[0]))

        rows.append(_row("keepalive", await _timed(rounds, keepalive)))
        # What a holder's own keepalives cost it: this process's CPU per request.
        cpu = await _timed(rounds, keepalive, time.process_time)
        rows.append(_row("keepalive, the client's CPU", cpu))
        rows.append(
            _row("frame round trip (sealed channel)", await _frame_round_trips(client, rounds))
        )
        for lease in leases:
            await client.call("/v3/lease/revoke", api.revoke(lease))
    return rows


def main() -> int:
    """Start a cluster, measure, print a markdown table, end the cluster."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="highlander-bench-etcd-") as base:
        cluster = start_cluster(Path(base))
        try:
            rows = anyio.run(measure, cluster, args.rounds)
        finally:
            cluster.close()
    print("| step (3-member etcd 3.5.1 on 127.0.0.1) | median ms | p90 ms | n |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
