"""The "notes" MCP server shared by both examples: its tools, its store, its snapshot file.

`mcp_server.py` adds Highlander to it; `mcp_server_plain.py` runs it bare
(for `highlander run`).  Only async tools touch the store, so every change
happens on the event loop's thread.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
store: dict[str, str] = {}


def snapshot_path() -> Path:
    """``.notes-snapshot.json`` in the project directory (as Highlander finds the project)."""
    project = (
        os.environ.get("HIGHLANDER_PROJECT") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    )
    return Path(project).resolve() / ".notes-snapshot.json"


def write_snapshot(notes: dict[str, str]) -> Path:
    """Write ``notes`` to the snapshot file atomically; return its path."""
    path = snapshot_path()
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(notes, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)  # a reader sees the old snapshot or the new one
    return path


def read_snapshot(path: Path | None = None) -> dict[str, str]:
    """The notes in the snapshot file, or none if there is no file."""
    path = path or snapshot_path()
    if not path.exists():
        return {}
    notes: dict[str, str] = json.loads(path.read_text(encoding="utf-8"))
    return notes


@server.tool()
async def add_note(key: str, text: str) -> str:
    """Store ``text`` under ``key``, replacing any note of that name."""
    store[key] = text
    return f"saved note {key!r}"


@server.tool()
async def get_note(key: str) -> str:
    """Return the note stored under ``key``."""
    if key not in store:
        raise ToolError(f"no note named {key!r}")
    return store[key]


@server.tool()
async def list_notes() -> dict[str, str]:
    """Return every note, by key."""
    return dict(store)


@server.tool()
async def whoami() -> int:
    """Return this server's process id."""
    return os.getpid()
