"""An indexer that must run once per repository, whichever machine it starts on.

Run it on two "hosts" (two shells with different ``HIGHLANDER_HOST_ID``, or
two machines) with the same ``HIGHLANDER_BACKEND``, ``HIGHLANDER_PROJECT_ID``
and ``HIGHLANDER_TOKEN``: the second takes the project over from the first
through etcd, with the index the first built (the handoff), and the first
leaves.  Every few seconds it indexes one more "file" and writes a summary
to etcd, guarded by its fencing token, so a holder that was replaced cannot
overwrite its successor's summary.  Nothing goes to stdout but the lines
that say what it does (it is not an MCP server).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.request

from highlander import Deposed, Highlander, Progress

HOST = os.environ.get("HIGHLANDER_HOST_ID", "this host")
index: dict[str, int] = {}


def say(line: str) -> None:
    """What the indexer does, for the person watching the shell."""
    print(f"[{HOST}] {line}", flush=True)


def save(progress: Progress) -> dict[str, object]:
    """A successor asked: hand the index over (report progress as we go)."""
    progress.advance("packing the index", done=len(index), total=len(index))
    say(f"handing over an index of {len(index)} files")
    return {"index": index, "from": HOST}


def deposed() -> None:
    """The successor has the index now: leave."""
    say("deposed: the project is served elsewhere now; leaving")
    os._exit(0)


def guarded_summary(hl: Highlander) -> bool:
    """Write the summary only while this reign is current (etcd compares the token)."""
    key, token = hl.fencing
    backend = os.environ["HIGHLANDER_BACKEND"].split("://", 1)[1].split(",")[0]

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    summary = json.dumps({"host": HOST, "files": len(index), "generation": hl.generation})
    body = {
        "compare": [{"key": b64(key or ""), "target": "MOD", "result": "EQUAL",
                     "mod_revision": str(token)}],
        "success": [{"request_put": {"key": b64("/example/indexer/summary"),
                                     "value": b64(summary)}}],
    }  # fmt: skip
    request = urllib.request.Request(
        f"http://{backend}/v3/kv/txn", json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - http:// only
        return bool(json.loads(answer.read()).get("succeeded"))


def main() -> None:
    """Hold the project, then index until deposed."""
    hl = Highlander.ensure_singleton(app="indexer", on_save=save, on_deposed=deposed)
    index.update((hl.handoff or {}).get("index", {}))
    came_from = (hl.handoff or {}).get("from")
    say(
        f"holding generation {hl.generation} ({hl.outcome.value if hl.outcome else ''})"
        + (f", with {len(index)} files indexed on {came_from}" if came_from else "")
    )
    deadline = time.monotonic() + float(os.environ.get("INDEXER_SECONDS", "3600"))
    while time.monotonic() < deadline:
        try:
            hl.check_current()
        except Deposed as exc:  # a successor holds: on_deposed may not have run yet
            say(f"deposed: {exc}; leaving")
            os._exit(0)
        index[f"file-{len(index)}.py"] = len(index)
        written = guarded_summary(hl)
        say(f"indexed {len(index)} files; summary {'written' if written else 'refused'}")
        time.sleep(float(os.environ.get("INDEXER_PERIOD", "2")))


if __name__ == "__main__":
    main()
