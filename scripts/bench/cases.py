"""Benchmarks 1 to 5: acquire, succession, stale claim, idle holder, import cost.

Each ``bench_*`` function returns the :class:`Row` (or rows) of its table lines
and raises :class:`BenchError` when it cannot measure.
"""

from __future__ import annotations

import contextlib
import cProfile
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.bench.children import Child, Children, check_exit, children, newcomer
from scripts.bench.env import APP, CLK_TCK, TOKEN, WAIT, BenchError, child_env, proc_stat
from scripts.bench.results import Row

#: Each import case: (key, label, statement, preloaded modules, target in ms).
#: ``import highlander`` alone loads only the error hierarchy (the package is
#: lazy); ``from highlander import Highlander`` is what an application pays.
IMPORT_CASES = [
    ("import_standalone", "import highlander, fresh interpreter", "import highlander", "", None),
    (
        "import_class_standalone",
        "from highlander import Highlander, fresh interpreter",
        "from highlander import Highlander",
        "",
        None,
    ),
    (
        "import_marginal",
        "import highlander after asyncio+anyio+json+logging",
        "import highlander",
        "asyncio, anyio, json, logging",
        5.0,
    ),
    (
        "import_class_marginal",
        "from highlander import Highlander after asyncio+anyio+json+logging",
        "from highlander import Highlander",
        "asyncio, anyio, json, logging",
        5.0,
    ),
]


def _import_code(statement: str, preload: str) -> str:
    before = f"import {preload}\n" if preload else ""
    return (
        f"import time\n{before}t = time.perf_counter()\n{statement}\n"
        "print(time.perf_counter() - t)\n"
    )


# -- 1. uncontended acquire, in process -----------------------------------------


def _serving_thread_alive() -> bool:
    return any(t.name == f"highlander-{APP}" for t in threading.enumerate())


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true (every 0.2 ms); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"gave up waiting for {what} after {timeout} s")
        time.sleep(0.0002)


def acquire_runs(scratch: Path, runs: int, profiler: cProfile.Profile | None = None) -> list[float]:
    """One warm-up acquire/release, then ``runs`` timed ``acquire()`` calls (ms)."""
    from highlander import Highlander  # noqa: PLC0415 - imported before any timing

    scratch.mkdir()
    project = scratch / "project"
    project.mkdir()
    runtime = scratch / "rt"

    def one(profile: cProfile.Profile | None) -> float:
        hl = Highlander(app=APP, project=project, runtime_dir=runtime, token=TOKEN)
        if profile is not None:
            profile.enable()
        start = time.perf_counter()
        hl.acquire()
        elapsed = time.perf_counter() - start
        if profile is not None:
            profile.disable()
        if hl.outcome is None or hl.outcome.value != "claimed_free":
            raise BenchError(f"uncontended acquire ended {hl.outcome}, not claimed_free")
        # Untimed: release at once (release() right after acquire() is clean
        # since d018dfb), then wait until the serving thread is gone, so no
        # run overlaps the previous one's teardown.
        hl.release()
        wait_until(lambda: not _serving_thread_alive(), "the serving thread to end")
        return elapsed * 1000

    one(None)  # warm-up, untimed and unprofiled
    # The warm-up's log lines start the log thread, which renders and writes them:
    # let that finish rather than compete with the timed runs.
    from highlander._host.log import flush  # noqa: PLC0415

    flush()
    return [one(profiler) for _ in range(runs)]


def bench_acquire(base: Path, runs: int) -> Row:
    return Row(
        "acquire",
        "1. acquire(), uncontended, in-process",
        "ms",
        acquire_runs(base / "acquire", runs),
        target=1.0,
    )


# -- 2. succession ----------------------------------------------------------------


def succession(
    kids: Children,
    flags: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
    *,
    settle: bool = True,
) -> tuple[Child, Child, dict[str, Any]]:
    """One holder child, deposed by one fresh newcomer child; the newcomer's report.

    With ``settle`` the newcomer starts once the holder has gone quiet (its
    serving side loads in the background after ``acquire()`` returns), as a
    holder that has run for a while is; without, right after ``ready``.
    """
    holder = kids.start("holder", flags, extra)
    ready = holder.expect("ready")
    if ready["outcome"] not in ("claimed_free", "claimed_stale"):
        raise BenchError(f"the holder child claimed with outcome {ready['outcome']}")
    if settle:
        wait_until_quiet(holder.pid)
    if extra and extra.get("HL_BENCH_MARKS"):
        holder.expect("serving")
    incoming, got = newcomer(kids, "succeeded", flags, extra)
    if got["handoff"] != {"saved_by": holder.pid}:
        raise BenchError(f"the newcomer got handoff {got['handoff']!r}")
    holder.expect("deposed")
    for child in (holder, incoming):
        check_exit(child)
        kids.end(child)
    return holder, incoming, got


def wait_until_quiet(pid: int, quiet: float = 0.1, bound: float = 5.0) -> None:
    """Wait until ``pid`` has used no CPU for ``quiet`` seconds (at most ``bound``)."""
    deadline = time.monotonic() + bound
    last, since = _cpu_ticks(pid), time.monotonic()
    while time.monotonic() - since < quiet:
        if time.monotonic() > deadline:
            raise BenchError(f"holder {pid} kept using CPU for {bound} s after it claimed")
        time.sleep(0.01)
        now = _cpu_ticks(pid)
        if now != last:
            last, since = now, time.monotonic()


