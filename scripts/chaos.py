"""`make chaos`: a seeded storm of starts, kills, pauses and file damage against one project.

One project, one fresh runtime directory.  ``random.Random(seed)`` draws the
whole schedule up front (scripts/chaos_schedule.py): newcomers (AUTO) whose
own save is quick, slow but advancing, or hanging; SIGKILL or SIGSTOP of
the holder (SIGCONT later, or left for a newcomer to kill); the socket file
deleted or replaced by a regular file or a stale socket; the ``.state``
record damaged (not JSON, cut short, empty, wrongly typed, or naming an
impossible pid or generation); a stale legacy lock; an unrelated ``sleep``
whose pid is written into ``.state``.  The holders are tests/programs/child.py with small
timeouts; each appends acquire/release lines to a witness log and counts
``handoff counter + 1``.

After the last event the harness resumes what it promised to resume, starts
one more newcomer and times how long until exactly one live holder answers
a signed STATUS.  Then it ends every process it started (by pidfd), judges
the evidence (scripts/chaos_check.py) and prints the summary; the exit status
is 1 when a must-be-zero number is not zero.

    .venv/bin/python scripts/chaos.py --events 500 --seed 1
    .venv/bin/python scripts/chaos.py --events 100 --seed 2 --keep /tmp/evidence
    .venv/bin/python scripts/chaos.py --state-damage garbage,truncated,empty
    .venv/bin/python scripts/chaos.py --events 500 --seeds 1-10   # = make chaos-many

``--seeds A-B`` runs each seed in turn (each its own project and runtime
directory), prints every report, then one summary table; the exit status is
1 if any seed failed.

``--keep DIR`` copies the evidence (merged event log, witness log, every
process with its stderr, the steps as run) before the run directory goes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos_faults as faults
from chaos_check import judge
from chaos_log import EventTail, read_witness
from chaos_procs import Lab, Proc
from chaos_report import CONVERGENCE_BOUND, SUMMARY_HEADER, Report
from chaos_schedule import STARTS, STATE_DAMAGE, Step, child_config, make_schedule

from highlander._control import query_status
from highlander._waiting import BLOCKING, run_blocking

#: Live Highlander processes at most; a start waits (bounded) below this.
MAX_LIVE = 10
MAX_BYSTANDERS = 3
#: Operator interventions the settling phase may make before giving up.
MAX_INTERVENTIONS = 3


class Runner:
    """Runs a schedule against a :class:`Lab` and settles it."""

    def __init__(self, lab: Lab, tail: EventTail, say: Callable[[str], None]) -> None:
        self.lab, self.tail, self.say = lab, tail, say
        self.stopped_by: dict[int, Proc] = {}
        self.noops: Counter[str] = Counter()
        self.harness: Counter[str] = Counter()
        self.notes: list[str] = []
        #: (step, kind, what happened, monotonic ns), for --keep.
        self.log: list[tuple[int, str, str, int]] = []

    # -- the schedule -------------------------------------------------------------

    def run(self, schedule: list[Step]) -> None:
        for step in schedule:
            for index in step.resume:
                self._signal(self.stopped_by.get(index), signal.SIGCONT)
            note = self.act(step)
            self.log.append((step.index, step.kind, note, time.monotonic_ns()))
            self.tail.poll()
            if step.index % 50 == 0 or step.index == len(schedule) - 1:
                self.say(f"step {step.index}: {step.kind}: {note}")
            if step.index < len(schedule) - 1:
                self.lab.wait_until(lambda: False, step.gap)

    def act(self, step: Step) -> str:
        """Do what ``step`` says; return what happened, in a few words."""
        lab, kind, params = self.lab, step.kind, step.params
        if kind in STARTS:
            return self.start(step.index, params)
        if kind in ("sigkill_holder", "sigstop_holder"):
            return self.signal_holder(step)
        if kind == "legacy_lock":
            dead = params["variant"] == "dead"
            pid = lab.dead_pid(step.index) if dead else self.bystander(step.index).pid
            return faults.write_legacy(lab.legacy, pid)
        if kind == "pid_reuse":
            return faults.plant_pid(lab.paths, self.bystander(step.index, new=True).pid, **params)
        damage: dict[str, Callable[..., str]] = {
            "delete_socket": faults.delete_socket,
            "replace_socket": faults.replace_socket,
            "corrupt_state": faults.corrupt_state,
        }
        return damage[kind](lab.paths, **params)

    def signal_holder(self, step: Step) -> str:
        holder = self.lab.holder()
        if holder is None or (step.kind == "sigstop_holder" and holder.stopped):
            self.noops[f"{step.kind}: no running holder"] += 1
            return "no holder"
        signum = signal.SIGKILL if step.kind == "sigkill_holder" else signal.SIGSTOP
        self._signal(holder, signum)
        if signum == signal.SIGSTOP:
            self.stopped_by[step.index] = holder
        return f"{signum.name} pid {holder.pid}"

    def start(self, index: int, params: dict[str, Any]) -> str:
        lab = self.lab
        if not lab.wait_until(lambda: len(lab.live_children()) < MAX_LIVE, 10.0):
            self.notes.append(f"step {index}: {MAX_LIVE} processes still alive after 10 s")
        cfg = child_config(params, str(lab.kids.witness), str(lab.legacy))
        return f"started pid {lab.start_child(index, cfg).pid}"

    def bystander(self, index: int, *, new: bool = False) -> Proc:
        alive = self.lab.bystanders()
        if alive and not new:
            return alive[-1]
        while len(alive) >= MAX_BYSTANDERS:
            self._signal(alive.pop(0), signal.SIGKILL, counted="SIGKILL (bystander retired)")
        return self.lab.start_bystander(index)

    def _signal(self, proc: Proc | None, signum: signal.Signals, counted: str = "") -> None:
        if proc is not None and self.lab.send(proc, signum):
            self.harness[counted or signum.name] += 1

    # -- settling -------------------------------------------------------------------

    def settle(self, schedule: list[Step]) -> tuple[float | None, int]:
        """Resume what was promised, start one newcomer, time until one holder answers."""
        lab, began = self.lab, time.monotonic()
        for index, proc in self.stopped_by.items():
            if schedule[index].params.get("resume_after") is not None:
                self._signal(proc, signal.SIGCONT)
        newcomer = self.start(len(schedule), {"save": "normal", "steps": 1, "step_delay": 0.01})
        latest = lab.children()[-1]
        self.say(f"settling: {newcomer}")
        interventions, deadline = 0, began + CONVERGENCE_BOUND + 10
        while time.monotonic() < deadline:
            lab.pump(0.02)
            self.tail.poll()
            if self.converged():
                return time.monotonic() - began, interventions
            in_flight = [p for p in lab.live_children() if not p.believes]
            if latest.alive or in_flight or interventions >= MAX_INTERVENTIONS:
                continue
            # The newcomer gave up (the holder cannot be verified, so it is never
            # signalled): do what the error message tells an operator to do.
            interventions += 1
            for proc in lab.children():
                if proc.believes:
                    self._signal(proc, signal.SIGKILL, counted="SIGKILL (operator)")
            self.notes.append(f"settling: operator stopped the holder ({latest.last_error()})")
            self.start(len(schedule), {"save": "normal", "steps": 1, "step_delay": 0.01})
            latest = lab.children()[-1]
        return None, interventions

    def converged(self) -> bool:
        """Exactly one live process believes it holds, and it answers a signed STATUS."""
        believers = [p for p in self.lab.children() if p.believes]
        if len(believers) != 1 or believers[0].stopped:
            return False
        found = run_blocking(query_status(self.lab.settings, BLOCKING))
        return found.reply is not None and found.reply.pid == believers[0].pid

    def drain(self, timeout: float = 15.0) -> None:
        """Let in-flight newcomers finish (bounded)."""
        lab = self.lab
        if not lab.wait_until(lambda: len(lab.live_children()) <= 1, timeout):
            self.notes.append(f"{len(lab.live_children())} processes alive after the drain")

    def cli_status(self) -> dict[str, Any] | None:
        """`highlander status --json`, as an operator would run it."""
        argv = [sys.executable, "-m", "highlander.cli", "status", "--json", "--app", "chaos"]
        try:
            done = subprocess.run(
                argv, env=self.lab.kids.env(), capture_output=True, timeout=30, check=False
            )
            data: dict[str, Any] = json.loads(done.stdout)
        except (subprocess.TimeoutExpired, ValueError) as exc:
            self.notes.append(f"highlander status failed: {exc}")
            return None
        return data


def keep_evidence(runner: Runner, tail: EventTail, keep: Path) -> None:
    """Copy the evidence of a run to ``keep`` (the runtime directory itself is removed)."""
    lab = runner.lab
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "steps.json").write_text(json.dumps(runner.log, indent=0))
    with open(keep / "events.jsonl", "w") as out:
        out.writelines(json.dumps(e) + "\n" for e in tail.events())
    if lab.kids.witness.exists():
        shutil.copy(lab.kids.witness, keep / "witness.log")
    with open(keep / "procs.jsonl", "w") as out:
        out.writelines(json.dumps(p.describe()) + "\n" for p in lab.procs)
    (keep / "clock.json").write_text(json.dumps(lab.clock))


def run(
    events: int,
    seed: int,
    say: Callable[[str], None] | None = None,
    keep: Path | None = None,
    state_damage: tuple[str, ...] = STATE_DAMAGE,
) -> Report:
    """Run ``events`` scheduled events for ``seed``; return the judged report."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    schedule = make_schedule(seed, events, state_damage)
    root = Path(tempfile.mkdtemp(prefix="highlander-chaos-"))
    lab: Lab | None = None
    tail: EventTail | None = None
    began = time.monotonic()
    try:
        lab = Lab(root)
        tail = EventTail(lab.paths.events)
        runner = Runner(lab, tail, say)
        runner.run(schedule)
        convergence, interventions = runner.settle(schedule)
        runner.drain()
        status = runner.cli_status()
        lab.end_all()
        tail.poll()
        found = judge(lab.procs, tail.events(), read_witness(lab.kids.witness), lab.clock)
        if keep is not None:
            keep_evidence(runner, tail, keep)
        return Report(
            seed=seed,
            events=len(schedule),
            found=found,
            noops=runner.noops,
            harness=runner.harness,
            duration_s=time.monotonic() - began,
            convergence_s=convergence,
            interventions=interventions,
            final_status=status,
            event_files=tail.files,
            torn_lines=tail.torn,
            notes=runner.notes,
        )
    finally:
        if lab is not None:
            lab.end_all()
        if tail is not None:
            tail.close()
        shutil.rmtree(root, ignore_errors=True)


