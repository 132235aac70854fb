"""The "notes" MCP server (stdio) without Highlander: a stand-in for a server you did not write.

Make it a singleton from the outside::

    highlander run --app notes -- python examples/mcp_server_plain.py

It knows nothing of Highlander. It keeps its notes in
``.notes-snapshot.json`` in the project directory: it reads the file at
start, and writes it when asked to stop with SIGTERM (then exits with
status 0) and when its client closes stdin. ``highlander run`` sends that
SIGTERM when a successor takes over, so the successor's copy starts from the
file. It writes nothing to stdout itself (that stream is the JSON-RPC wire).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
#: The notes. Only async tools touch it, so every change happens on the main
#: thread (the event loop's), where the SIGTERM handler runs too.
store: dict[str, str] = {}


def snapshot_path() -> Path:
    """``.notes-snapshot.json`` in the project directory."""
    project = (
        os.environ.get("HIGHLANDER_PROJECT") or os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    )
    return Path(project).resolve() / ".notes-snapshot.json"


def persist() -> None:
    """Write the notes to the snapshot file atomically."""
    path = snapshot_path()
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(store, handle, ensure_ascii=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def load() -> None:
    """Start from the snapshot file, if a previous run left one."""
    path = snapshot_path()
    if path.exists():
        store.update(json.loads(path.read_text(encoding="utf-8")))


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    """Persist and leave with status 0.

    ``os._exit`` because the stdio transport reads stdin on a worker thread
    that a normal shutdown would wait for until the client closes stdin.
    """
    persist()
    sys.stderr.flush()
    os._exit(0)


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
    """Restore, serve stdio until the client closes stdin or SIGTERM, persist."""
    load()
    signal.signal(signal.SIGTERM, on_sigterm)
    server.run("stdio")
    persist()


if __name__ == "__main__":
    main()
