"""`make chaos`: a seeded storm of starts, kills, pauses and file damage against one project.

One project, one fresh runtime directory, mounted as a 4 MiB tmpfs when the
harness may mount (root; otherwise it says so once and the disk steps are
counted no-ops).  ``random.Random(seed)`` draws the whole schedule up front
(scripts/chaos/schedule.py): newcomers (AUTO) whose own save is quick, slow
but advancing, or hanging; newcomers whose first ACK lands at the
incumbent's ACK deadline, that stop themselves between SAVED and their ACK
(then SIGCONT, SIGKILL or left stopped), or that run under RLIMIT_NOFILE 48;
storms of 64 newcomers; SIGKILL or SIGSTOP of the holder (SIGCONT later, or
left for a newcomer to kill) and of newcomers in flight; the socket file
deleted or replaced by a regular file, a stale socket, a FIFO, a symlink or
a directory (removed a few steps later, as an operator would); the
``.state`` record damaged (not JSON, cut short, empty, wrongly typed, or
naming an impossible pid or generation); the disk filled to ENOSPC (and
freed a few steps later); a stale legacy lock; an unrelated ``sleep`` whose
pid is written into ``.state``.  Issue #11's faults: the runtime directory
wiped under the holder (its contents, or only lock and socket); a newcomer
whose XDG_RUNTIME_DIR and TMPDIR point elsewhere; a FIFO, directory or
symlink planted at ``.state``, ``.events.jsonl``, the socket or the lock
(removed a few steps later when it blocks newcomers); a holder that forks a
long-lived worker and is then SIGKILLed.  The holders are
tests/programs/child.py with small timeouts; each appends acquire/release
lines to a witness log, start/end lines of each save to a save log,
``check_current()`` results every 20 ms to a check log, mirrors every event
it emits to a file outside the runtime directory (the judge's event log),
and counts ``handoff counter + 1``.

After the last event the harness resumes what it promised to resume (and
every newcomer that stopped itself, and every holder stopped when its
rendezvous was taken), frees the disk, removes a directory at the socket
path and every plant, starts one more newcomer and times how long until exactly
one live holder answers a signed STATUS.  Then it ends every process it
started (by pidfd), judges the evidence (scripts/chaos/check.py,
scripts/chaos/counters.py) and prints the summary; the exit status is 1 when
a must-be-zero number is not zero.

    .venv/bin/python -m scripts.chaos --events 500 --seed 1
    .venv/bin/python -m scripts.chaos --events 100 --seed 2 --keep /tmp/evidence
    .venv/bin/python -m scripts.chaos --state-damage garbage,truncated,empty
    .venv/bin/python -m scripts.chaos --events 500 --seeds 1-10   # = make chaos-many

``--backend etcd`` runs the same harness against a real 3-member etcd it
starts itself, with the faults that mean something there (the cluster's
own among them) and without the local-only ones: scripts/chaos/etcd_main.py
(``make chaos-etcd`` = ``--backend etcd --events 300 --seed 1``).

``--seeds A-B`` runs each seed in turn (each its own project and runtime
directory), prints every report, then one summary table; the exit status is
1 if any seed failed.

``--keep DIR`` copies the evidence (the emitted events, the project's own log,
witness, save and check logs, every process with its stderr, the steps as run,
the moments the rendezvous was taken) before the run directory goes.  A run
that fails keeps its evidence even without ``--keep`` (in a new
``/tmp/highlander-chaos-evidence-seedN-*`` directory its report names): a
failure found under load may not come back on the next run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from scripts.chaos.check import judge
from scripts.chaos.counters import newcomers
from scripts.chaos.current import claims_after_fork_kills
from scripts.chaos.log import EventTail, read_checks, read_saves, read_witness
from scripts.chaos.procs import Lab
from scripts.chaos.rendezvous import files_under
from scripts.chaos.report import SUMMARY_HEADER, Report
from scripts.chaos.runner import Runner
from scripts.chaos.schedule import STATE_DAMAGE, make_schedule


def keep_evidence(runner: Runner, tail: EventTail, keep: Path) -> None:
    """Copy the evidence of a run to ``keep`` (the runtime directory itself is removed)."""
    lab = runner.lab
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "steps.json").write_text(json.dumps(runner.log, indent=0))
    (keep / "losses.json").write_text(json.dumps(runner.losses, indent=0))
    for name, events in (("events.jsonl", tail), *(("project-log.jsonl", t) for t in runner.also)):
        with open(keep / name, "w") as out:
            out.writelines(json.dumps(e) + "\n" for e in events.events())
    for name, path in (
        ("witness.log", lab.kids.witness),
        ("saves.log", lab.saves),
        ("checks.log", lab.checks),
    ):
        if path.exists():
            shutil.copy(path, keep / name)
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
    runner: Runner | None = None
    tail = project_log = None
    began = time.monotonic()
    try:
        lab = Lab(root, tmpfs=True, subreaper=True)
        refused = lab.tmpfs_refused
        if refused is not None:
            say(f"chaos: no tmpfs at the runtime dir ({refused}): fill_disk/free_disk are no-ops")
        # The evidence: every event as the children emitted it (the project's own log
        # is wiped and planted over by the chaos; it is read too, and counted).
        tail, project_log = EventTail(str(lab.mirror)), EventTail(lab.paths.events)
        runner = Runner(lab, tail, say, disk=refused is None, also=(project_log,))
        if refused is not None:
            runner.notes.append(f"no tmpfs at the runtime dir ({refused}): disk steps no-ops")
        runner.run(schedule)
        convergence, interventions = runner.settle(schedule)
        runner.drain()
        status = runner.cli_status()
        lab.end_all()
        runner.poll()
        logged = tail.events()
        found = judge(
            lab.procs,
            logged,
            read_witness(lab.kids.witness),
            lab.clock,
            saves=read_saves(lab.saves),
            end_ns=lab.ended_ns,
            checks=read_checks(lab.checks),
            losses=runner.losses,
        )
        switched = Counter(
            f"held ({p.ready.get('outcome')})" if p.ready else next(iter(newcomers([p])[0]))
            for p in runner.switched
        )
        report = Report(
            seed=seed,
            events=len(schedule),
            found=found,
            noops=runner.noops,
            harness=runner.harness,
            duration_s=time.monotonic() - began,
            convergence_s=convergence,
            interventions=interventions,
            final_status=status,
            event_files=project_log.files,
            torn_lines=project_log.torn + tail.torn,
            notes=runner.notes,
            switched_files=files_under(root / "switched"),
            switched=switched,
            fork_kills=claims_after_fork_kills(runner.fork_kills, logged, lab.clock),
            project_log_events=len(project_log.lines),
            emitted_events=len(tail.lines),
        )
        if keep is None and not report.ok:
            # A failure found under load may not come back: never lose its evidence.
            keep = Path(tempfile.mkdtemp(prefix=f"highlander-chaos-evidence-seed{seed}-"))
            report.notes.append(f"the run failed: its evidence is kept in {keep}")
        if keep is not None:
            keep_evidence(runner, tail, keep)
        return report
    finally:
        if runner is not None:
            runner.starver.feed()  # its busy loop, by pid, whatever happened
        if lab is not None:
            lab.end_all()
        for log in (tail, project_log):
            if log is not None:
                log.close()
        if lab is not None:
            lab.unmount()
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
    parser = argparse.ArgumentParser(
        prog="python -m scripts.chaos", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("--events", type=int, default=500, help="scheduled events (default 500)")
    parser.add_argument("--seed", type=int, default=1, help="schedule seed (default 1)")
    parser.add_argument(
        "--seeds", type=seed_range, help="run these seeds in turn (A-B) and summarise them"
    )
    parser.add_argument("--keep", type=Path, help="copy the evidence (logs, processes) here")
    parser.add_argument(
        "--backend",
        choices=("local", "etcd"),
        default="local",
        help="where the holders meet: this machine (default) or a 3-member etcd run here",
    )
    parser.add_argument(
        "--etcd-ttl", type=int, default=3, help="with --backend etcd: the lease TTL (default 3 s)"
    )
    parser.add_argument(
        "--state-damage",
        default=",".join(STATE_DAMAGE),
        help=f"how corrupt_state damages .state (default {','.join(STATE_DAMAGE)})",
    )
    args = parser.parse_args(argv)
    # A SIGTERM (timeout(1), a CI runner) unwinds like Ctrl-C: every child is
    # ended by its pid and the tmpfs unmounted, instead of left behind.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    damage = tuple(d for d in args.state_damage.split(",") if d)
    if not damage or set(damage) - set(STATE_DAMAGE):
        parser.error(f"--state-damage: choose from {', '.join(STATE_DAMAGE)}")
    if args.seeds is not None and args.keep is not None:
        parser.error("--keep takes one run: use --seed with it")
    if args.backend == "etcd" and args.etcd_ttl < 2:
        parser.error("--etcd-ttl: at least 2 (etcd's own minimum)")
    reports: list[Report] = []
    report: Report
    for seed in args.seeds or [args.seed]:
        if args.backend == "etcd":
            from scripts.chaos.etcd_main import run_etcd  # noqa: PLC0415 (it imports this module)

            report = run_etcd(args.events, seed, keep=args.keep, ttl=args.etcd_ttl)
        else:
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
