"""A "notes" MCP server (stdio) that runs once per project, thanks to Highlander.

An MCP client starts it and speaks JSON-RPC over its stdin and stdout::

    HIGHLANDER_TOKEN=... python examples/mcp_server.py

It writes nothing to stdout itself (that stream is the JSON-RPC wire). When
a second copy starts for the same project (another IDE window, a restarted
agent), the running one saves its notes in ``save``, hands them over and
exits with status 0; the new one starts with them from ``hl.handoff``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from highlander import Highlander, Progress

#: A handoff travels in one signed frame of at most 64 KiB of JSON; past this
#: size only the snapshot's path is handed over and the successor reads the file.
HANDOFF_LIMIT = 60 * 1024

server = MCPServer("notes")
#: The notes. Only async tools touch it, so every change happens on the event
#: loop's thread; ``save`` (on Highlander's thread) takes one atomic copy.
store: dict[str, str] = {}


def snapshot_path() -> Path:
    """``.notes-snapshot.json`` in the project directory (as Highlander finds the project)."""
    project = (
        os.environ.get("HIGHLANDER_PROJECT") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    )
    return Path(project).resolve() / ".notes-snapshot.json"


def save(progress: Progress) -> dict[str, Any]:
    """Highlander's save hook: runs here when a successor asks; returns the handoff."""
    notes = dict(store)
    progress.advance(f"copied {len(notes)} notes")
    path = snapshot_path()
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(notes, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    progress.advance(f"wrote {temporary.name}")
    os.replace(temporary, path)  # atomic: a reader sees the old snapshot or the new one
    progress.advance(f"saved {path}")
    handoff: dict[str, Any] = {"notes": notes, "snapshot": str(path)}
    if len(json.dumps(handoff, ensure_ascii=False).encode()) > HANDOFF_LIMIT:
        handoff = {"snapshot": str(path)}
    return handoff


def restore(handoff: dict[str, Any] | None) -> None:
    """Take the predecessor's notes: from the handoff, or from the snapshot it names."""
    if not handoff:
        return
    notes = handoff.get("notes")
    if notes is None and handoff.get("snapshot"):
        notes = json.loads(Path(handoff["snapshot"]).read_text(encoding="utf-8"))
    store.update(notes or {})


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


def main() -> None:
    """Hold the project (taking over from a running copy), then serve stdio."""
    hl = Highlander.ensure_singleton(app="notes", on_save=save)  # before reading stdin
    restore(hl.handoff)
    server.run("stdio")


if __name__ == "__main__":
    main()
