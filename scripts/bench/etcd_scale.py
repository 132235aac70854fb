"""``python -m scripts.bench.etcd_scale``: failover after a SIGKILL, and 1,000 holders at once.

Issue #15's figures, on a local 3-member etcd started here:

* **Failover.** A holder process (tests/programs/etcd_holder.py, TTL 5 s,
  the shortest a user may choose) is SIGKILLed; a waiter that watches the
  holder key claims it when etcd ends the dead holder's lease.  Time from
  the kill to the waiter's claim, on ``CLOCK_BOOTTIME``.  The target is
  TTL + 0.5 s.
* **Scale.** 1,000 holders, each with its lease and its holder key, claimed
  through the library and kept alive every TTL/4 by ``scripts.bench.etcd_load``
  (the same keepalive requests, pre-encoded and pipelined: 1,000 library
  keepers in one machine's Python are CPU-bound before etcd is, see
  docs/performance.md), in ``--procs`` worker processes, for ``--seconds``:
  keepalives answered per second, etcd's CPU and RSS (every member), whether
  every holder held throughout, and at that load the claim's latency and the
  failover of a library holder (its own keeper) whose keepalives stop.  Each
  holder also keeps its watch open, reopened with a read every ``WATCH_IDLE``
  as a quiet holder's is (``--no-watches``: keepalives only, the figure
  before 2026-12-06).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import anyio
import psutil

from highlander._core.lease import MIN_TTL
from highlander._etcd import api
from highlander._etcd.claim import Held, claim
from highlander._etcd.client import WATCH_IDLE, Client
from highlander._etcd.endpoints import parse
from highlander._etcd.keeper import Keeper, boottime, grant
from scripts.bench.etcd_load import Watches, keep_alive, watch_like_holders
from tests.support.etcd_cluster import Cluster, start_cluster

ROOT = Path(__file__).resolve().parents[2]
HOLDER = ROOT / "tests" / "programs" / "etcd_holder.py"


def _pcts(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"{statistics.median(ms):.1f} | {p99:.1f} | {len(ms)}"


async def _claim_when_free(client: Client, key: bytes, since: int) -> float:
    """Wait for ``key``'s delete (from revision ``since``), claim it; when it was ours."""
    lease, _ = await grant(client, MIN_TTL)
    async with contextlib.aclosing(client.watch(key, since + 1)) as events:
        async for event in events:
            if event.kind == "delete":
                held = await claim(client, key, b"waiter", lease)
                if isinstance(held, Held):
                    at = boottime()
                    await client.call("/v3/lease/revoke", api.revoke(lease))
                    return at
    raise AssertionError("the watch ended")


