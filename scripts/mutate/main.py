"""`make mutate`: mutation testing of the pure protocol core (issue #19).

Every mutant (scripts/mutate/ops.py) of every core module is run against the
core's fast tests (scripts/mutate/run.py); a mutant the tests do not notice
*survived*: a change to the rules no test would catch.  The report gives a
table per module (killed / survived / equivalent / timeout), every survivor
with file:line and the edit, and every mutant set aside as equivalent (it
changes no behaviour) with the reason from scripts/mutate/equivalent.py.

    python scripts/mutate/main.py               # everything, the report on stdout
    python scripts/mutate/main.py --module codec
    python scripts/mutate/main.py --sample 30   # a fixed sample (tests/core/test_mutate_sample.py)
    python scripts/mutate/main.py --check-equivalent   # the equivalent ones really survive

The score is (killed + timeout) / (all - equivalent): a mutant that makes
the tests hang is noticed too.  Exit status 1 if a module is below
``--fail-under`` or the whole core below ``--fail-under-total`` percent
(both 0 by default: the report is for reading; `make mutate` sets them).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from scripts.mutate.equivalent import EQUIVALENT
from scripts.mutate.ops import Mutant, find_mutants, short
from scripts.mutate.run import (
    Baseline,
    check_order,
    coverage_map,
    selected,
    start,
    stop,
    test_files,
)

ROOT = Path(__file__).resolve().parents[2]

#: Where a sample is drawn from: the rules that decide who holds the project.
SAMPLED_SCOPES = (
    "state:<module>",
    "state:StateMachine",
    "connection:Connection._authenticate",
    "connection:Connection._receive_nonces",
    "connection:Connection._next_event",
    "signing:",
    "codec:FrameDecoder",
    "deadlines:Watch",
    "canonical:_check_keys",
    "commit:",
)


def core_modules(root: Path = ROOT) -> list[Path]:
    """The pure core's modules: every module in highlander/_core/ (tests/core/test_purity.py).

    The newcomer's policy and patience are there too (issue #14).
    """
    return sorted(p for p in (root / "highlander" / "_core").glob("*.py") if p.stem != "__init__")


def module_name(path: Path, root: Path = ROOT) -> str:
    """The dotted module name of a file under ``root``."""
    return ".".join(path.resolve().relative_to(root).with_suffix("").parts)


def all_mutants(root: Path = ROOT) -> list[Mutant]:
    """Every mutant of every core module, in a fixed order."""
    found: list[Mutant] = []
    for path in core_modules(root):
        found.extend(find_mutants(path, module_name(path, root), root))
    return found


@dataclass
class Result:
    """A mutant's verdict: killed, survived, timeout or equivalent (``reason`` says why)."""

    mutant: Mutant
    verdict: str
    reason: str = ""
    tests: int = 0
    seconds: float = 0.0


def _triage(
    mutants: list[Mutant], baseline: Baseline, equivalent: dict[str, str]
) -> tuple[list[Result], list[tuple[Mutant, tuple[str, ...]]]]:
    """The verdicts known without a run (equivalent, or no test runs the code) and the rest."""
    results: list[Result] = []
    queue: list[tuple[Mutant, tuple[str, ...]]] = []
    for mutant in mutants:
        if mutant.key in equivalent:
            results.append(Result(mutant, "equivalent", equivalent[mutant.key]))
            continue
        tests = selected(mutant, baseline, ROOT)
        if tests:
            queue.append((mutant, tests))
        else:
            results.append(Result(mutant, "survived", "no test runs this code"))
    return results, queue


