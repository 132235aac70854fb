"""Share mode when the holder goes (issue #18, (3)-(5)): every relayed client keeps working.

Real clients of the official SDK, real server processes: the holder's own
client leaves (the SDK closes stdin, waits 2 s, then kills the group), a
newer build arrives, or the holder is SIGSTOPped and ended by a newcomer.
Each relay answers its client's call in flight with one JSON-RPC error,
starts its server again in the same process, and the client goes on without
a new ``initialize`` (the same session), with the notes handed over.
Without re-attach each of them fails: the relayed client's next call gets
``Connection closed``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.client.stdio import StdioServerParameters

from highlander._resume import RESTARTED
from tests.cli.test_mcp_e2e import Processes, events, processes
from tests.cli.test_mcp_share import Client, client, params, stderr_shown
from tests.support.paths import EXAMPLES, PROGRAMS
from tests.support.proctools import WAIT

__all__ = ["processes"]


class Hosted:
    """A client run in a task of its own, so that it can leave before later ones."""

    def __init__(self) -> None:
        self.client: Client | None = None
        self.ready = anyio.Event()
        self.leave = anyio.Event()
        self.left = anyio.Event()

    async def run(self, name: str, server: StdioServerParameters, errlog: Path) -> None:
        try:
            async with client(name, server, errlog) as c:
                self.client = c
                self.ready.set()
                await self.leave.wait()  # then the SDK closes stdin, waits, kills
        finally:
            self.left.set()


@asynccontextmanager
async def hosted(name: str, server: StdioServerParameters, tmp_path: Path) -> AsyncIterator[Hosted]:
    """Client ``name`` until the block ends or ``leave`` is set (it must have left by then)."""
    host = Hosted()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(host.run, name, server, tmp_path / f"{name}.stderr")
        with anyio.fail_after(WAIT):
            await host.ready.wait()
        try:
            yield host
        finally:
            host.leave.set()


async def slow_call(c: Client, outcome: dict[str, Any], started: anyio.Event) -> None:
    """``count_to`` 100 (5 s), in flight when the holder goes: its result, or its error."""

    async def progress(value: float, total: float | None, message: str | None) -> None:
        started.set()  # the server runs it: the call is in flight

    try:
        with anyio.fail_after(WAIT):
            outcome["result"] = await c.session.call_tool(
                "count_to", {"steps": 100}, progress_callback=progress
            )
    except MCPError as exc:
        outcome["error"] = exc.error


def restarted(outcome: dict[str, Any]) -> None:
    """The call in flight got the one clean error: never a hang, never run again."""
    assert "error" in outcome, outcome
    assert (outcome["error"].code, outcome["error"].message) == RESTARTED


async def gone(processes: Processes, pid: int) -> None:
    with anyio.fail_after(WAIT):
        await processes.gone(pid)


async def interrupted(c: Client, act: Callable[[], Awaitable[None]]) -> None:
    """``act`` while a call of ``c`` is in flight; that call gets the one clean error."""
    outcome: dict[str, Any] = {}
    started = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(slow_call, c, outcome, started)
        with anyio.fail_after(WAIT):
            await started.wait()
        await act()
    restarted(outcome)


class Pair:
    """A (its own task: the host's client, whose server holds) and B (relayed) after A wrote
    a note: ``holder`` is A's server, ``relay`` B's."""

    def __init__(self, host: Hosted, b: Client, holder: int, relay: int) -> None:
        self.host, self.b, self.holder, self.relay = host, b, holder, relay


@asynccontextmanager
async def shared_pair(
    server: StdioServerParameters, tmp_path: Path, processes: Processes
) -> AsyncIterator[Pair]:
    async with hosted("A", server, tmp_path) as a:
        assert a.client is not None
        holder = (await a.client.call("who_calls"))["pid"]
        await a.client.call("add_note", key="k", text="from A")
        async with client("B", server, tmp_path / "B.stderr") as b:
            (relay,) = [s.pid for s in processes.spawned if s.pid != holder]
            assert (await b.call("who_calls"))["pid"] == holder
            yield Pair(a, b, holder, relay)


async def promoted(pair: Pair, processes: Processes) -> None:
    """A leaves during B's call: the call gets the error, B's own server serves B, with
    A's note, and A's server is gone."""

    async def leave() -> None:
        pair.host.leave.set()

    await interrupted(pair.b, leave)
    assert await pair.b.call("who_calls") == {"pid": pair.relay, "client": "B"}
    assert await pair.b.call("get_note", key="k") == "from A"
    await gone(processes, pair.holder)


@pytest.mark.asyncio
async def test_the_hosts_client_leaves_and_a_relayed_client_keeps_working(
    tmp_path: Path, processes: Processes
) -> None:
    """(3) A (the host's client) leaves while B's call is in flight: B's relay is promoted.

    B's call gets the one error, B goes on in the same session, served by
    its own process now, with A's note handed over; A's server left by
    itself (status 0), before the SDK's kill.
    """
    with stderr_shown(tmp_path):
        async with shared_pair(params(tmp_path), tmp_path, processes) as pair:
            b, holder, relay = pair.b, pair.holder, pair.relay
            await promoted(pair, processes)
            assert await b.call("count_to", steps=2) == 2
            assert b.faults == []
        took = events(tmp_path, relay)
        assert took["claimed"]["outcome"] == "succeeded"
        assert took["claimed"]["peer_pid"] == holder
        assert events(tmp_path, holder)["relinquished"]["peer_pid"] == relay
        assert [s.process.returncode for s in processes.spawned if s.pid == holder] == [0]


def upgradable_server(tmp_path: Path) -> tuple[StdioServerParameters, Path]:
    """The shared notes server copied out, so that the test can edit it (a new build)."""
    copy = tmp_path / "srv"
    copy.mkdir()
    for name in ("shared_notes.py", "mcp_server.py", "notes.py"):
        shutil.copy2(EXAMPLES / name, copy / name)
    server = params(tmp_path)
    main = copy / "shared_notes.py"
    return server.model_copy(update={"args": [str(main)]}), main


@pytest.mark.asyncio
async def test_an_upgrade_with_relays_attached_keeps_every_client(
    tmp_path: Path, processes: Processes
) -> None:
    """(4) The server's file is edited and a client starts it: it replaces the holder
    with the notes, and both relayed clients go on with the new build, no re-initialize."""
    server, main = upgradable_server(tmp_path)
    outcomes: dict[str, dict[str, Any]] = {"B": {}, "C": {}}
    with stderr_shown(tmp_path):
        async with (
            client("A", server, tmp_path / "A.stderr") as a,  # the host's: it loses its server
            client("B", server, tmp_path / "B.stderr") as b,
            client("C", server, tmp_path / "C.stderr") as c,
        ):
            holder = (await a.call("who_calls"))["pid"]
            assert {(await x.call("who_calls"))["pid"] for x in (b, c)} == {holder}
            await b.call("add_note", key="k", text="from B")
            stat = main.stat()
            os.utime(main, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new build
            started = {"B": anyio.Event(), "C": anyio.Event()}
            host_d = Hosted()  # in a task: D stays to the end, its server holds from now on
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(slow_call, b, outcomes["B"], started["B"])
                tasks.start_soon(slow_call, c, outcomes["C"], started["C"])
                with anyio.fail_after(WAIT):
                    for event in started.values():
                        await event.wait()
                tasks.start_soon(host_d.run, "D", server, tmp_path / "D.stderr")
                with anyio.fail_after(WAIT):
                    await host_d.ready.wait()
                    while not all(outcomes.values()):
                        await anyio.sleep(0.02)
                d = host_d.client
                assert d is not None
                upgraded = (await d.call("who_calls"))["pid"]
                assert upgraded != holder
                assert await d.call("get_note", key="k") == "from B"
                for name in ("B", "C"):
                    restarted(outcomes[name])
                for x in (b, c):
                    assert await x.call("get_note", key="k") == "from B"
                    assert x.faults == []
                assert {(await x.call("who_calls"))["pid"] for x in (b, c)} == {upgraded}
                await gone(processes, holder)
                host_d.leave.set()
        took = events(tmp_path, upgraded)["claimed"]
        assert (took["outcome"], took["peer_pid"]) == ("succeeded", holder)
        assert events(tmp_path, holder)["relinquished"]["peer_pid"] == upgraded


@pytest.mark.asyncio
async def test_a_stopped_holder_with_relays_is_replaced_and_the_relays_reattach(
    tmp_path: Path, processes: Processes
) -> None:
    """(5) The holder is SIGSTOPped and a new client starts: the stopped holder is ended
    (the verified kill), one server holds, the relayed client's call in flight gets the
    error and it goes on there, and nobody else is signalled."""
    server = params(tmp_path)
    with stderr_shown(tmp_path):
        async with (
            shared_pair(server, tmp_path, processes) as pair,
            anyio.create_task_group() as tg,
        ):
            b, holder = pair.b, pair.holder
            host_c = Hosted()

            async def stop_and_start_c() -> None:
                os.kill(holder, signal.SIGSTOP)
                tg.start_soon(host_c.run, "C", server, tmp_path / "C.stderr")

            await interrupted(b, stop_and_start_c)
            with anyio.fail_after(WAIT):
                await host_c.ready.wait()
            assert host_c.client is not None
            successor = (await host_c.client.call("who_calls"))["pid"]
            # C's server, or B's own (its relay also counts a stopped holder gone): one of them.
            assert successor != holder
            assert await b.call("who_calls") == {"pid": successor, "client": "B"}
            assert b.faults == []
            signalled = {e["peer_pid"] for e in every_event(tmp_path) if e["event"] in SIGNALS}
            assert signalled == {holder}  # the stopped holder, never a relay
            host_c.leave.set()


SIGNALS = ("terminated", "killed")


def every_event(tmp_path: Path) -> list[dict[str, Any]]:
    """Every event logged in the test's runtime directory."""
    logs = sorted((tmp_path / "rt").glob("*.events.jsonl"))
    return [json.loads(line) for log in logs for line in log.read_text().splitlines()]


def test_the_two_clients_example_runs_as_documented(tmp_path: Path) -> None:
    """examples/two_clients.py: one server for both, then B promoted with A's note."""
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent), "TMPDIR": str(tmp_path)}
    env = {k: v for k, v in env.items() if not k.startswith("HIGHLANDER_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "two_clients.py")],
        capture_output=True, text=True, env=env, timeout=WAIT * 4, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    pids = [line.split("'pid': ")[1].split(",")[0] for line in said if "served by" in line]
    assert len(pids) == 3 and pids[0] == pids[1] != pids[2], said
    in_flight = said.index("B: its call in flight: " + RESTARTED[1])
    assert "B: still reads {'result': 'written by A'}" in said[in_flight:]  # A's line may come last


@pytest.mark.asyncio
async def test_a_relay_whose_client_waits_on_a_stopped_holder_does_not_wait_forever(
    tmp_path: Path, processes: Processes
) -> None:
    """(5) No newcomer comes: the relay itself sees its holder stopped while its client
    waits, counts it gone, and the server it starts again ends it and takes over."""
    with stderr_shown(tmp_path):
        async with shared_pair(params(tmp_path), tmp_path, processes) as pair:
            b, holder, relay = pair.b, pair.holder, pair.relay

            async def stop() -> None:
                os.kill(holder, signal.SIGSTOP)

            await interrupted(b, stop)
            assert await b.call("who_calls") == {"pid": relay, "client": "B"}
            assert b.faults == []
            signalled = {e["peer_pid"] for e in every_event(tmp_path) if e["event"] in SIGNALS}
            assert signalled == {holder}
            claimed = events(tmp_path, relay)["claimed"]["outcome"]
            assert claimed in ("claimed_free", "claimed_stale")


@pytest.mark.asyncio
async def test_a_holder_that_has_not_started_sharing_yet_is_waited_for_not_replaced(
    tmp_path: Path, processes: Processes
) -> None:
    """Seen in (5): a relay's server arrived 13 ms after a new holder's claim, before that
    holder's server served attached sessions (HELLO ``shares: false``), and replaced it.
    A holder slow to start serving (1.5 s) gets a newcomer that asks again and attaches."""
    late = PROGRAMS / "late_sharer.py"
    first = params(tmp_path, HIGHLANDER_TEST_SERVE_AFTER="1.5")
    first = first.model_copy(update={"args": [str(late)]})
    second = first.model_copy(
        update={"env": {**(first.env or {}), "HIGHLANDER_TEST_SERVE_AFTER": "0"}}
    )
    host = Hosted()
    with stderr_shown(tmp_path):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(host.run, "A", first, tmp_path / "A.stderr")
            with anyio.fail_after(WAIT):
                while not any(e["event"] == "claimed" for e in every_event(tmp_path)):
                    await anyio.sleep(0.01)
            (holder,) = [s.pid for s in processes.spawned]
            async with client("B", second, tmp_path / "B.stderr") as b:
                assert (await b.call("who_calls"))["pid"] == holder
                with anyio.fail_after(WAIT):
                    await host.ready.wait()
                assert host.client is not None
                assert (await host.client.call("who_calls"))["pid"] == holder
            (relay,) = [s.pid for s in processes.spawned if s.pid != holder]
            assert "claimed" not in events(tmp_path, relay)
            assert events(tmp_path, relay)["attached"]["peer_pid"] == holder
            host.leave.set()


@pytest.mark.asyncio
async def test_a_relay_restarts_a_server_started_by_a_relative_path_that_changed_directory(
    tmp_path: Path, processes: Processes
) -> None:
    """``python late_sharer.py`` from its own directory, which then moves to the project:
    promotion restarts it by its absolute path (the relative one is not there any more)."""
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    server = params(tmp_path, HIGHLANDER_TEST_CHDIR=str(elsewhere))
    server = server.model_copy(update={"args": ["late_sharer.py"], "cwd": PROGRAMS})
    with stderr_shown(tmp_path):
        async with shared_pair(server, tmp_path, processes) as pair:
            await promoted(pair, processes)
