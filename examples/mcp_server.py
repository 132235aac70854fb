"""A "notes" MCP server (stdio) that runs once per project, thanks to Highlander.

An MCP client starts it and speaks JSON-RPC over its stdin and stdout::

    HIGHLANDER_TOKEN=... python examples/mcp_server.py

It writes nothing to stdout itself (that stream is the JSON-RPC wire). When
a second copy starts for the same project (another IDE window, a restarted
agent), the running one saves its notes in ``save``, hands them over and
exits with status 0; the new one starts with them from ``hl.handoff``.
The tools live in ``notes.py``; the three Highlander lines are in ``main``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from notes import read_snapshot, server, store, write_snapshot

from highlander import Highlander, Progress

#: A handoff travels in one signed frame of at most 64 KiB of JSON; past this
#: size only the snapshot's path is handed over and the successor reads the file.
HANDOFF_LIMIT = 60 * 1024


def save(progress: Progress) -> dict[str, Any]:
    """Highlander's save hook: runs here when a successor asks; returns the handoff."""
    notes = dict(store)  # one copy: the tools keep running on the event loop
    progress.advance(f"copied {len(notes)} notes")
    path = write_snapshot(notes)
    progress.advance(f"saved {path}")
    handoff: dict[str, Any] = {"notes": notes, "snapshot": str(path)}
    if len(json.dumps(handoff, ensure_ascii=False).encode()) > HANDOFF_LIMIT:
        handoff = {"snapshot": str(path)}
    progress.advance("handoff ready")
    return handoff


def restore(handoff: dict[str, Any] | None) -> None:
    """Take the predecessor's notes: from the handoff, or from the snapshot it names."""
    if not handoff:
        return
    notes = handoff.get("notes")
    if notes is None and handoff.get("snapshot"):
        notes = read_snapshot(Path(handoff["snapshot"]))
    store.update(notes or {})


def main() -> None:
    """Hold the project (taking over from a running copy), then serve stdio."""
    hl = Highlander.ensure_singleton(app="notes", on_save=save)  # before reading stdin
    restore(hl.handoff)
    server.run("stdio")


if __name__ == "__main__":
    main()