async def failover_after_sigkill(cluster: Cluster, rounds: int, witness_dir: Path) -> list[float]:
    """Seconds from a holder process's SIGKILL to the next claim, ``rounds`` times."""
    samples = []
    async with Client(parse(cluster.backend, {})) as client:
        for i in range(rounds):
            key = f"/highlander-bench/{uuid.uuid4().hex}/holder"
            witness = witness_dir / f"failover-{i}"
            child = subprocess.Popen(
                [sys.executable, str(HOLDER), cluster.backend, key, str(witness), str(MIN_TTL)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                with anyio.fail_after(30):
                    while not (witness.exists() and "held" in witness.read_text()):
                        await anyio.sleep(0.01)
                since = api.header(await client.call("/v3/kv/range", api.get(key.encode())))
                await anyio.sleep(1.0)  # a settled holder, between two keepalives
                os.kill(child.pid, signal.SIGKILL)
                killed = boottime()
                with anyio.fail_after(6 * MIN_TTL):
                    claimed = await _claim_when_free(client, key.encode(), since.revision)
                samples.append(claimed - killed)
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait(timeout=30)
    return samples


async def worker(backend: str, holders: int, seconds: float, idle: float | None) -> None:
    """``--worker``: claim ``holders`` keys, keep their leases alive for ``seconds``; report JSON.

    The claims go through the library; the keepalives through
    :mod:`scripts.bench.etcd_load` (the same requests, at the cost of
    bytes), so etcd, not this process, is what the figures measure.  Prints
    ``ready`` once every key is held; at the end the keepalives sent and
    answered, the leases etcd said were gone, and the keys still held.
    """
    target = parse(backend, {})
    prefix = f"/highlander-bench/{uuid.uuid4().hex}/".encode()
    async with Client(target) as client:
        leases = []
        for i in range(holders):
            lease, _ = await grant(client, MIN_TTL)
            held = await claim(client, prefix + b"%d" % i, b"holder", lease)
            assert isinstance(held, Held)
            leases.append(lease)
        print("ready", flush=True)
        endpoints = list(target.endpoints)
        watched = Watches()
        async with anyio.create_task_group() as tasks:
            if idle is not None:
                keys = [prefix + b"%d" % i for i in range(holders)]
                tasks.start_soon(watch_like_holders, endpoints, keys, seconds, idle, watched)
            load = await keep_alive(endpoints, leases, MIN_TTL, seconds)
        body = api.get(prefix, prefix=True)
        body["count_only"] = True
        still = api.integer((await client.call("/v3/kv/range", body)).get("count"))
        for lease in leases:
            with contextlib.suppress(Exception):
                await client.call("/v3/lease/revoke", api.revoke(lease))
    lags = sorted(load.lags)
    report = {
        "sent": load.sent,
        "answered": load.answered,
        "lost": len(load.gone),
        "held": still,
        "lag_p99": lags[min(len(lags) - 1, int(len(lags) * 0.99))] if lags else 0.0,
        "seconds": seconds,
        "watches_created": watched.created,
        "watch_failures": watched.failed,
    }
    print(json.dumps(report), flush=True)


async def _failover_at_load(client: Client) -> float:
    """A holder of our own stops its keepalives; seconds until a waiter claims its key."""
    key = f"/highlander-bench/{uuid.uuid4().hex}/holder".encode()
    lease, clock = await grant(client, MIN_TTL)
    held = await claim(client, key, b"holder", lease)
    assert isinstance(held, Held)
    keeper = Keeper(client, lease, clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(keeper.run)
        await anyio.sleep(1.0)
        since = api.header(await client.call("/v3/kv/range", api.get(key))).revision
        keeper.stop("bench: keepalives stopped")  # the holder "crashes"
        stopped = boottime()
        with anyio.fail_after(6 * MIN_TTL):
            claimed = await _claim_when_free(client, key, since)
    return claimed - stopped


async def scale(
    cluster: Cluster, holders: int, seconds: float, rounds: int, procs: int, idle: float | None
) -> list[str]:
    """The scale table's rows: ``holders`` spread over ``procs`` worker processes."""
    members = [psutil.Process(m.pid) for m in cluster.members]
    share = [holders // procs + (i < holders % procs) for i in range(procs)]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scripts.bench.etcd_scale",
                "--worker",
                cluster.backend,
                str(n),
                str(seconds),
                *(["--no-watches"] if idle is None else ["--watch-idle", str(idle)]),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        for n in share
    ]
    rows: list[str] = []
    try:
        started = time.perf_counter()
        for proc in workers:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker did not get ready")
        ready = time.perf_counter() - started
        rows.append(f"| {holders} holders held ({procs} processes) after | {ready:.1f} s |")
        for member in members:
            member.cpu_percent(None)
        window = time.perf_counter()
        claims: list[float] = []
        failovers: list[float] = []
        async with Client(parse(cluster.backend, {})) as client:
            for _ in range(rounds * 3):
                lease, _ = await grant(client, MIN_TTL)
                began = time.perf_counter()
                held = await claim(
                    client, f"/highlander-bench/extra-{uuid.uuid4().hex}".encode(), b"x", lease
                )
                claims.append(time.perf_counter() - began)
                assert isinstance(held, Held)
                await client.call("/v3/lease/revoke", api.revoke(lease))
            for _ in range(rounds):
                failovers.append(await _failover_at_load(client))
        elapsed = time.perf_counter() - window
        cpu = sum(m.cpu_percent(None) for m in members)
        rss = sum(m.memory_info().rss for m in members) / 2**20
        reports = []
        for proc in workers:
            out, _ = proc.communicate(timeout=seconds + 120)
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    rate = sum(r["answered"] for r in reports) / seconds
    rows.append(
        f"| keepalives answered per second | {rate:.0f} (a holder sends {4 / MIN_TTL:.1f}) |"
    )
    if idle is not None:
        created = sum(r["watches_created"] for r in reports) / seconds
        failed = sum(r["watch_failures"] for r in reports)
        rows.append(
            f"| holder watches (re)created per second, a range read each; failures | "
            f"{created:.0f} (a holder: one per {idle:g} s quiet); {failed} |"
        )
    rows.append(f"| etcd CPU, all 3 members, over {elapsed:.0f} s (% of one core) | {cpu:.0f} |")
    rows.append(f"| etcd RSS, all 3 members | {rss:.0f} MiB |")
    lost = sum(r["lost"] for r in reports)
    rows.append(f"| holders that lost their lease in the {seconds:g} s window | {lost} |")
    rows.append(f"| holder keys still held at the end | {sum(r['held'] for r in reports)} |")
    lag = max(r["lag_p99"] for r in reports) * 1000
    rows.append(f"| a batch of keepalives, sent → last answer, p99 | {lag:.0f} ms |")
    rows.append(f"| claim at that load: median / p99 / n (ms) | {_pcts(claims)} |")
    rows.append(
        f"| failover at that load, keepalives stopped → claimed (ms) | {_pcts(failovers)} |"
    )
    return rows


def main() -> int:
    """Start a cluster, run both, print markdown, end the cluster by pid."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument(
        "--no-watches", action="store_true", help="keepalives only: no holder's watch"
    )
    parser.add_argument(
        "--watch-idle",
        type=float,
        default=WATCH_IDLE,
        help="seconds a quiet watch stays open (the library's WATCH_IDLE; to explore)",
    )
    parser.add_argument("--worker", nargs=3, metavar=("BACKEND", "HOLDERS", "SECONDS"))
    args = parser.parse_args()
    if args.worker:
        backend, holders, seconds = args.worker
        idle = None if args.no_watches else args.watch_idle
        anyio.run(worker, backend, int(holders), float(seconds), idle)
        return 0
    with tempfile.TemporaryDirectory(prefix="highlander-bench-etcd-") as base:
        cluster = start_cluster(Path(base) / "etcd")
        try:
            failovers = anyio.run(failover_after_sigkill, cluster, args.rounds, Path(base))
            rows = anyio.run(
                scale, cluster, args.holders, args.seconds, args.rounds, args.procs,
                None if args.no_watches else args.watch_idle,
            )  # fmt: skip
        finally:
            cluster.close()
    print(f"| failover after SIGKILL, TTL {MIN_TTL} s | median / p99 / n (ms) |")
    print("|---|---|")
    print(f"| kill → the waiter's claim | {_pcts(failovers)} |")
    print()
    print(f"| {args.holders} holders on a local 3-member etcd, TTL {MIN_TTL} s | figure |")
    print("|---|---|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