def seed_range(text: str) -> list[int]:
    """``"3"`` -> [3]; ``"1-10"`` -> [1, ..., 10] (for ``--seeds``)."""
    first, _, last = text.partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a seed or a range such as 1-10") from None
    if high < low:
        raise argparse.ArgumentTypeError(f"{text!r}: the range runs backwards")
    return list(range(low, high + 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=500, help="scheduled events (default 500)")
    parser.add_argument("--seed", type=int, default=1, help="schedule seed (default 1)")
    parser.add_argument(
        "--seeds", type=seed_range, help="run these seeds in turn (A-B) and summarise them"
    )
    parser.add_argument("--keep", type=Path, help="copy the evidence (logs, processes) here")
    parser.add_argument(
        "--state-damage",
        default=",".join(STATE_DAMAGE),
        help=f"how corrupt_state damages .state (default {','.join(STATE_DAMAGE)})",
    )
    args = parser.parse_args(argv)
    damage = tuple(d for d in args.state_damage.split(",") if d)
    if not damage or set(damage) - set(STATE_DAMAGE):
        parser.error(f"--state-damage: choose from {', '.join(STATE_DAMAGE)}")
    if args.seeds is not None and args.keep is not None:
        parser.error("--keep takes one run: use --seed with it")
    reports = []
    for seed in args.seeds or [args.seed]:
        report = run(args.events, seed, keep=args.keep, state_damage=damage)
        print(report.render(), flush=True)
        reports.append(report)
    if args.seeds is not None:
        failed = sum(not r.ok for r in reports)
        print(f"\nchaos: {len(reports)} seeds of {args.events} events, {failed} failed")
        print(SUMMARY_HEADER)
        print("\n".join(r.row() for r in reports), flush=True)
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
