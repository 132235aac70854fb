"""Share mode over many sessions, and across protocol eras (issue #18, tests (6) and (8)).

* A 2025-11-25 client (``initialize``) and a 2026-07-28 client
  (``server/discover``, no handshake) share one server, whichever of them
  started it.
* 1,000 attach/detach cycles against one real holder leave it with the
  descriptors it had, and its memory flat: each cycle is a real connection
  through the signed handshake (HELLO verified against the kernel, a signed
  ATTACH), then an ``initialize`` over the unframed stream, then a close.
  The cycles are made by this test process itself (no relay processes), so
  a thousand take seconds.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from highlander._core.messages import Attach, Attached
from highlander._host.blocking import run_blocking
from highlander._host.identity import own_identity
from highlander._host.settings import Settings
from highlander._host.waiting import BLOCKING
from highlander._shell.client import Greeting, greet
from highlander._shell.dial import connect
from highlander._shell.wire import receive_event, send_message
from tests.cli.test_mcp_e2e import Processes, processes
from tests.cli.test_mcp_share import client, params
from tests.support.proctools import TOKEN, WAIT

__all__ = ["processes"]

CYCLES = 1000
#: Warm-up cycles before the holder's memory is measured (allocator, caches).
WARM = 100
#: Memory a holder may gain over the measured cycles: a leak of even 1 KiB a
#: session would be ~1 MiB; this is room for the allocator's noise only.
GROWTH_KIB = 2048


@pytest.mark.asyncio
@pytest.mark.parametrize("first_modern", [False, True], ids=["legacy-hosts", "modern-hosts"])
async def test_a_legacy_and_a_modern_client_share_one_server(
    tmp_path: Path, first_modern: bool
) -> None:
    """(6) Each era's client gets its own kind of session in the one server."""
    server = params(tmp_path)
    async with (
        client("A", server, tmp_path / "A.stderr", modern=first_modern) as a,
        client("B", server, tmp_path / "B.stderr", modern=not first_modern) as b,
    ):
        eras = {a.session.protocol_version, b.session.protocol_version}
        assert eras == {"2025-11-25", "2026-07-28"}, eras
        who_a, who_b = await a.call("who_calls"), await b.call("who_calls")
        assert who_a["pid"] == who_b["pid"]
        await a.call("add_note", key="k", text="from A")
        assert await b.call("get_note", key="k") == "from A"
        assert await b.call("count_to", steps=3) == 3


def _settings(tmp_path: Path) -> Settings:
    return Settings.resolve(
        app="notes", project=tmp_path / "project", mode="auto", token=TOKEN, timeouts=None,
        runtime_dir=tmp_path / "rt",
    )  # fmt: skip


def _attach_once(settings: Settings, number: int) -> None:
    """One real session: connect, verify HELLO, ATTACH, ``initialize`` over the raw stream."""
    sock = connect(settings.paths.socket)
    assert sock is not None
    try:
        greeting = run_blocking(greet(settings, sock, BLOCKING))
        assert isinstance(greeting, Greeting), greeting
        _attach(greeting)
        sock.setblocking(True)
        sock.settimeout(WAIT)
        request = {
            "jsonrpc": "2.0", "id": number, "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": f"soak-{number}", "version": "1"},
            },
        }  # fmt: skip
        sock.sendall(json.dumps(request).encode() + b"\n")
        answer = _line(sock)
        assert answer["id"] == number and "result" in answer, answer
    finally:
        sock.close()


def _attach(greeting: Greeting) -> None:
    conn, hello, me = greeting.conn, greeting.hello, own_identity()
    assert hello.shares and conn.peer_nonce is not None
    request = Attach(
        me.pid, me.start_time, conn.local_nonce.hex(), conn.peer_nonce.hex(), hello.app,
        hello.build, hello.fingerprint,
    )  # fmt: skip
    run_blocking(send_message(greeting.sock, conn, request, BLOCKING))
    answered = run_blocking(receive_event(greeting.sock, conn, BLOCKING))
    assert isinstance(answered, Attached), answered
    assert conn.unframed() == b""


def _line(sock: socket.socket) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the holder closed the session"
        data += chunk
    answer: dict[str, Any] = json.loads(data)
    return answer


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _settled(pid: int, fds: int | None = None) -> int:
    """The holder's descriptor count once closed sessions are gone (bounded wait).

    With ``fds``: until it is back to that; without: until it stays the same for 0.5 s.
    """
    with anyio.move_on_after(WAIT):
        last, since = _fds(pid), anyio.current_time()
        while (last != fds) if fds is not None else anyio.current_time() - since < 0.5:
            await anyio.sleep(0.05)
            now = _fds(pid)
            if now != last:
                last, since = now, anyio.current_time()
    return _fds(pid)


@pytest.mark.asyncio
async def test_a_thousand_attach_and_detach_cycles_leak_nothing(
    tmp_path: Path, processes: Processes
) -> None:
    """(8) Descriptors back to where they were; memory flat after the warm-up."""
    async with client("A", params(tmp_path), tmp_path / "A.stderr") as a:
        holder = (await a.call("who_calls"))["pid"]
        settings = _settings(tmp_path)
        for number in range(WARM):
            await anyio.to_thread.run_sync(_attach_once, settings, number)
        fds = await _settled(holder)
        before = _rss_kib(holder)
        for number in range(WARM, CYCLES):
            await anyio.to_thread.run_sync(_attach_once, settings, number)
        assert await _settled(holder, fds) == fds
        growth = _rss_kib(holder) - before
        assert growth < GROWTH_KIB, f"the holder grew {growth} KiB over {CYCLES - WARM} sessions"
        assert (await a.call("who_calls"))["pid"] == holder  # still serving its own client
        detached = [
            json.loads(line)
            for path in (tmp_path / "rt").glob("*.events.jsonl")
            for line in path.read_text().splitlines()
            if '"detached"' in line
        ]
        assert len(detached) == CYCLES
        assert detached[-1]["sessions"] == 0
