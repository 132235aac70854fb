"""End to end with the official MCP SDK: ``highlander run`` around servers that are grandchildren.

A client's server is often not the wrapper's child: ``npx`` runs ``npm
exec``, which runs ``sh``, which runs ``node``.  Client A starts such a tree
through ``highlander run`` and writes something; client B starts a second
one for the same project, which takes over.  Then every process of A's tree
has ended (the grandchild that served first of all), A's wrapper exited 0,
and B reads what A wrote through its own server.

Once with a Python launcher around examples/mcp_server_plain.py, and once,
where ``npx`` and a cached ``@modelcontextprotocol/server-memory`` are
available, with the real Node server (skipped, with the reason, elsewhere).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters

from tests.cli.test_mcp_e2e import PLAIN_SERVER, Client, Processes, connect, events, server_env
from tests.cli.test_mcp_e2e import processes as processes  # noqa: PLC0414 - the fixture, used here too
from tests.support.paths import PROGRAMS
from tests.support.proctools import WAIT

TREE = PROGRAMS / "tree.py"
MEMORY = "@modelcontextprotocol/server-memory"
#: npm's cache, found before the suite points HOME at a private directory.
NPM_CACHE = os.environ.get("NPM_CONFIG_CACHE") or os.path.expanduser("~/.npm")


def wrapped(app: str, *command: str) -> list[str]:
    return [sys.executable, "-m", "highlander.cli", "run", "--app", app, "--", *command]


def tree_of(pid: int) -> list[int]:
    """Every live process below ``pid``, from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


async def check_tree_takeover(
    tmp_path: Path,
    params: StdioServerParameters,
    processes: Processes,
    write: Callable[[Client], Awaitable[None]],
    read: Callable[[Client], Awaitable[None]],
) -> None:
    """A writes through its tree; B takes over; A's whole tree is gone and B reads A's data."""
    try:
        async with connect(params, tmp_path / "a.stderr") as a:
            with anyio.fail_after(WAIT):
                await write(a)
            (a_wrapper,) = processes.spawned
            a_tree = tree_of(a_wrapper.pid)
            for pid in a_tree:
                processes.watch(pid)
            async with connect(params, tmp_path / "b.stderr") as b:
                for pid in [a_wrapper.pid, *a_tree]:
                    await processes.gone(pid)
                with anyio.fail_after(WAIT):
                    await read(b)
                    while a_wrapper.process.returncode is None:  # reaped by the loop's watcher
                        await anyio.sleep(0.01)
                assert a_wrapper.process.returncode == 0, (tmp_path / "a.stderr").read_text()
                b_wrapper = processes.spawned[1]
                b_tree = tree_of(b_wrapper.pid)
                assert len(b_tree) >= 2, "B's server runs below a launcher"
                for pid in b_tree:
                    processes.watch(pid)
                alive = {pid for pid in processes.pidfds if processes.alive(pid)}
                assert alive == {b_wrapper.pid, *b_tree}, "only B's tree is left"
                assert events(tmp_path, b_wrapper.pid)["claimed"]["outcome"] == "succeeded"
                assert a.faults == [] and b.faults == []
    except BaseException:
        for name in ("a.stderr", "b.stderr"):  # shown by pytest with the failure
            path = tmp_path / name
            print(f"--- {name}\n{path.read_text() if path.exists() else '(none)'}")
        raise


@pytest.mark.asyncio
async def test_run_ends_a_python_server_below_a_launcher(
    tmp_path: Path, processes: Processes
) -> None:
    """``highlander run -- python tree.py launcher python mcp_server_plain.py``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=wrapped(
            "notes", sys.executable, str(TREE), "launcher", sys.executable, str(PLAIN_SERVER)
        )[1:],
        env=server_env(tmp_path),
        cwd=tmp_path / "project",
    )

    async def write(client: Client) -> None:
        assert await client.call("add_note", key="greeting", text="hello from A") == (
            "saved note 'greeting'"
        )

    async def read(client: Client) -> None:
        assert await client.call("get_note", key="greeting") == "hello from A"

    await check_tree_takeover(tmp_path, params, processes, write, read)


def memory_server_missing(env: dict[str, str]) -> str | None:
    """Why the Node memory server cannot run here, or ``None`` (it ran and ended on EOF)."""
    npx = shutil.which("npx")
    if npx is None:
        return "npx is not installed"
    try:
        probe = subprocess.run(
            [npx, "--offline", "-y", MEMORY],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=WAIT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"npx --offline {MEMORY} did not end on end-of-file within {WAIT} s"
    if probe.returncode != 0:
        lines = probe.stderr.decode(errors="replace").strip().splitlines()
        return (
            f"{MEMORY} is not in the npm cache {NPM_CACHE} ({lines[0] if lines else 'no output'}); "
            f"`npx -y {MEMORY}` once, with network, caches it (the tests use no network)"
        )
    return None


@pytest.mark.asyncio
async def test_run_ends_the_node_memory_server_below_npx(
    tmp_path: Path, processes: Processes
) -> None:
    """``highlander run -- npx --offline -y @modelcontextprotocol/server-memory``."""
    env = {
        **server_env(tmp_path),
        "NPM_CONFIG_CACHE": NPM_CACHE,
        "MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl"),
    }
    reason = memory_server_missing(env)
    if reason is not None:
        pytest.skip(reason)
    params = StdioServerParameters(
        command=sys.executable,
        args=wrapped("memory", "npx", "--offline", "-y", MEMORY)[1:],
        env=env,
        cwd=tmp_path / "project",
    )
    entity: dict[str, Any] = {"name": "A", "entityType": "client", "observations": ["from A"]}

    async def write(client: Client) -> None:
        result = await client.session.call_tool("create_entities", {"entities": [entity]})
        assert not result.is_error, result.content

    async def read(client: Client) -> None:
        result = await client.session.call_tool("read_graph", {})
        assert not result.is_error, result.content
        assert "from A" in str(result.content), result.content

    await check_tree_takeover(tmp_path, params, processes, write, read)
