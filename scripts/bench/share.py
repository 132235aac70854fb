"""Share mode's figures (issue #18), with the official MCP client and examples/shared_notes.py.

* **Start → first answer**: a second client starts its server while a first
  client's server holds the project; the time from ``stdio_client`` entry to
  the answer of its first tool call, shared (``HIGHLANDER_SHARE=on``: the
  second server attaches) against today's succession (``off``: it takes
  over).  A fresh project per run.
* **Relay overhead per call**: the median of ``list_notes`` calls from the
  holder's own client against those from the attached client, in interleaved
  blocks (target ≤ +0.5 ms).
* **Relay RSS**: ``VmRSS`` of the relay process (target ≤ 10 MB), beside the
  server's.
* **Promotion**: the holder's own client leaves (the SDK closes its stdin,
  and kills it 2 s later); the time until the holder has handed over and
  exited (it must be within those 2 s), and until the relayed client's next
  call is answered by its promoted server.

Run: ``.venv/bin/python -m scripts.bench.share [--runs N] [--calls N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "shared_notes.py"
TOKEN = "bench-token-0123456789abcdef0123"


def params(base: Path, share: str) -> StdioServerParameters:
    project = base / "project"
    project.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": os.environ.get("HOME", str(base)),
        "HIGHLANDER_TOKEN": TOKEN,
        "HIGHLANDER_RUNTIME_DIR": str(base / "rt"),
        "HIGHLANDER_PROJECT": str(project),
        "HIGHLANDER_SHARE": share,
        "PYTHONPATH": str(ROOT),
    }
    return StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=env, cwd=project)


@asynccontextmanager
async def session(server: StdioServerParameters, errlog: Path) -> AsyncIterator[ClientSession]:
    with open(errlog, "a", encoding="utf-8") as err:
        async with stdio_client(server, errlog=err) as (r, w), ClientSession(r, w) as s:
            with anyio.fail_after(60):
                await s.initialize()
            yield s


async def call(s: ClientSession, tool: str, **arguments: Any) -> Any:
    with anyio.fail_after(60):
        result = await s.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def start_to_answer(share: str) -> float:
    """Milliseconds from the second client's start to its first tool call's answer."""
    elapsed: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = params(base, share)
        try:
            async with session(server, base / "a.err") as a:
                await call(a, "who_calls")
                started = time.perf_counter()
                async with session(server, base / "b.err") as b:
                    await call(b, "who_calls")
                    elapsed = (time.perf_counter() - started) * 1000
        except BaseException:
            if elapsed is None:
                raise
            # succession: the first client's server left under it, as it should
    assert elapsed is not None
    return elapsed


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def relay_figures(calls: int, blocks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = params(base, "on")
        async with session(server, base / "a.err") as a, session(server, base / "b.err") as b:
            holder = (await call(a, "who_calls"))["pid"]
            direct: list[float] = []
            relayed: list[float] = []
            for _ in range(blocks):
                for target, into in ((a, direct), (b, relayed)):
                    for _ in range(calls):
                        began = time.perf_counter()
                        await call(target, "list_notes")
                        into.append((time.perf_counter() - began) * 1000)
            relay = _relay_pid(holder)
            return {
                "direct_ms": statistics.median(direct),
                "relayed_ms": statistics.median(relayed),
                "relay_rss_mb": rss_kb(relay) / 1024 if relay else float("nan"),
                "server_rss_mb": rss_kb(holder) / 1024,
            }


def _relay_pid(holder: int) -> int | None:
    """The process running the relay (there is one in this bench)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != holder:
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"import _relay" in arg for arg in argv):
                return int(entry.name)
    return None


async def promotion() -> tuple[float, float]:
    """Milliseconds from the host's client leaving to its server's exit, and to B's answer."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = params(base, "on")
        leave, ready = anyio.Event(), anyio.Event()

        async def host() -> None:
            async with session(server, base / "a.err"):
                ready.set()
                await leave.wait()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(host)
            await ready.wait()
            async with session(server, base / "b.err") as b:
                holder = (await call(b, "who_calls"))["pid"]
                began = time.perf_counter()
                leave.set()
                gone = exited = 0.0

                async def watch() -> None:
                    nonlocal exited
                    with anyio.fail_after(60):
                        while Path(f"/proc/{holder}").exists():
                            await anyio.sleep(0.002)
                    exited = (time.perf_counter() - began) * 1000

                async with anyio.create_task_group() as inner:
                    inner.start_soon(watch)
                    await anyio.sleep(0.05)  # the holder has seen its stdin close
                    while True:
                        with anyio.fail_after(60):
                            result = await b.call_tool("who_calls", {})
                        if not result.is_error and result.structured_content["pid"] != holder:
                            break
                    gone = (time.perf_counter() - began) * 1000
        return exited, gone


async def main(runs: int, calls: int) -> None:
    rows = []
    for share in ("on", "off"):
        times = [await start_to_answer(share) for _ in range(runs)]
        rows.append((share, statistics.median(times), min(times), max(times)))
    relay = await relay_figures(calls, blocks=5)
    promoted = [await promotion() for _ in range(max(3, runs // 2))]
    out = sys.stderr
    print(f"share mode, n = {runs} per row (median, min-max):", file=out)
    for share, median, low, high in rows:
        what = "shared (attach)" if share == "on" else "succession (today)"
        print(f"  start -> first answer, {what}: {median:.1f} ms ({low:.1f}-{high:.1f})", file=out)
    overhead = relay["relayed_ms"] - relay["direct_ms"]
    print(
        f"  per call: direct {relay['direct_ms']:.3f} ms, relayed {relay['relayed_ms']:.3f} ms, "
        f"overhead {overhead:+.3f} ms (target <= +0.5)",
        file=out,
    )
    print(
        f"  relay RSS {relay['relay_rss_mb']:.1f} MB (target <= 10); "
        f"server RSS {relay['server_rss_mb']:.1f} MB",
        file=out,
    )
    exits, answers = [p[0] for p in promoted], [p[1] for p in promoted]
    print(
        f"  promotion, n = {len(promoted)}: the host's server exits after "
        f"{statistics.median(exits):.0f} ms ({min(exits):.0f}-{max(exits):.0f}; the SDK kills "
        f"at 2000), the relayed client's next call answered after "
        f"{statistics.median(answers):.0f} ms ({min(answers):.0f}-{max(answers):.0f})",
        file=out,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    anyio.run(main, args.runs, args.calls)
