"""Part 2 of `make demo`: a real succession between two server processes."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WAIT = 30.0


def _start(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "server.py")],
        env={**env, "DEMO_READY_FD": str(write_end)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_end,),
    )
    os.close(write_end)
    return proc, read_end


def _ready(fd: int) -> dict[str, Any]:
    readable, _, _ = select.select([fd], [], [], WAIT)
    line = os.read(fd, 65536) if readable else b""
    if not line:
        raise SystemExit("demo: a server did not start; see its stderr above")
    report: dict[str, Any] = json.loads(line.splitlines()[0])
    return report


def run() -> int:
    with tempfile.TemporaryDirectory(prefix="highlander-demo-") as tmp:
        project = Path(tmp) / "shop"
        project.mkdir()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HIGHLANDER_")},
            "HIGHLANDER_TOKEN": "demo-token-" + os.urandom(8).hex(),
            "HIGHLANDER_PROJECT": str(project),
            "HIGHLANDER_RUNTIME_DIR": str(Path(tmp) / "run"),
            "DEMO_DIR": tmp,
        }
        procs: list[subprocess.Popen[bytes]] = []
        try:
            first, first_fd = _start(env)
            procs.append(first)
            a = _ready(first_fd)
            print(f"server A (pid {a['pid']}) holds {project.name}: generation {a['generation']}")
            second, second_fd = _start(env)
            procs.append(second)
            b = _ready(second_fd)
            print(f"server B (pid {b['pid']}) started for the same project and took over\n")
            status = first.wait(timeout=WAIT)
            _timeline(Path(env["HIGHLANDER_RUNTIME_DIR"]), {a["pid"]: "A", b["pid"]: "B"})
            print(f"\nhandoff B received: {b['handoff']}")
            print(f"generation {a['generation']} -> {b['generation']}")
            alive = [p.pid for p in procs if p.poll() is None]
            out_a = first.stdout.read() if first.stdout else b""
            print(f"A exited with status {status}, having written {len(out_a)} bytes to stdout")
            print(f"processes holding the project: {alive}")
            print("\n$ highlander status --app demo-indexer")
            status_cmd = [sys.executable, "-m", "highlander.cli", "status", "--app", "demo-indexer"]
            shown = subprocess.run(
                status_cmd, check=False, env=env, capture_output=True, text=True, timeout=WAIT
            )
            print(shown.stdout.rstrip() or shown.stderr.rstrip())
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=WAIT)
            out = out_a + (second.stdout.read() if second.stdout else b"")
            return 0 if status == 0 and alive == [b["pid"]] and not out else 1
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=WAIT)
                for stream in (proc.stdout, proc.stderr):
                    if stream:
                        stream.close()


def _timeline(run_dir: Path, names: dict[int, str]) -> None:
    events: list[dict[str, Any]] = []
    for log in run_dir.glob("*.events.jsonl"):
        events += [json.loads(line) for line in log.read_text().splitlines()]
    events.sort(key=lambda e: e["ts"])
    start = next(e["ts"] for e in events if e["event"] == "hello")
    print(f"{'ms':>8}  who  {'event':<14} detail")
    for event in events:
        if event["ts"] < start:
            continue
        who = names.get(event["pid"], "?")
        detail = _detail(event)
        print(f"{(event['ts'] - start) * 1000:8.1f}  {who:<3}  {event['event']:<14} {detail}")


def _detail(event: dict[str, Any]) -> str:
    keys = ("generation", "counter", "note", "outcome", "duration_ms", "intent")
    return ", ".join(f"{k}={event[k]}" for k in keys if event.get(k) not in (None, ""))


if __name__ == "__main__":
    time.sleep(0)
    sys.exit(run())
