"""Share mode end to end (issue #18): real clients of the official SDK, one server per project.

Every client is the SDK's ``stdio_client`` + ``ClientSession`` starting
``examples/shared_notes.py`` with an explicit ``env=``, as an IDE does.  With
``HIGHLANDER_SHARE=on`` the second server becomes a relay to the first: the
tests check that no client is ever disconnected, that no succession happens,
that nothing crosses between clients (same request ids, same progress
tokens, one cancelling; ``roots/list`` answered by the caller), and the
refusal paths (another configuration; share mode ``only``; a holder that
does not share).  Each of them fails without share mode: the second server
replaces the first, and the first client's next call fails.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import MCPError, types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CONNECTION_CLOSED

from tests.cli import test_mcp_e2e as e2e
from tests.cli.test_mcp_e2e import Processes, events, processes, server_env
from tests.support.paths import EXAMPLES
from tests.support.proctools import WAIT

__all__ = ["processes"]  # the fixture, shared with test_mcp_e2e

SERVER = EXAMPLES / "shared_notes.py"
CALLS = 50
#: How far one client may run ahead of the other.
PACE = 3


def params(tmp_path: Path, **env: str) -> StdioServerParameters:
    """Start the shared notes server as an IDE would, share mode on unless ``env`` says."""
    return StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER)],
        env={**server_env(tmp_path), "HIGHLANDER_SHARE": "on", **env},
        cwd=tmp_path / "project",
    )


@dataclass
class Client(e2e.Client):
    """One connected client, named, and what it saw."""

    name: str = ""

    async def call(self, tool: str, **arguments: Any) -> Any:
        """``tool``'s structured result, unwrapped (bounded: a hang guard)."""
        with anyio.fail_after(WAIT):
            return await super().call(tool, **arguments)


