"""Keepalives for many leases at the cost of bytes: the scale benchmark's load generator.

In a deployment every holder is its own process sending 0.8 keepalives a
second; simulating 1,000 of them with the library's client costs ~2 ms of
Python CPU per keepalive, which on a small machine starves the etcd members
the benchmark means to measure (docs/performance.md).  This generator sends
the same requests etcd's gateway receives from a holder, pre-encoded and
pipelined over a few kept-alive HTTP/1.1 connections, and reads the answers'
TTLs back: etcd does the same work per keepalive, the generator almost none.
Not library code: the library's keeper is what the real holders run.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

import anyio
import anyio.abc

_TERMINATOR = b"\r\n0\r\n\r\n"
_TTL = re.compile(rb'"TTL":"(-?\d+)"')


def _request(lease: int) -> bytes:
    body = json.dumps({"ID": str(lease)}).encode()
    head = (
        "POST /v3/lease/keepalive HTTP/1.1\r\nHost: etcd\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Load:
    """What the generator did: keepalives sent and answered, and leases etcd said were gone."""

    sent: int = 0
    answered: int = 0
    gone: set[int] = field(default_factory=set)
    #: Seconds from sending a batch to its last answer (how far etcd lags behind).
    lags: list[float] = field(default_factory=list)


async def _connection(
    host: str, port: int, leases: list[int], period: float, until: float, load: Load
) -> None:
    batch = b"".join(_request(lease) for lease in leases)
    stream: anyio.abc.SocketStream = await anyio.connect_tcp(host, port)
    async with stream:
        while time.monotonic() < until:
            started = time.monotonic()
            await stream.send(batch)
            load.sent += len(leases)
            pending, answers = b"", 0
            with anyio.fail_after(max(period, 5.0)):  # a hang bound, not a threshold
                while answers < len(leases):
                    pending += await stream.receive()
                    *complete, pending = pending.split(_TERMINATOR)
                    for lease, answer in zip(leases[answers:], complete, strict=False):
                        found = _TTL.search(answer)
                        if found is None or int(found.group(1)) <= 0:
                            load.gone.add(lease)
                    answers += len(complete)
            load.answered += answers
            load.lags.append(time.monotonic() - started)
            await anyio.sleep(max(0.0, started + period - time.monotonic()))


async def keep_alive(
    endpoints: list[str], leases: list[int], ttl: float, seconds: float, connections: int = 8
) -> Load:
    """Renew every lease in ``leases`` every ``ttl``/4 for ``seconds``, like that many holders."""
    load = Load()
    until = time.monotonic() + seconds
    async with anyio.create_task_group() as tasks:
        for i in range(connections):
            host, port = endpoints[i % len(endpoints)].split("://", 1)[1].rsplit(":", 1)
            mine = leases[i::connections]
            if mine:
                tasks.start_soon(_connection, host, int(port), mine, ttl / 4, until, load)
    return load
