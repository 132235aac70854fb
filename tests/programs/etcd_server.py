"""A server that holds a project through ``Highlander`` on etcd, for the tests.

``etcd_server.py WITNESS [SAVE_SECONDS]``, with ``HIGHLANDER_BACKEND``,
``HIGHLANDER_PROJECT_ID``, ``HIGHLANDER_TOKEN`` and ``HIGHLANDER_HOST_ID``
in its environment.  It claims with ``Highlander.ensure_singleton`` (the
handoff is a counter it increments), then writes ``held GENERATION TOKEN
OUTCOME COUNT T`` and, while ``check_current()`` passes, ``act T`` every
20 ms (``CLOCK_BOOTTIME``, one clock for every process of the machine);
``deposed OUTCOME T`` from ``on_deposed``, then it exits; ``refused T`` when
``check_current()`` fails.  Its save takes SAVE_SECONDS (default 0),
reporting progress.  Nothing on stdout.  Ends by itself after 120 s.
"""

from __future__ import annotations

import os
import sys
import time

from highlander import Deposed, Highlander, Progress

witness = sys.argv[1]
save_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
count = 0


def note(line: str) -> None:
    with open(witness, "a", encoding="ascii") as out:
        out.write(f"{line} {time.clock_gettime(time.CLOCK_BOOTTIME):.6f}\n")


def save(progress: Progress) -> dict[str, int]:
    steps = max(1, int(save_seconds / 0.05))
    for step in range(steps):
        if save_seconds:
            time.sleep(save_seconds / steps)
        progress.advance("saving", done=step + 1, total=steps)
    return {"count": count}


def deposed() -> None:
    note(f"deposed {hl.outcome.value if hl.outcome else None}")
    os._exit(0)


hl = Highlander.ensure_singleton(app="indexer", on_save=save, on_deposed=deposed)
count = (hl.handoff or {}).get("count", 0) + 1
token = hl._backend.session.held.token if hl._backend and hasattr(hl._backend, "session") else 0
note(f"held {hl.generation} {token} {hl.outcome.value if hl.outcome else None} {count}")
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        hl.check_current()
    except Deposed:
        note("refused")
        time.sleep(0.02)
        continue
    note("act")
    time.sleep(0.02)