@asynccontextmanager
async def client(
    name: str, server: StdioServerParameters, errlog: Path, *, modern: bool = False
) -> AsyncIterator[Client]:
    """A client named ``name`` whose roots are ``file:///<name>``.

    ``modern``: it opens with ``server/discover`` (2026-07-28, no handshake)
    instead of ``initialize`` (2025-11-25).
    """
    faults: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            faults.append(message)

    async def roots(_: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{name}")])

    with open(errlog, "a", encoding="utf-8") as stderr:
        async with (
            stdio_client(server, errlog=stderr) as (read, write),
            ClientSession(
                read, write, message_handler=on_message, list_roots_callback=roots,
                client_info=types.Implementation(name=name, version="1"),
            ) as session,
        ):  # fmt: skip
            with anyio.fail_after(WAIT):
                await (session.discover() if modern else session.initialize())
            yield Client(session, faults, name)


def _innermost(exc: BaseException) -> BaseException:
    """The one exception inside nested exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def show_stderr(tmp_path: Path) -> None:
    for path in sorted(tmp_path.glob("*.stderr")):
        print(f"--- {path.name}\n{path.read_text()}")


@contextmanager
def stderr_shown(tmp_path: Path) -> Iterator[None]:
    """On a failure inside, print every server's stderr (their events, their tracebacks)."""
    try:
        yield
    except BaseException:
        show_stderr(tmp_path)
        raise


@dataclass
class Respawning:
    """A client that starts its server again when the connection closes (VS Code, Claude Code)."""

    name: str
    pids: set[int] = field(default_factory=set)
    disconnects: int = 0
    calls: int = 0
    #: Its client has closed (and its server ended: ``stdio_client`` waits for it).
    left: bool = False

    async def run(
        self,
        server: StdioServerParameters,
        tmp_path: Path,
        started: anyio.Event,
        everyone: list[Respawning],
    ) -> None:
        """Make :data:`CALLS` calls, reconnecting on a close; stay until everyone made theirs."""
        while self.calls < CALLS:
            try:
                async with client(self.name, server, tmp_path / f"{self.name}.stderr") as c:
                    started.set()
                    while self.calls < CALLS:
                        await self._keep_pace(everyone)
                        key = f"{self.name}-{self.calls}"
                        await c.call("add_note", key=key, text="x")
                        self.pids.add((await c.call("who_calls"))["pid"])
                        self.calls += 1
                        await anyio.sleep(0.01)
                    with anyio.fail_after(WAIT * 4):  # a client leaving would end the test
                        while any(other.calls < CALLS for other in everyone):
                            await anyio.sleep(0.05)
                        # The first client's server holds, so it leaves last: a holder
                        # whose own client leaves first hands the project to a relay
                        # still attached (share mode's promotion), which CI once caught
                        # in this teardown, a succession these tests do not look at.
                        while self is everyone[0] and not all(o.left for o in everyone[1:]):
                            await anyio.sleep(0.05)
                    assert c.faults == []
            except BaseException as exc:  # the SDK's task groups wrap the close
                inner = _innermost(exc)
                if not (isinstance(inner, MCPError) and inner.error.code == CONNECTION_CLOSED):
                    raise
                self.disconnects += 1
                assert self.disconnects < 10, "a restart loop"
        self.left = True

    async def _keep_pace(self, everyone: list[Respawning]) -> None:
        """Stay within :data:`PACE` calls of the slowest client: the calls interleave."""
        with anyio.fail_after(WAIT * 4):
            while self.calls - min(other.calls for other in everyone) > PACE:
                await anyio.sleep(0.02)


@pytest.mark.asyncio
async def test_two_respawning_clients_share_one_server(
    tmp_path: Path, processes: Processes
) -> None:
    """(1) 50 calls each, the second client started while the first works: nobody disconnects."""
    server = params(tmp_path)
    a, b = Respawning("A"), Respawning("B")
    try:
        async with anyio.create_task_group() as tasks:
            first, second = anyio.Event(), anyio.Event()
            tasks.start_soon(a.run, server, tmp_path, first, [a, b])
            with anyio.fail_after(WAIT):
                await first.wait()
            tasks.start_soon(b.run, server, tmp_path, second, [a, b])
    except BaseException:
        show_stderr(tmp_path)
        raise
    assert (a.calls, b.calls) == (CALLS, CALLS)
    assert (a.disconnects, b.disconnects) == (0, 0)
    assert len(a.pids | b.pids) == 1, (a.pids, b.pids)  # one server served every call
    holder = next(iter(a.pids))
    relays = [s.pid for s in processes.spawned if s.pid != holder]
    assert len(relays) == 1
    assert events(tmp_path, relays[0])["attached"]["peer_pid"] == holder
    assert "claimed" not in events(tmp_path, relays[0])  # no succession, ever
    assert "relinquished" not in events(tmp_path, holder)


@pytest.mark.asyncio
async def test_same_ids_and_progress_tokens_and_a_cancel_do_not_cross(tmp_path: Path) -> None:
    """(2) Both sessions use ids 0, 1, ... and the same progress tokens; B cancels its call."""
    server = params(tmp_path)
    progress: dict[str, list[float]] = {"A": [], "B": []}
    try:
        async with (
            client("A", server, tmp_path / "A.stderr") as a,
            client("B", server, tmp_path / "B.stderr") as b,
        ):
            b_cancel = anyio.CancelScope()

            async def on_progress(name: str, value: float) -> None:
                progress[name].append(value)
                if name == "B" and value >= 3:
                    b_cancel.cancel()

            async def count(c: Client, steps: int) -> Any:
                async def report(value: float, total: float | None, message: str | None) -> None:
                    await on_progress(c.name, value)

                with anyio.fail_after(WAIT):
                    return await c.session.call_tool(
                        "count_to", {"steps": steps}, progress_callback=report
                    )

            results: dict[str, Any] = {}

            async def run_a() -> None:
                results["A"] = await count(a, 20)

            async def run_b() -> None:
                with b_cancel:
                    results["B"] = await count(b, 20)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run_a)
                tasks.start_soon(run_b)
            assert "B" not in results  # cancelled
            assert results["A"].structured_content == {"result": 20}
            assert progress["A"] == [float(n) for n in range(1, 21)]  # every one, only its own
            assert progress["B"][:3] == [1.0, 2.0, 3.0] and len(progress["B"]) < 20
            # Both sessions go on: B's cancel ended B's call only.
            assert await b.call("count_to", steps=2) == 2
            assert await a.call("count_to", steps=1) == 1
    except BaseException:
        show_stderr(tmp_path)
        raise


