"""``--profile``: the evidence of where the time goes (cProfile, ``-X importtime``).

Reruns benchmarks 1, 2 and 5 under the profilers, after the table; the
numbers here include profiler overhead and are not the table's.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import subprocess
import sys
import sysconfig
from pathlib import Path

from scripts.bench.cases import acquire_runs, succession
from scripts.bench.children import children
from scripts.bench.env import REPO, WAIT, child_env


def _shorten(text: str) -> str:
    """Drop the long directory prefixes from profiler output."""
    paths = sysconfig.get_paths()
    for prefix in (str(REPO), paths["purelib"], paths["stdlib"]):
        text = text.replace(prefix + "/", "")
    return text


def _pstats(stats: pstats.Stats, sort: str, top: int) -> str:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]  # print_stats writes to it
    stats.sort_stats(sort).print_stats(top)
    lines = buffer.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return _shorten("\n".join(lines[start:]).rstrip())


def _importtime(text: str, start: str, end: str | None = None) -> list[tuple[int, int, int, str]]:
    """``-X importtime`` lines between two marks: (self us, cumulative us, depth, module)."""
    inside, rows = False, []
    for line in text.splitlines():
        if line.startswith("HL_BENCH_MARK "):
            what = line.split()[1]
            inside = True if what == start else (False if what == end else inside)
            continue
        if not inside or not line.startswith("import time:"):
            continue
        parts = line.split(":", 1)[1].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        rows.append((int(parts[0]), int(parts[1]), depth, name.strip()))
    return rows


def _render_imports(rows: list[tuple[int, int, int, str]], by: str, top: int) -> str:
    if by == "self":
        chosen = sorted(rows, key=lambda r: -r[0])[:top]
        total = sum(r[1] for r in rows if r[2] == 0)
    else:  # the top-level imports of the window, by cumulative time
        chosen = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])[:top]
        total = sum(r[1] for r in rows if r[2] == 0)
    out = [f"{'cumulative ms':>13}  {'self ms':>7}  module"]
    out += [f"{cum / 1000:13.2f}  {own / 1000:7.2f}  {name}" for own, cum, _, name in chosen]
    what = "imports" if by == "self" else "top-level imports"
    out.append(f"{total / 1000:13.2f}  {'':7}  (all {what} in the window)")
    return "\n".join(out)


def profile_evidence(base: Path, script: Path, runs: int, top: int = 12) -> dict[str, str]:
    """cProfile and ``-X importtime`` output for the three latency paths and the import."""
    out: dict[str, str] = {}
    profiler = cProfile.Profile()
    acquire_runs(base / "profile-acquire", runs, profiler)
    stats = pstats.Stats(profiler)
    out[f"1. acquire(), uncontended: cProfile over {runs} calls, by tottime"] = _pstats(
        stats, "tottime", top
    )
    out[f"1. acquire(), uncontended: cProfile over {runs} calls, by cumtime"] = _pstats(
        stats, "cumtime", top
    )
    with children(base, "profile", script) as kids:
        succession(kids)  # warm-up: bytecode and page caches
        folder = kids.scratch / "pstats"
        folder.mkdir()
        succession(kids, extra={"HL_BENCH_PROFILE": str(folder)})
        threads = sorted(str(p) for p in folder.glob("thread-*.prof"))
        if threads:
            stats = pstats.Stats(*threads)
            title = "2. succession, newcomer's serving thread (runs the whole conversation)"
            out[f"{title}: cProfile, by cumtime"] = _pstats(stats, "cumtime", top + 8)
            out[f"{title}: cProfile, by tottime"] = _pstats(stats, "tottime", top)
        marks = {"HL_BENCH_MARKS": "1"}
        holder, newcomer, got = succession(kids, ("-X", "importtime"), marks)
        lazy = _importtime(newcomer.stderr_path.read_text(errors="replace"), "start", "end")
        out[
            f"2. succession: imports inside the newcomer's acquire() ({got['seconds'] * 1000:.1f} "
            "ms under -X importtime), top level, by cumulative time"
        ] = _render_imports(lazy, "cumulative", top)
        served = _importtime(holder.stderr_path.read_text(errors="replace"), "serving")
        out["2. succession: imports in the holder while it serves the newcomer"] = _render_imports(
            served, "cumulative", top
        )
    code = (
        "import asyncio, anyio, json, logging, sys\n"
        "sys.stderr.write('HL_BENCH_MARK start\\n')\n"
        "import highlander\n"
    )
    env = child_env(base / "pycache")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env=env,
        check=False,
    )
    rows = _importtime(done.stderr, "start")
    out["5. import highlander after asyncio+anyio+json+logging: -X importtime, by self time"] = (
        _render_imports(rows, "self", top)
    )
    return out
