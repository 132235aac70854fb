"""The "notes" MCP server, shared: every client of a project talks to one server process.

Start it from two MCP clients with the same configuration and
``HIGHLANDER_SHARE=on`` in its ``env``::

    HIGHLANDER_TOKEN=... HIGHLANDER_SHARE=on python examples/shared_notes.py

The first copy serves; the second becomes a small relay between its client
and that one server (it does not replace it), so both clients see the same
notes and neither is disconnected.  A newer build (this file edited, or
``NOTES_BUILD``, passed as ``build=``) replaces the server with today's
handover, and every relay carries its client over to the new server.  Besides the
notes tools it has three that show what is per client: ``who_calls`` (the
server's pid and the client's name), ``count_to`` (progress, per caller) and
``my_roots`` (a ``roots/list`` request to the calling client).
"""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import Context
from mcp_server import restore, save
from notes import server

import highlander.mcp
from highlander import Highlander


@server.tool()
async def who_calls(ctx: Context) -> dict[str, object]:
    """The server's pid and the calling client's name (per session)."""
    params = ctx.session.client_params
    name = params.client_info.name if params is not None else None
    return {"pid": os.getpid(), "client": name}


@server.tool()
async def count_to(steps: int, ctx: Context) -> int:
    """Count to ``steps``, one progress report a step, 0.05 s apart."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.05)
    return steps


@server.tool()
async def my_roots(ctx: Context) -> list[str]:
    """The roots the calling client says it has (a request back to that client)."""
    result = await ctx.session.list_roots()
    return [str(root.uri) for root in result.roots]


def main() -> None:
    """Hold the project, or attach to its server; then serve every client."""
    hl = Highlander.ensure_singleton(app="notes", on_save=save, build=os.environ.get("NOTES_BUILD"))
    restore(hl.handoff)
    highlander.mcp.run(server, hl)


if __name__ == "__main__":
    main()