@pytest.mark.asyncio
async def test_a_request_to_the_client_reaches_the_caller(tmp_path: Path) -> None:
    """(7) ``roots/list`` from a tool goes to the client that called the tool."""
    server = params(tmp_path)
    async with (
        client("A", server, tmp_path / "A.stderr") as a,
        client("B", server, tmp_path / "B.stderr") as b,
    ):
        got: dict[str, list[Any]] = {"A": [], "B": []}

        async def ask(c: Client) -> None:
            for _ in range(10):
                got[c.name].append(await c.call("my_roots"))

        async with anyio.create_task_group() as tasks:  # interleaved: both ask at once
            tasks.start_soon(ask, a)
            tasks.start_soon(ask, b)
        assert got == {"A": [["file:///A"]] * 10, "B": [["file:///B"]] * 10}
        who_a, who_b = await a.call("who_calls"), await b.call("who_calls")
        assert who_a["pid"] == who_b["pid"]
        assert (who_a["client"], who_b["client"]) == ("A", "B")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("first_env", "second_env", "reason"),
    [
        ({}, {"API_KEY": "another client's"}, "fingerprint"),
        ({"HIGHLANDER_SHARE": "off"}, {}, "no_share"),
    ],
    ids=["fingerprint-differs", "holder-does-not-share"],
)
async def test_what_cannot_share_succeeds_with_the_reason_logged(
    tmp_path: Path,
    processes: Processes,
    first_env: dict[str, str],
    second_env: dict[str, str],
    reason: str,
) -> None:
    """(8) Another configuration, or a holder that does not share: today's succession."""
    async with client("A", params(tmp_path, **first_env), tmp_path / "A.stderr") as a:
        holder = (await a.call("who_calls"))["pid"]
        await a.call("add_note", key="k", text="from A")
        async with client("B", params(tmp_path, **second_env), tmp_path / "B.stderr") as b:
            successor = (await b.call("who_calls"))["pid"]
            assert successor != holder
            assert await b.call("get_note", key="k") == "from A"  # the handoff
            declined = events(tmp_path, successor)["share_declined"]
            assert declined["reason"] == reason, declined
            assert events(tmp_path, successor)["claimed"]["outcome"] == "succeeded"
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as closed:
                await a.session.call_tool("who_calls", {})
            assert closed.value.error.code == CONNECTION_CLOSED


@pytest.mark.asyncio
async def test_share_only_refuses_to_replace_a_holder_it_cannot_share(
    tmp_path: Path, processes: Processes
) -> None:
    """(8) ``HIGHLANDER_SHARE=only`` and another configuration: the newcomer exits, A keeps on."""
    async with client("A", params(tmp_path), tmp_path / "A.stderr") as a:
        holder = (await a.call("who_calls"))["pid"]
        refused = params(tmp_path, HIGHLANDER_SHARE="only", API_KEY="another client's")
        try:
            async with client("B", refused, tmp_path / "B.stderr"):
                pytest.fail("B's server answered initialize: it should have refused to start")
        except BaseException as failed:  # the SDK's task groups wrap it
            closed = _innermost(failed)
        assert isinstance(closed, MCPError) and closed.error.code == CONNECTION_CLOSED, closed
        (b_spawned,) = [s for s in processes.spawned if s.pid != holder]
        with anyio.fail_after(WAIT):
            while b_spawned.process.returncode is None:
                await anyio.sleep(0.01)
        assert b_spawned.process.returncode == 1
        assert "HIGHLANDER_SHARE=on" in (tmp_path / "B.stderr").read_text()
        assert (await a.call("who_calls"))["pid"] == holder  # never replaced
