"""Two MCP clients, one server: share mode seen from the clients (docs/mcp.md).

Run it (it needs the ``mcp`` extra)::

    .venv/bin/python examples/two_clients.py

It starts ``shared_notes.py`` from two clients of the official SDK, the way
two IDEs would (same command, same ``env`` with ``HIGHLANDER_SHARE=on``), in a
throw-away project and runtime directory.  Both are served by one process;
a note one writes the other reads.  Then the first client leaves while the
second has a call running: that call gets one "server restarted" error, and
the second client goes on, in the same session, with the note, served by its
own process now (promoted).  What it sees is printed; the servers' logs go
to ``<tmp>/*.stderr``.
"""

from __future__ import annotations

import os
import secrets
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import MCPError, types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent


def server(base: Path) -> StdioServerParameters:
    """What both clients' MCP configurations say."""
    project = base / "project"
    project.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", str(base)),
        "HIGHLANDER_TOKEN": secrets.token_hex(16),
        "HIGHLANDER_SHARE": "on",
        "HIGHLANDER_PROJECT": str(project),
        "HIGHLANDER_RUNTIME_DIR": str(base / "rt"),
        "PYTHONPATH": str(HERE.parent),  # this checkout's highlander
    }
    return StdioServerParameters(
        command=sys.executable, args=[str(HERE / "shared_notes.py")], env=env, cwd=project
    )


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    """``tool``'s structured result (bounded)."""
    with anyio.fail_after(30):
        result = await session.call_tool(tool, arguments)
    return result.structured_content


@asynccontextmanager
async def connected(name: str, params: StdioServerParameters, base: Path) -> AsyncIterator[Any]:
    """A client named ``name`` that started its server (stderr to ``<base>/<name>.stderr``)."""
    info = types.Implementation(name=name, version="1")
    with open(base / f"{name}.stderr", "w", encoding="utf-8") as err:
        async with (
            stdio_client(params, errlog=err) as (r, w),
            ClientSession(r, w, client_info=info) as session,
        ):
            await session.initialize()
            print(f"{name}: served by", await call(session, "who_calls"))
            yield session


async def first_client(params: StdioServerParameters, base: Path, ready: Any, leave: Any) -> None:
    """Client A: the first, so its server holds; it writes a note, then leaves when told."""
    async with connected("A", params, base) as a:
        await call(a, "add_note", key="plan", text="written by A")
        ready.set()
        await leave.wait()
    print("A: left (its server hands over to B's)")


async def main() -> None:
    """A, then B beside it; A leaves during B's call; B goes on."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        params = server(base)
        ready, leave = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first_client, params, base, ready, leave)
            await ready.wait()
            async with connected("B", params, base) as b:
                print("B: reads", await call(b, "get_note", key="plan"))
                running = anyio.Event()

                async def progress(value: float, total: float | None, text: str | None) -> None:
                    running.set()

                async def slow() -> None:
                    try:
                        await b.call_tool("count_to", {"steps": 60}, progress_callback=progress)
                    except MCPError as exc:
                        print("B: its call in flight:", exc.error.message)

                async with anyio.create_task_group() as calls:
                    calls.start_soon(slow)
                    await running.wait()
                    leave.set()  # A leaves while B's call runs
                print("B: served by", await call(b, "who_calls"))
                print("B: still reads", await call(b, "get_note", key="plan"))


if __name__ == "__main__":
    anyio.run(main)
