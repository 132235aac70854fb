"""`make bench`: Highlander's latency, idle cost and import cost against its targets.

Nine benchmarks, each over ``--runs`` runs (median, p90, min and max) unless
said otherwise:

1. ``Highlander(...).acquire()`` on a free project, in this process, after
   ``import highlander`` and one warm-up acquire/release (only ``acquire()``
   is timed; the holder is released between runs).
2. Succession with a trivial save hook: a holder child holds, a second fresh
   child times its own ``acquire()`` (``time.perf_counter``) and reports the
   duration over a pipe, so interpreter start-up is excluded and every
   first-use cost inside ``acquire()`` is included.
3. Claim over the stale socket of a SIGKILLed (and reaped) holder, timed the
   same way by a fresh child (outcome ``claimed_stale``).
4. An idle holder child for ``--idle-seconds``: CPU % from ``/proc/<pid>/stat``
   (utime + stime) and RSS, next to the same script that imports highlander
   but does not acquire.
5. ``import highlander`` in a fresh interpreter, alone and after asyncio,
   anyio, json and logging (the marginal cost), timed by the child itself.
6. Identity verification of a live holder child from ``/proc``
   (``highlander._host.identity.mismatch``), per call over 1000 calls in this
   process: record-based (with boot id and lock file) and HELLO-based.
7. A SIGSTOPped holder child replaced by a fresh newcomer child (HELLO
   timeout, SIGTERM, term grace, SIGKILL, claim), over ``--stop-runs`` runs;
   about 4 s a run, skipped with ``--skip-slow``.
8. Spawn -> verdict in a fresh process while another process holds, for
   Highlander (observe mode) and the peer lock libraries of the ``bench``
   extra (filelock, fasteners, portalocker, pid, tendo, zc.lockfile), from
   ``Popen`` to the verdict line; skipped with ``--skip-peers`` or, with a
   note, when the peers are not installed.
9. A storm: 32 fresh children start back to back on a fresh project (AUTO,
   the library's defaults, so anti-thrash at 3 successions per 60 s); from
   ``Popen`` of the first until exactly one holds (alive, ``ready``, named
   by the ``.state`` record) and the 31 others have exited (deposed or
   refused); successions, refusals and kills from the event log; skipped
   with ``--skip-storm``.

Modules: this one is the command line, the orchestration and the output;
``cases`` (1-5), ``watchdog`` (6-7), ``peers`` (8), ``storm`` (9),
``profiling`` (``--profile``), ``children`` (the child program and its
processes), ``results`` (rows and the table), ``env`` (constants, the
children's environment, the machine line), all in scripts/bench/.

Every child is ended by its pid (SIGKILL if still alive, then a bounded
wait), every wait has a timeout, and the temporary directories are removed.
Children run with a private bytecode cache in the scratch directory, warmed
by an untimed first run, so they load ``.pyc`` files as an installed package
does.  Results go to stdout (and to ``--json PATH``); the library's own log
lines go to scratch files, never to the terminal.  ``--profile`` adds the
evidence of where the time goes (cProfile, ``-X importtime``) after the table.
Missed targets are reported, not failures: the exit status is 1 only when a
benchmark could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scripts.bench.cases import (
    bench_acquire,
    bench_idle,
    bench_import,
    bench_stale,
    bench_succession,
)
from scripts.bench.children import write_child_script
from scripts.bench.env import (
    BenchError,
    machine_busy,
    machine_info,
    machine_line,
    own_cpu,
    stderr_to,
)
from scripts.bench.peers import bench_peers
from scripts.bench.profiling import profile_evidence
from scripts.bench.results import Row, render_table
from scripts.bench.storm import STORM, bench_storm
from scripts.bench.watchdog import bench_identity, bench_stopped

# -- main -------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--runs", type=int, default=15, help="runs per benchmark (default 15)")
    parser.add_argument(
        "--idle-seconds", type=float, default=30.0, help="idle holder window (default 30)"
    )
    parser.add_argument(
        "--stop-runs",
        type=int,
        default=10,
        help="runs of benchmark 7, the SIGSTOPped incumbent, about 4 s each (default 10)",
    )
    parser.add_argument(
        "--skip-slow", action="store_true", help="skip benchmark 7 (about 4 s per run)"
    )
    parser.add_argument(
        "--skip-peers",
        action="store_true",
        help="skip benchmark 8, the peer lock libraries (filelock, zc.lockfile, ...)",
    )
    parser.add_argument(
        "--skip-storm",
        action="store_true",
        help=f"skip benchmark 9, the storm of {STORM} starts (about 3 s per run)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: --runs 5 --idle-seconds 3 --stop-runs 3",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the table, print cProfile and -X importtime evidence of where the time goes",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.idle_seconds, args.stop_runs = 5, 3.0, 3
    if args.runs < 1 or args.stop_runs < 1 or args.idle_seconds <= 0:
        parser.error("--runs and --stop-runs must be >= 1 and --idle-seconds > 0")
    return args


def run_all(base: Path, args: argparse.Namespace) -> tuple[list[Row], dict[str, str]]:
    """Run every benchmark (and the profiles) in ``base``; a failed one becomes an ERROR row."""
    script = write_child_script(base)
    steps: list[tuple[str, Callable[[], list[Row]]]] = [
        ("1/9 uncontended acquire", lambda: [bench_acquire(base, args.runs)]),
        ("2/9 succession", lambda: bench_succession(base, args.runs, script)),
        ("3/9 stale claim", lambda: [bench_stale(base, args.runs, script)]),
        (
            f"4/9 idle holder ({args.idle_seconds:g} s)",
            lambda: bench_idle(base, args.idle_seconds, script),
        ),
        ("5/9 import cost", lambda: bench_import(base, args.runs)),
        ("6/9 identity verification", lambda: bench_identity(base, script)),
    ]
    if not args.skip_slow:
        steps.append(
            (
                f"7/9 SIGSTOPped incumbent ({args.stop_runs} runs of about 4 s)",
                lambda: bench_stopped(base, args.stop_runs, script),
            )
        )
    if not args.skip_peers:
        steps.append(
            ("8/9 spawn -> verdict, Highlander and peers", lambda: bench_peers(base, args.runs))
        )
    if not args.skip_storm:
        steps.append(
            (
                f"9/9 storm of {STORM} starts ({args.runs} runs of about 3 s)",
                lambda: [bench_storm(base, args.runs, script)],
            )
        )
    rows: list[Row] = []
    evidence: dict[str, str] = {}
    # The in-process benchmarks log through the library (on its own thread):
    # those lines go to a scratch file for the whole run, not to the terminal.
    with stderr_to(base / "library-stderr.log"):
        for title, step in steps:
            print(f"# {title} ...", flush=True)
            try:
                rows += step()
            except BenchError as exc:
                rows.append(Row(title, title, "", [], error=str(exc)))
        if args.profile:
            print("# profiling ...", flush=True)
            try:
                evidence = profile_evidence(base, script, args.runs)
            except BenchError as exc:
                evidence = {"profile": f"ERROR {exc}"}
    return rows, evidence


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(sys.orig_argv)
    started = (time.monotonic(), machine_busy(), own_cpu())
    base = Path(tempfile.mkdtemp(prefix="hl-bench-"))
    # Like the children, this process caches bytecode in the scratch directory
    # (highlander is imported below, lazily), never in the source tree.
    sys.pycache_prefix = str(base / "pycache")
    try:
        info = machine_info(str(base.parent))
        header = machine_line(info, command)
        print(header, flush=True)
        stop = "skipped (--skip-slow)" if args.skip_slow else f"{args.stop_runs} runs"
        print(
            f"# runs {args.runs}, idle window {args.idle_seconds:g} s, "
            f"SIGSTOPped incumbent {stop}, scratch {base}",
            flush=True,
        )
        rows, evidence = run_all(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    wall = time.monotonic() - started[0]
    others = (machine_busy() - started[1]) - (own_cpu() - started[2])
    info["other_cpu_percent"] = max(0.0, others / (wall * info["nproc"]) * 100)
    info["loadavg_1min_at_end"] = os.getloadavg()[0]
    print()
    print(render_table(rows, header))
    print(
        f"\nother work on this machine during the run: {info['other_cpu_percent']:.1f} % of its "
        f"{info['nproc']} CPUs (1-minute load average {info['loadavg_1min_at_start']:.2f} at the "
        f"start, {info['loadavg_1min_at_end']:.2f} at the end); it skews the times"
    )
    for title, text in evidence.items():
        print(f"\n== {title}\n{text}")
    if args.json:
        payload = {
            "machine": info,
            "command": command,
            "runs": args.runs,
            "idle_seconds": args.idle_seconds,
            "stop_runs": None if args.skip_slow else args.stop_runs,
            "results": [row.as_json() for row in rows],
            "profile": evidence,
        }
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nresults written to {args.json}")
    return 1 if any(row.error for row in rows) or "profile" in evidence else 0


if __name__ == "__main__":
    sys.exit(main())
