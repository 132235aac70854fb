"""Keepalives and watches for many holders at the cost of bytes: the scale benchmark's load.

In a deployment every holder is its own process sending 0.8 keepalives a
second; simulating 1,000 of them with the library's client costs ~2 ms of
Python CPU per keepalive, which on a small machine starves the etcd members
the benchmark means to measure (docs/performance.md).  This generator sends
the same requests etcd's gateway receives from a holder, pre-encoded and
pipelined over a few kept-alive HTTP/1.1 connections, and reads the answers'
TTLs back: etcd does the same work per keepalive, the generator almost none.
Not library code: the library's keeper is what the real holders run.

Each holder also keeps one watch open (:func:`watch_like_holders`): its
member silent for ``WATCH_IDLE`` (a quiet holder's always is), the library
reads the range once and watches again on the next member
(:mod:`highlander._etcd.relist`).  The generator does the same requests on
the same schedule: a linearizable range read, then a watch created from the
read's revision, held open for the idle time, closed.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

import anyio
import anyio.abc

from highlander._etcd import api
from highlander._etcd.client import WATCH_IDLE

_TERMINATOR = b"\r\n0\r\n\r\n"
_TTL = re.compile(rb'"TTL":"(-?\d+)"')
_REVISION = re.compile(rb'"revision":"(\d+)"')
_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)")


def _request(lease: int) -> bytes:
    return _post("/v3/lease/keepalive", {"ID": str(lease)})


def _post(path: str, message: object) -> bytes:
    body = json.dumps(message).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: etcd\r\n"
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


@dataclass
class Watches:
    """What the watchers did: watches etcd created, and cycles that failed."""

    created: int = 0
    failed: int = 0
    open: int = 0


async def _answer(stream: anyio.abc.SocketStream, pending: bytes) -> tuple[bytes, bytes]:
    """One whole response to a unary request (its body, and what was read past it)."""
    while b"\r\n\r\n" not in pending:
        pending += await stream.receive()
    head, _, rest = pending.partition(b"\r\n\r\n")
    length = _LENGTH.search(head)
    if length is None:  # chunked
        while _TERMINATOR not in rest:
            rest += await stream.receive()
        body, _, rest = rest.partition(_TERMINATOR)
        return body, rest
    size = int(length.group(1))
    while len(rest) < size:
        rest += await stream.receive()
    return rest[:size], rest[size:]


async def _watcher(
    endpoints: list[tuple[str, int]],
    key: bytes,
    first: float,
    idle: float,
    until: float,
    load: Watches,
) -> None:
    """One holder's watch: list, watch from the read, idle, again on the next member."""
    end = key + b"/\xff"  # the holder key and what would sort under it: quiet
    ranged = _post("/v3/kv/range", {"key": api.b64(key), "range_end": api.b64(end)})
    await anyio.sleep(first)
    turn = 0
    while time.monotonic() < until:
        host, port = endpoints[turn % len(endpoints)]
        turn += 1
        began = time.monotonic()
        try:
            async with await anyio.connect_tcp(host, port) as stream:
                with anyio.fail_after(idle):  # a hang bound, not a threshold
                    await stream.send(ranged)
                    body, pending = await _answer(stream, b"")
                    found = _REVISION.search(body)
                    revision = int(found.group(1)) if found else 0
                    watch = api.watch(key, revision + 1, end=end)
                    await stream.send(_post("/v3/watch", watch))
                    while b'"created":true' not in pending:
                        pending += await stream.receive()
                load.created += 1
                load.open += 1
                try:
                    await anyio.sleep(max(0.0, min(until, began + idle) - time.monotonic()))
                finally:
                    load.open -= 1
        except (OSError, TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError):
            load.failed += 1
            await anyio.sleep(0.2)


async def watch_like_holders(
    endpoints: list[str],
    keys: list[bytes],
    seconds: float,
    idle: float = WATCH_IDLE,
    load: Watches | None = None,
    spread: float | None = None,
) -> Watches:
    """Keep a holder's watch on each of ``keys`` for ``seconds``, reopened like a quiet one's.

    ``idle``: how long a quiet watch stays open (the library's ``WATCH_IDLE``);
    ``load``: where to count, while it runs (a new one if ``None``);
    ``spread``: the first opens are spread over this (``None``: ``idle``).
    """
    load = Watches() if load is None else load
    until = time.monotonic() + seconds
    members = []
    for endpoint in endpoints:
        host, port = endpoint.split("://", 1)[1].rsplit(":", 1)
        members.append((host, int(port)))
    async with anyio.create_task_group() as tasks:
        for i, key in enumerate(keys):
            # Spread over one idle period, as holders that claimed at different times are.
            first = (idle if spread is None else spread) * i / max(1, len(keys))
            turned = members[i % len(members) :] + members[: i % len(members)]
            tasks.start_soon(_watcher, turned, key, first, idle, until, load)
    return load
