"""The MCP Python SDK's surface share mode uses, in one place (tested with ``mcp`` 2.3).

Two parts are not public in the SDK: ``MCPServer._lowlevel_server`` (the
SDK itself reaches in, with ``TODO(Marcelo): Make lowlevel_server public``
in ``client/_memory.py``) and ``mcp.server.runner.serve_dual_era_loop``
(exported, undocumented; the SDK's own multi-session manager drives
sessions with it so the lifespan is entered once).  The ``highlander[mcp]``
extra pins the SDK range these were read and tested on.
"""

from __future__ import annotations

from typing import Any

from mcp.server.lowlevel.server import Server
from mcp.server.runner import serve_dual_era_loop
from mcp.server.stdio import stdio_server

__all__ = ["lowlevel", "serve_dual_era_loop", "stdio_server"]


def lowlevel(server: Any) -> Server[Any]:
    """The low-level ``Server`` behind ``server`` (an ``MCPServer``, or one already)."""
    if isinstance(server, Server):
        return server
    inner = getattr(server, "_lowlevel_server", None)
    if not isinstance(inner, Server):
        raise TypeError(
            f"highlander.mcp serves an MCP SDK server (mcp.server.MCPServer or "
            f"mcp.server.lowlevel.Server), not {type(server).__name__}: check that the "
            "installed mcp is within highlander[mcp]'s range"
        )
    return inner