def bench_succession(base: Path, runs: int, script: Path) -> list[Row]:
    with children(base, "succession", script) as kids:
        succession(kids)  # warm-up: bytecode and page caches
        settled = [succession(kids)[2]["seconds"] * 1000 for _ in range(runs)]
        at_once = [succession(kids, settle=False)[2]["seconds"] * 1000 for _ in range(runs)]
    return [
        Row(
            "succession",
            "2. succession, trivial save (fresh newcomer)",
            "ms",
            settled,
            target=15.0,
            note="the holder child had gone quiet (no CPU for 100 ms) before the newcomer started",
        ),
        Row(
            "succession_at_once",
            "2. succession, newcomer right after the holder's start",
            "ms",
            at_once,
            note=(
                "the newcomer starts as soon as the holder reports ready; it waits for the "
                "holder's serving side, which loads in the background after acquire()"
            ),
        ),
    ]


# -- 3. stale claim ---------------------------------------------------------------


def _stale_claim(kids: Children) -> float:
    holder = kids.start("holder")
    holder.expect("ready")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait_exit()
    kids.end(holder)
    if not list(kids.runtime.glob("*.sock")):
        raise BenchError("the SIGKILLed holder left no socket file: nothing stale to claim")
    incoming, got = newcomer(kids, "claimed_stale")
    check_exit(incoming)
    kids.end(incoming)
    return float(got["seconds"]) * 1000


def bench_stale(base: Path, runs: int, script: Path) -> Row:
    with children(base, "stale", script) as kids:
        _stale_claim(kids)  # warm-up: bytecode and page caches
        samples = [_stale_claim(kids) for _ in range(runs)]
    return Row(
        "stale",
        "3. claim over a SIGKILLed holder's socket",
        "ms",
        samples,
        target=5.0,
    )


# -- 4. idle holder -------------------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    fields = proc_stat(pid)
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)


def _status(pid: int) -> dict[str, int]:
    wanted = {"VmRSS", "Threads"}
    out = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name in wanted:
                out[name] = int(value.split()[0])
    return out


def _wakeups(pid: int) -> int:
    """Context switches of every thread of ``pid`` (each one is a wake-up)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/status") as handle:
            for line in handle:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def bench_idle(base: Path, seconds: float, script: Path) -> list[Row]:
    with children(base, "idle", script) as kids:
        holder = kids.start("holder", extra={"HL_BENCH_APP_IMPORTS": "1"})
        baseline = kids.start("baseline")
        holder.expect("ready")
        baseline.expect("ready")
        time.sleep(1.0)  # let start-up work (log lines, thread start) finish
        before = {c.pid: (_cpu_ticks(c.pid), _wakeups(c.pid)) for c in (holder, baseline)}
        start = time.monotonic()
        # Watch both children for the whole window; either ending early is an error.
        deadline = start + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
            for child in (holder, baseline):
                if child.proc.poll() is not None:
                    raise BenchError(f"idle child {child.pid} ended early{child.tail()}")
        wall = time.monotonic() - start
        after = {c.pid: (_cpu_ticks(c.pid), _wakeups(c.pid)) for c in (holder, baseline)}
        status = {c.pid: _status(c.pid) for c in (holder, baseline)}

    def cpu(pid: int) -> float:
        return (after[pid][0] - before[pid][0]) / CLK_TCK / wall * 100

    def wake(pid: int) -> float:
        return (after[pid][1] - before[pid][1]) / wall

    def rss(pid: int) -> float:
        return status[pid]["VmRSS"] / 1024

    h, b = holder.pid, baseline.pid
    window = f"one {wall:.1f} s window"
    return [
        Row(
            "idle_cpu",
            "4. idle holder: CPU",
            "%",
            [cpu(h)],
            target=0.1,
            strict=True,
            note=(
                f"{window}, /proc/<pid>/stat utime+stime ({CLK_TCK} ticks/s, so "
                f"resolution {100 / CLK_TCK / wall:.4f} %); baseline (asyncio+anyio, no holding) "
                f"{cpu(b):.4f} %; wake-ups/s: holder {wake(h):.2f}, baseline {wake(b):.2f}; "
                f"threads: holder {status[h]['Threads']}, baseline {status[b]['Threads']}"
            ),
            extra={
                "baseline_cpu_percent": cpu(b),
                "holder_wakeups_per_s": wake(h),
                "baseline_wakeups_per_s": wake(b),
                "window_s": wall,
            },
        ),
        Row("idle_rss", "4. idle holder: RSS", "MB", [rss(h)], note=f"VmRSS after {window}"),
        Row("baseline_rss", "4. baseline, asyncio+anyio loaded: RSS", "MB", [rss(b)]),
        Row(
            "extra_rss",
            "4. idle holder: extra RSS vs baseline",
            "MB",
            [rss(h) - rss(b)],
            target=3.0,
            note=(
                "what holding adds to an application that has asyncio+anyio loaded (both "
                "children import them first): the serving thread and what it loads "
                "(docs/performance.md has the breakdown)"
            ),
        ),
    ]


# -- 5. import cost -------------------------------------------------------------


def _time_import(code: str, runs: int, pycache: Path) -> list[float]:
    samples = []
    for i in range(runs + 1):  # the first run warms the bytecode and page caches
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=WAIT,
            env=child_env(pycache),
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"import child failed ({done.returncode}): {done.stderr.strip()}")
        if i:
            samples.append(float(done.stdout.strip()) * 1000)
    return samples


def bench_import(base: Path, runs: int) -> list[Row]:
    pycache = base / "pycache"
    return [
        Row(
            key,
            f"5. {label}",
            "ms",
            _time_import(_import_code(statement, preload), runs, pycache),
            target=target,
        )
        for key, label, statement, preload, target in IMPORT_CASES
    ]
