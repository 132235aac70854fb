"""`make demo`: the one-command tour.

Part 1 runs the protocol in memory (no sockets, no processes): both state
machines, every frame with its direction, size and time.  Part 2 is the real
thing: two server processes for one project; the second takes over, the
first saves (reporting progress), hands its state over and leaves; the
timeline comes from the project's event log.
"""

from __future__ import annotations

import hashlib
import secrets
import sys
import time

from highlander._core.messages import (
    AckSuccession,
    Hello,
    Intent,
    ProgressReport,
    Save,
    Saved,
)
from highlander._core.pair import ConnectionPair
from highlander._core.signing import derive_key
from highlander._core.state import Role


def in_memory() -> int:
    project = "/home/alice/src/shop"
    key = derive_key(b"demo-token-not-secret", hashlib.sha256(project.encode()).digest())
    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    pair = ConnectionPair(
        key=key,
        newcomer_nonce=secrets.token_bytes(16),
        incumbent_nonce=secrets.token_bytes(16),
        clock=clock,
    )
    inc, new = Role.INCUMBENT, Role.NEWCOMER
    received = []
    hello = Hello(
        pid=4242,
        start_time=1_234_567,
        exe="/usr/bin/python3.11",
        app="shop-mcp",
        generation=7,
        since_ms=int(time.time() * 1000) - 3_600_000,
        nonce=pair.incumbent.local_nonce.hex(),
    )
    received += pair.send(inc, hello)
    assert pair.newcomer.peer_nonce is not None
    save = Save(
        pid=4343,
        start_time=1_299_999,
        nonce=pair.newcomer.local_nonce.hex(),
        echo=pair.newcomer.peer_nonce.hex(),
        intent=Intent.SUCCEED,
        app="shop-mcp",
    )
    received += pair.send(new, save)
    parts = ["index.sqlite", "embeddings.bin", "session.json"]
    for counter, part in enumerate(parts, start=1):
        note = f"wrote {part}"
        step = ProgressReport(counter=counter, done=counter, total=len(parts), note=note)
        received += pair.send(inc, step)
    handoff = {"snapshot": "/home/alice/.cache/shop/snap-7", "sha256": "9f86d081884c7d65"}
    received += pair.send(inc, Saved(handoff=handoff, generation=7))
    received += pair.send(new, AckSuccession())
    received += pair.deliver(new, b"")  # the incumbent leaves: end of stream

    print(f"Succession between the two state machines (project {project})\n")
    print(f"{'elapsed µs':>10}  {'direction':<22} {'message':<15} {'bytes':>5}  detail")
    for sent in pair.timeline:
        arrow = "incumbent → newcomer" if sent.sender is inc else "newcomer → incumbent"
        detail = _detail(sent.message)
        micros = sent.at * 1e6
        print(f"{micros:10.0f}  {arrow:<22} {sent.message.TYPE:<15} {sent.size:5d}  {detail}")
    total = sum(sent.size for sent in pair.timeline)
    inherited = next(m.handoff for m in received if isinstance(m, Saved))
    print(f"{'':10}  {'incumbent → newcomer':<22} {'(end of stream)':<15}")
    print(
        f"\n{len(pair.timeline)} frames, {total} bytes, every one HMAC-verified. "
        f"Newcomer: {pair.newcomer.state.value}, incumbent: {pair.incumbent.state.value}."
    )
    print(f"Handoff intact: {inherited == handoff}")
    return 0 if inherited == handoff else 1


def _detail(message: object) -> str:
    if isinstance(message, Hello):
        return f"pid {message.pid}, generation {message.generation}, app {message.app}"
    if isinstance(message, Save):
        return f"pid {message.pid}, intent {message.intent.value}"
    if isinstance(message, ProgressReport):
        return f"#{message.counter} {message.done}/{message.total} {message.note}"
    if isinstance(message, Saved):
        return f"handoff {message.handoff}"
    return ""


def two_processes() -> int:
    from scripts.demo.processes import run  # noqa: PLC0415 - part 2 lives next to this module

    return run()


def main() -> int:
    print("== 1. The protocol, in memory ==\n")
    status = in_memory()
    print("\n== 2. Two real processes, one project ==\n")
    return status or two_processes()


if __name__ == "__main__":
    sys.exit(main())