def run(
    mutants: list[Mutant],
    baseline: Baseline,
    jobs: int,
    limit: float,
    progress: bool,
    equivalent: dict[str, str] = EQUIVALENT,
) -> list[Result]:
    """Run every mutant not in ``equivalent``, ``jobs`` at a time; return the verdicts."""
    results, queue = _triage(mutants, baseline, equivalent)
    running: dict[int, tuple[Mutant, int, float]] = {}
    done = 0
    while queue or running:
        while queue and len(running) < jobs:
            mutant, tests = queue.pop(0)
            running[start(mutant, tests, ROOT)] = (mutant, len(tests), time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        now = time.monotonic()
        if pid == 0:
            for late, (mutant, count, began) in list(running.items()):
                if now - began > limit:
                    stop(late)
                    del running[late]
                    results.append(Result(mutant, "timeout", tests=count, seconds=now - began))
                    done += 1
            time.sleep(0.005)
            continue
        if pid not in running:
            continue
        mutant, count, began = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code == 5:
            raise SystemExit(f"no test ran for {mutant.key}: the selection is broken")
        verdict = "survived" if code == 0 else "killed"
        results.append(Result(mutant, verdict, tests=count, seconds=now - began))
        done += 1
        if progress:
            print(f"\r{done} run, {len(queue)} to go ", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    order = {id(m): i for i, m in enumerate(mutants)}
    return sorted(results, key=lambda r: order[id(r.mutant)])


def table(results: list[Result]) -> list[str]:
    """The per-module score table, Markdown (docs/reliability.md shows it as it is)."""
    by_module: dict[str, Counter[str]] = {}
    for result in results:
        by_module.setdefault(short(result.mutant.module), Counter())[result.verdict] += 1
    by_module["all"] = sum(by_module.values(), Counter())
    lines = [
        "| module | mutants | killed | survived | equivalent | timeout | score |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, count in by_module.items():
        counted = count.total() - count["equivalent"]
        caught = count["killed"] + count["timeout"]
        score = f"{100 * caught / counted:.1f} %" if counted else "-"
        label = f"**{name}**" if name == "all" else f"`{name}`"
        lines.append(
            f"| {label} | {count.total()} | {count['killed']} | {count['survived']} "
            f"| {count['equivalent']} | {count['timeout']} | {score} |"
        )
    return lines


def scores(results: list[Result]) -> dict[str, float]:
    """Each module's score in percent, and ``all``'s."""
    caught: Counter[str] = Counter()
    counted: Counter[str] = Counter()
    for result in results:
        if result.verdict == "equivalent":
            continue
        for name in (short(result.mutant.module), "all"):
            counted[name] += 1
            caught[name] += result.verdict in ("killed", "timeout")
    return {name: 100 * caught[name] / counted[name] for name in counted}


def report(results: list[Result], seconds: float, tests: int) -> str:
    """The whole report: table, survivors, timeouts, equivalents."""
    lines = [f"# mutation testing of the core: {len(results)} mutants, {seconds:.0f} s", ""]
    lines += [*table(results), ""]
    for verdict in ("survived", "timeout"):
        chosen = [r for r in results if r.verdict == verdict]
        lines.append(f"## {verdict} ({len(chosen)})")
        lines += [f"- {r.mutant.where}: {r.mutant.key} {r.reason}".rstrip() for r in chosen]
        lines.append("")
    chosen = [r for r in results if r.verdict == "equivalent"]
    lines.append(f"## equivalent ({len(chosen)})")
    lines += [f"- {r.mutant.where}: {r.mutant.key}: {r.reason}" for r in chosen]
    lines += ["", f"({tests} tests in the unmutated run.)"]
    return "\n".join(lines)


def sample(mutants: list[Mutant], size: int, seed: int) -> list[Mutant]:
    """A fixed sample of the mutants of :data:`SAMPLED_SCOPES`, none of them equivalent."""
    pool = [
        m
        for m in mutants
        if m.key not in EQUIVALENT
        and any(f"{short(m.module)}:{m.scope}".startswith(scope) for scope in SAMPLED_SCOPES)
    ]
    return random.Random(seed).sample(pool, min(size, len(pool)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", help="only this module (e.g. codec)")
    parser.add_argument("--sample", type=int, help="only a fixed sample of this many mutants")
    parser.add_argument(
        "--check-equivalent",
        action="store_true",
        help="run only the mutants listed as equivalent: each must survive (exit 1 if not)",
    )
    parser.add_argument("--seed", type=int, default=19, help="the sample's seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--timeout", type=float, help="seconds per mutant (default: 3 x all tests' time, >= 30)"
    )
    parser.add_argument("--json", type=Path, help="also write the verdicts here")
    parser.add_argument("--fail-under", type=float, default=0.0, help="percent, per module")
    parser.add_argument("--fail-under-total", type=float, default=0.0, help="percent, all")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    args = parser.parse_args()
    started = time.monotonic()
    mutants = all_mutants()
    unknown = set(EQUIVALENT) - {m.key for m in mutants}
    if unknown:
        # An entry that matches nothing hides nothing, but says the list is out of date.
        print(f"equivalence entries that match no mutant: {sorted(unknown)}", file=sys.stderr)
    if args.module:
        mutants = [m for m in mutants if short(m.module) in args.module]
    if args.sample:
        mutants = sample(mutants, args.sample, args.seed)
    if args.check_equivalent:
        mutants = [m for m in mutants if m.key in EQUIVALENT]
    baseline = coverage_map(ROOT, core_modules(), test_files(ROOT))
    if not args.sample:  # a sample's few runs could not show an order dependency anyway
        check_order(baseline, ROOT)
    # A mutant's run is at most the whole unmutated one; under load it may take longer.
    limit = args.timeout or max(30.0, 3 * baseline.seconds)
    # Checking the list: its mutants run like any other, and a killed one is no equivalent.
    listed = {} if args.check_equivalent else EQUIVALENT
    results = run(mutants, baseline, args.jobs, limit, not args.quiet, listed)
    print(report(results, time.monotonic() - started, len(baseline.tests)))
    if args.json:
        verdicts = [
            {
                "key": r.mutant.key,
                "where": r.mutant.where,
                "verdict": r.verdict,
                "reason": r.reason,
                "tests": r.tests,
                "seconds": round(r.seconds, 2),
            }
            for r in results
        ]
        args.json.write_text(json.dumps(verdicts, indent=1) + "\n", encoding="utf-8")
    low = {
        name: round(score, 1)
        for name, score in scores(results).items()
        if score < (args.fail_under_total if name == "all" else args.fail_under)
    }
    if low:
        print(f"below the floor: {low}", file=sys.stderr)
    if args.check_equivalent:
        wrong = [r.mutant.key for r in results if r.verdict != "survived"]
        print(f"listed as equivalent, yet the tests notice: {wrong}" if wrong else "", end="")
        return 1 if wrong else 0
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
