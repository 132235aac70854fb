"""The demo's stand-in for a per-project server: an "indexer" that hands its index over.

It holds the project through Highlander, pretends to index files, and when a
successor asks, writes its index to a snapshot in three steps (reporting
progress) and hands the snapshot's path over.  Nothing goes to stdout.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

from highlander import Highlander, Progress

index: dict[str, Any] = {"files": 0}


def save(progress: Progress) -> dict[str, Any]:
    snapshot = os.path.join(os.environ["DEMO_DIR"], f"index-{os.getpid()}.json")
    parts = ["symbols", "embeddings", "sessions"]
    with open(snapshot, "w", encoding="utf-8") as handle:
        for done, part in enumerate(parts, start=1):
            time.sleep(0.15)  # a real save takes a while; progress proves it moves
            handle.write(json.dumps({part: index["files"]}) + "\n")
            progress.advance(f"wrote {part}", done=done, total=len(parts))
    return {"snapshot": snapshot, "files": index["files"]}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # exit through atexit: release
    hl = Highlander.ensure_singleton(app="demo-indexer", on_save=save)
    inherited = hl.handoff or {}
    index["files"] = int(inherited.get("files", 0)) + 1000
    report = {"pid": os.getpid(), "generation": hl.generation, "handoff": hl.handoff}
    os.write(int(os.environ["DEMO_READY_FD"]), (json.dumps(report) + "\n").encode())
    time.sleep(float(os.environ.get("DEMO_HOLD", "30")))


if __name__ == "__main__":
    main()
