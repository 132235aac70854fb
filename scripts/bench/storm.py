"""Benchmark 9: a storm of 32 simultaneous starts settles on exactly one holder.

Each run starts ``STORM`` fresh children on a fresh project (its own runtime
directory), back to back, in AUTO mode with the library's default settings:
timeouts and anti-thrash (``thrash_limit=3`` per 60 s) untouched, since a
storm is exactly what anti-thrash is for.  The time runs from
``time.perf_counter()`` just before the first ``Popen`` until the storm has
settled: one child is alive and has reported ``ready`` (it holds), and every
other child has exited (the pipes tell, event-driven).  Untimed, the bench
then checks that state: the survivor never reported ``deposed``, the
project's ``.state`` record names it and verifies against the kernel (pid,
start time, exe, uid, boot id, the lock file among its fds), every other
child exited 0 after ``deposed`` or 1 after ``refused``, and the event log
agrees (one ``claimed_free``, one ``claimed``/``succeeded`` per deposed
child).  No holder, or more than one, is a :class:`BenchError`.

``python -m scripts.bench.storm [--runs N]`` runs this benchmark alone.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from scripts.bench.children import Child, Children, children, write_child_script
from scripts.bench.env import WAIT, BenchError, machine_info, machine_line, stderr_to
from scripts.bench.results import Row, render_table

#: Children started per storm (the issue's "storm of 32 starts").
STORM = 32
#: The issue's target for the settle time, in ms.
TARGET_MS = 2000.0


@dataclass
class StormRun:
    """What one storm did: its settle time and how the other children ended."""

    settle_ms: float
    spawn_ms: float  # first to last Popen
    successions: int  # claimed/succeeded in the event log (= deposed children)
    refusals: dict[str, int]  # "ThrashError (thrash)" -> children refused so
    kills: int  # terminated + killed events
    busy: int  # BUSY events in the log (the holder and the newcomer each log one)
    generation: int  # the survivor's fencing generation
    cpu_s: float  # CPU time (user + system) of all the storm's children


def _names(child: Child) -> list[str]:
    return [str(report.get("event")) for report in child.heard]


def _drain(child: Child) -> bool:
    """Read what ``child`` has written into ``heard``; ``False`` once its pipe is closed."""
    chunk = os.read(child.reports, 65536)
    child.buffer += chunk
    while b"\n" in child.buffer:
        line, child.buffer = child.buffer.split(b"\n", 1)
        child.heard.append(json.loads(line))
    return bool(chunk)


def _settle(storm: list[Child], deadline: float) -> tuple[Child, float]:
    """Wait until one child runs and has said ``ready`` and the rest have exited.

    A child closes its report pipe only by exiting, so end of file on a pipe
    is that child's exit.  Returns the survivor and ``perf_counter()`` at the
    moment the storm was seen settled.
    """
    running = {child.reports: child for child in storm}
    while True:
        if not running:
            raise BenchError("every child of the storm exited: nobody holds the project")
        if len(running) == 1:
            (last,) = running.values()
            if "ready" in _names(last):
                return last, time.perf_counter()
        left = deadline - time.monotonic()
        if left <= 0:
            stuck = ", ".join(f"{c.pid} said {_names(c)}" for c in running.values())
            raise BenchError(f"the storm did not settle within {WAIT} s; still running: {stuck}")
        readable, _, _ = select.select(list(running), [], [], left)
        for fd in readable:
            if not _drain(running[fd]):
                del running[fd]


def _check(kids: Children, storm: list[Child], survivor: Child) -> StormRun:
    """Verify the settled storm (untimed) and count what happened in it."""
    # Imported here, after the bench has pointed the bytecode cache at its scratch.
    from highlander._host.event_log import read_events  # noqa: PLC0415
    from highlander._host.identity import mismatch  # noqa: PLC0415
    from highlander._host.record import read_record  # noqa: PLC0415
    from highlander._shell.observe import record_target  # noqa: PLC0415

    holding = [
        c
        for c in storm
        if c.proc.poll() is None and "ready" in _names(c) and "deposed" not in _names(c)
    ]
    if holding != [survivor]:
        raise BenchError(f"{len(holding)} children hold the project, not 1: {holding}")
    refusals: Counter[str] = Counter()
    deposed = 0
    for child in storm:
        if child is survivor:
            continue
        status, said = child.wait_exit(), _names(child)
        if status == 0 and "deposed" in said:
            deposed += 1
        elif status == 1 and "refused" in said:
            why = next(r for r in child.heard if r.get("event") == "refused")
            refusals[why["error"] + (f" ({why['reason']})" if why["reason"] else "")] += 1
        else:
            raise BenchError(f"child {child.pid} exited {status} after {said}{child.tail()}")
    settings = kids.settings()
    record = read_record(settings.paths.state)
    target = record_target(settings, record)
    if record is None or target is None or record.pid != survivor.pid:
        raise BenchError(f"the .state record does not name the survivor {survivor.pid}: {record}")
    problem = mismatch(target)
    if problem is not None:
        raise BenchError(f"the survivor {survivor.pid} does not verify as the holder: {problem}")
    log = read_events(settings.paths.events)
    claims = Counter(e.get("outcome") for e in log if e.get("event") == "claimed")
    kinds = Counter(str(e.get("event")) for e in log)
    if claims["claimed_free"] != 1 or claims["succeeded"] != deposed:
        raise BenchError(f"the event log has claims {dict(claims)} for {deposed} deposed children")
    if record.generation != deposed + 1:
        raise BenchError(f"generation {record.generation} after {deposed} successions")
    return StormRun(
        settle_ms=0.0,
        spawn_ms=0.0,
        successions=claims["succeeded"],
        refusals=dict(refusals),
        kills=kinds["terminated"] + kinds["killed"],
        busy=kinds["busy"],
        generation=record.generation,
        cpu_s=0.0,
    )


def storm_run(base: Path, script: Path, name: str) -> StormRun:
    """One storm on a fresh project; every child is ended by its pid afterwards."""
    cpu = _children_cpu()
    with children(base, name, script) as kids:
        storm = [kids.start("storm", label="storm") for _ in range(STORM)]
        start, spawned = storm[0].spawned, storm[-1].spawned
        try:
            survivor, settled = _settle(storm, time.monotonic() + WAIT)
            run = _check(kids, storm, survivor)
        finally:
            for child in storm:
                kids.end(child)
    run.settle_ms, run.spawn_ms = (settled - start) * 1000, (spawned - start) * 1000
    run.cpu_s = _children_cpu() - cpu  # every child is reaped by now
    return run


def _children_cpu() -> float:
    """CPU seconds of every child this process has reaped so far."""
    t = os.times()
    return t.children_user + t.children_system


def bench_storm(base: Path, runs: int, script: Path) -> Row:
    """Benchmark 9: ``runs`` storms after one untimed warm-up storm."""
    warm_up = storm_run(base, script, "storm-warm-up")  # untimed: bytecode and page caches
    done = [storm_run(base, script, f"storm-{i}") for i in range(runs)]
    reasons = sorted({reason for run in done for reason in run.refusals})

    def median(values: list[int]) -> str:
        return f"{statistics.median(values):g} ({min(values)}-{max(values)})"

    spawn = statistics.median(run.spawn_ms for run in done)
    cpu, nproc = statistics.median(run.cpu_s for run in done), len(os.sched_getaffinity(0))
    refused = ", ".join(
        f"{reason} {median([run.refusals.get(reason, 0) for run in done])}" for reason in reasons
    )
    note = (
        f"{STORM} children spawned back to back (first to last Popen {spawn:.1f} ms), AUTO "
        f"mode, library defaults (thrash_limit 3 per 60 s); settled = one child alive, holding "
        f"and named by the .state record, the other {STORM - 1} exited. Per run, median "
        f"(min-max): successions {median([r.successions for r in done])}, refusals "
        f"{refused or 'none'}, BUSY events {median([r.busy for r in done])}, kills "
        f"(terminated+killed) {sum(r.kills for r in done)} in all runs; the children used "
        f"{cpu:.2f} s of CPU per storm (median): at least {cpu / nproc * 1000:.0f} ms of wall "
        f"time on {nproc} CPUs"
    )
    return Row(
        "storm",
        f"9. storm of {STORM} starts -> one holder",
        "ms",
        [run.settle_ms for run in done],
        target=TARGET_MS,
        note=note,
        extra={
            "storm_size": STORM,
            "storms": [asdict(run) for run in done],
            "warm_up": asdict(warm_up),
        },
    )


def main(argv: list[str] | None = None) -> int:
    """Run benchmark 9 alone, with the same scratch set-up as ``scripts/bench/main.py``."""
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench.storm",
        description="Benchmark 9 alone: " + __doc__.splitlines()[0],
    )
    parser.add_argument("--runs", type=int, default=15, help="storms (default 15)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="hl-bench-"))
    sys.pycache_prefix = str(base / "pycache")
    header = machine_line(machine_info(str(base.parent)), shlex.join(sys.orig_argv))
    try:
        with stderr_to(base / "library-stderr.log"):
            try:
                row = bench_storm(base, args.runs, write_child_script(base))
            except BenchError as exc:
                row = Row("storm", "9. storm", "", [], error=str(exc))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(render_table([row], header))
    return 1 if row.error else 0


if __name__ == "__main__":
    sys.exit(main())
