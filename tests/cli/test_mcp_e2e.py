"""End to end with the official MCP SDK: real clients start real stdio servers; one takes over.

Each client is the SDK's ``stdio_client`` + ``ClientSession``, spawning the
server with an explicit ``env=`` as real MCP clients do. Client A writes a
note; client B starts a second server for the same project, which takes over
with A's notes. A's session ends with a closed connection (never a garbled
line), A's server exits with status 0, and only B's server is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp.client.stdio
import pytest
from mcp import MCPError
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CONNECTION_CLOSED

from tests.support.paths import EXAMPLES
from tests.support.proctools import TOKEN, WAIT

SERVER = EXAMPLES / "mcp_server.py"
PLAIN_SERVER = EXAMPLES / "mcp_server_plain.py"


@dataclass
class Spawned:
    """One process the SDK's ``stdio_client`` started."""

    process: Any  # anyio.abc.Process: returncode is the exit status once reaped

    @property
    def pid(self) -> int:
        return int(self.process.pid)


@dataclass
class Processes:
    """Every process a test started or learned of; all ended by pidfd in teardown."""

    spawned: list[Spawned] = field(default_factory=list)
    pidfds: dict[int, int] = field(default_factory=dict)

    def watch(self, pid: int) -> int:
        """Open (once) a pidfd on a live ``pid``: immune to pid reuse from now on."""
        if pid not in self.pidfds:
            self.pidfds[pid] = os.pidfd_open(pid)
        return self.pidfds[pid]

    def alive(self, pid: int) -> bool:
        """Whether the process is still running (its pidfd is not readable yet)."""
        if pid not in self.pidfds:  # a spawned process that ended before it could be watched
            return False
        readable, _, _ = select.select([self.pidfds[pid]], [], [], 0)
        return not readable

    async def gone(self, pid: int) -> None:
        """Wait (on the pidfd, bounded) until the process has ended."""
        with anyio.fail_after(WAIT):
            await anyio.wait_readable(self.pidfds[pid])

    def cleanup(self) -> None:
        for pidfd in self.pidfds.values():
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Processes]:
    """Record what ``stdio_client`` spawns (the SDK does not expose its process)."""
    found = Processes()
    spawn = mcp.client.stdio._create_platform_compatible_process

    async def recording_spawn(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        found.spawned.append(Spawned(process))
        with contextlib.suppress(ProcessLookupError):  # ended and reaped already: nothing to end
            found.watch(process.pid)
        return process

    monkeypatch.setattr(mcp.client.stdio, "_create_platform_compatible_process", recording_spawn)
    try:
        yield found
    finally:
        found.cleanup()


@dataclass
class Client:
    """A connected client session and the transport faults it was handed."""

    session: ClientSession
    faults: list[Exception]

    async def call(self, tool: str, **arguments: Any) -> Any:
        """Call ``tool``; return its structured result (unwrapped for scalars)."""
        result = await self.session.call_tool(tool, arguments)
        assert not result.is_error, result.content
        data = result.structured_content
        assert data is not None
        return data["result"] if set(data) == {"result"} else data


@asynccontextmanager
async def connect(params: StdioServerParameters, errlog: Path) -> AsyncIterator[Client]:
    """Spawn and initialize a server like an MCP client does; collect stream faults.

    A line on the server's stdout that is not JSON-RPC reaches ``message_handler``
    as an exception: the tests assert none ever arrives.
    """
    faults: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            faults.append(message)

    with open(errlog, "w", encoding="utf-8") as stderr:
        async with (
            stdio_client(params, errlog=stderr) as (read, write),
            ClientSession(read, write, message_handler=on_message) as session,
        ):
            with anyio.fail_after(WAIT):
                await session.initialize()
            yield Client(session, faults)


def server_env(tmp_path: Path) -> dict[str, str]:
    """What an IDE's MCP config passes: the token, the project, plus PATH and HOME."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    # PYTHONPATH only so that a run against a checkout (not the installed copy) tests it.
    here = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "HIGHLANDER_TOKEN": TOKEN,
        "HIGHLANDER_MODE": "auto",
        "HIGHLANDER_RUNTIME_DIR": str(tmp_path / "rt"),
        "HIGHLANDER_PROJECT": str(project),
        **here,
    }


def events(tmp_path: Path, pid: int) -> dict[str, dict[str, Any]]:
    """The last event of each kind that ``pid`` logged in the test's runtime directory."""
    found = {}
    for path in (tmp_path / "rt").glob("*.events.jsonl"):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event["pid"] == pid:
                found[event["event"]] = event
    return found


def parent_of(pid: int) -> int:
    """The parent pid, from /proc/<pid>/stat (the field after the parenthesised name)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


@dataclass
class FirstClient:
    """What client A saw, filled in by its task."""

    server_pid: int = 0
    closed: MCPError | None = None
    faults: list[Exception] = field(default_factory=list)
    ready: anyio.Event = field(default_factory=anyio.Event)
    replaced: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)


async def run_first_client(
    params: StdioServerParameters, errlog: Path, processes: Processes, seen: FirstClient
) -> None:
    """Client A: write a note, wait to be replaced, then find the connection closed.

    Its own task, so its transport is entered and left there, while B's lives on.
    """
    try:
        async with connect(params, errlog) as client:
            with anyio.fail_after(WAIT):
                assert await client.call("add_note", key="greeting", text="hello from A") == (
                    "saved note 'greeting'"
                )
                seen.server_pid = await client.call("whoami")
            processes.watch(seen.server_pid)
            seen.ready.set()
            with anyio.fail_after(WAIT):
                await seen.replaced.wait()
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as closed:
                await client.call("list_notes")
            seen.closed = closed.value
            seen.faults = client.faults
    finally:
        seen.done.set()


async def check_takeover(
    tmp_path: Path, params: StdioServerParameters, processes: Processes, *, wrapped: bool
) -> None:
    """The scenario shared by both tests; ``wrapped``: servers run under ``highlander run``."""
    try:
        await _check_takeover(tmp_path, params, processes, wrapped=wrapped)
    except BaseException:
        for name in ("a.stderr", "b.stderr"):  # shown by pytest with the failure
            path = tmp_path / name
            print(f"--- {name}\n{path.read_text() if path.exists() else '(none)'}")
        raise


async def _check_takeover(
    tmp_path: Path, params: StdioServerParameters, processes: Processes, *, wrapped: bool
) -> None:
    first = FirstClient()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_first_client, params, tmp_path / "a.stderr", processes, first)
        with anyio.fail_after(WAIT):
            await first.ready.wait()
        (a_spawned,) = processes.spawned  # A's server, or A's wrapper
        if wrapped:
            assert parent_of(first.server_pid) == a_spawned.pid
        else:
            assert first.server_pid == a_spawned.pid

        async with connect(params, tmp_path / "b.stderr") as b:
            # initialize() answered: B's server holds the project and serves.
            with anyio.fail_after(WAIT):
                b_pid = await b.call("whoami")
            processes.watch(b_pid)
            b_spawned = processes.spawned[1]
            assert b_pid != first.server_pid

            # A's server (and its wrapper) ended; only then does A call again, so that
            # call cannot race A's exit: it must find the connection closed.
            await processes.gone(first.server_pid)
            await processes.gone(a_spawned.pid)
            first.replaced.set()
            with anyio.fail_after(WAIT):
                await first.done.wait()
            assert first.closed is not None, "A's call after the takeover did not fail"
            assert first.closed.code == CONNECTION_CLOSED, first.closed
            assert first.faults == [], f"A's stdout carried non-JSON-RPC: {first.faults}"
            with anyio.fail_after(WAIT):
                while a_spawned.process.returncode is None:  # reaped by the event loop's watcher
                    await anyio.sleep(0.01)
            assert a_spawned.process.returncode == 0, (tmp_path / "a.stderr").read_text()

            # B has A's note; only B's server (and wrapper) is left.
            with anyio.fail_after(WAIT):
                assert await b.call("get_note", key="greeting") == "hello from A"
                assert await b.call("list_notes") == {"greeting": "hello from A"}
                assert await b.call("add_note", key="second", text="from B") == (
                    "saved note 'second'"
                )
            assert processes.alive(b_pid)
            assert processes.alive(b_spawned.pid)
            assert [s.pid for s in processes.spawned if processes.alive(s.pid)] == [b_spawned.pid]
            assert {pid for pid in processes.pidfds if processes.alive(pid)} == {
                b_pid,
                b_spawned.pid,
            }
            assert events(tmp_path, b_spawned.pid)["claimed"]["outcome"] == "succeeded"
            assert events(tmp_path, a_spawned.pid)["relinquished"]["outcome"] == "deposed"
            assert b.faults == []

    # B's client closed B's stdin: B's server released the project and ended with status 0
    # (this once failed now and then with SIGABRT at interpreter exit: test_log_flush.py).
    for pid in processes.pidfds:
        await processes.gone(pid)
    assert "released" in events(tmp_path, b_spawned.pid)
    assert b_spawned.process.returncode == 0, (tmp_path / "b.stderr").read_text()


@pytest.mark.asyncio
async def test_mcp_server_takes_over_with_the_notes(tmp_path: Path, processes: Processes) -> None:
    """examples/mcp_server.py: Highlander inside the server, the notes travel in the handoff."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER)],
        env=server_env(tmp_path),
        cwd=tmp_path / "project",
    )
    await check_takeover(tmp_path, params, processes, wrapped=False)
    snapshot = tmp_path / "project" / ".notes-snapshot.json"
    assert json.loads(snapshot.read_text()) == {"greeting": "hello from A"}  # A's save wrote it


@pytest.mark.asyncio
async def test_highlander_run_wraps_a_plain_mcp_server(
    tmp_path: Path, processes: Processes
) -> None:
    """``highlander run -- python examples/mcp_server_plain.py``: the notes travel in the file."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "highlander.cli", "run", "--app", "notes", "--"),
            *(sys.executable, str(PLAIN_SERVER)),
        ],
        env=server_env(tmp_path),
        cwd=tmp_path / "project",
    )
    await check_takeover(tmp_path, params, processes, wrapped=True)
    snapshot = tmp_path / "project" / ".notes-snapshot.json"
    # B's server wrote it again when its client closed stdin.
    assert json.loads(snapshot.read_text()) == {"greeting": "hello from A", "second": "from B"}
