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

import os
import signal
import sys
from types import FrameType

from notes import read_snapshot, server, store, write_snapshot


def persist() -> None:
    """Write the notes to the snapshot file."""
    write_snapshot(dict(store))


def load() -> None:
    """Start from the snapshot file, if a previous run left one."""
    store.update(read_snapshot())


def on_sigterm(_signum: int, _frame: FrameType | None) -> None:
    """Persist and leave with status 0.

    ``os._exit`` because the stdio transport reads stdin on a worker thread
    that a normal shutdown would wait for until the client closes stdin.
    """
    persist()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    """Restore, serve stdio until the client closes stdin or SIGTERM, persist."""
    load()
    signal.signal(signal.SIGTERM, on_sigterm)
    server.run("stdio")
    persist()


if __name__ == "__main__":
    main()
