"""``--backend etcd``: the chaos run against a real 3-member etcd (``make chaos-etcd``).

The run starts its own cluster (tests/support/etcd_cluster.py, under the
run directory), gives every child ``HIGHLANDER_BACKEND`` naming it, one
project id for the run, a short lease (``HIGHLANDER_ETCD_TTL``, 3 s by
default) and the simulated host its step drew (``HIGHLANDER_HOST_ID``), and
runs the etcd schedule (scripts/chaos/etcd_schedule.py: what it draws and
what it leaves out, and why).  The settling heals the cluster, resumes
every stopped process and starts one more newcomer; the run has converged
when exactly one live process passes ``check_current()`` and the holder key
in etcd names it (scripts/chaos/etcd_runner.py).  Then every child and every
member is ended by its pid, and the local judge (with the lease's evidence)
and the etcd judge (scripts/chaos/etcd_check.py) read the evidence.

    .venv/bin/python -m scripts.chaos --backend etcd --events 300 --seed 1
    .venv/bin/python -m scripts.chaos --backend etcd --events 300 --seed 2 --keep /tmp/ev2

``--keep DIR`` keeps what the local run keeps, plus the members' own logs
(``etcd/``), the member faults with their times (``member-faults.json``) and
the run's etcd settings (``etcd.json``).  A failing run keeps its evidence
without being asked, in ``/tmp/highlander-chaos-etcd-evidence-seedN-*``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from scripts.chaos.check import judge
from scripts.chaos.etcd_check import judge_etcd, lease_evidence, wedge_bound
from scripts.chaos.etcd_report import EtcdReport
from scripts.chaos.etcd_runner import EtcdRunner, members_left
from scripts.chaos.etcd_schedule import make_etcd_schedule, settler_host
from scripts.chaos.log import (
    CheckLine,
    EventTail,
    SaveLine,
    Witness,
    read_checks,
    read_saves,
    read_witness,
)
from scripts.chaos.process import Proc
from scripts.chaos.procs import Lab
from tests.support.etcd_cluster import Cluster, start_cluster

#: The lease TTL every child uses (seconds): short, to keep fences and expiries short.
DEFAULT_TTL = 3
#: How long the drain lets newcomers still in flight finish (a hang guard).
DRAIN_S = 30.0


def _keep_member_logs(cluster: Cluster, into: Path) -> None:
    """Copy each member's log (``Cluster.close`` deletes them)."""
    into.mkdir(parents=True, exist_ok=True)
    for member in cluster.members:
        log = member.data_dir.parent / f"{member.name}.log"
        if log.exists():
            shutil.copy(log, into / log.name)


@dataclass
class Facts:
    """What the harness saw of a run, beside the evidence files (``run.json`` when kept)."""

    seed: int
    events: int
    ttl: int
    #: When the harness began ending every process, and the one holder then (its pid).
    ended_ns: int | None
    final_pid: int | None
    duration_s: float
    convergence_s: float | None
    interventions: int
    final_status: dict[str, Any] | None
    left_behind: list[str]
    members_left: list[str]
    final_problems: list[str]
    notes: list[str]
    noops: dict[str, int]
    harness: dict[str, int]
    #: (began, ended, what) of each member fault (monotonic ns).
    faults: list[tuple[int, int, str]]
    torn_lines: int = 0
    #: (before, after, what) of each reign the harness ended in etcd (``etcd_end_reign``).
    losses: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass
class Evidence:
    """The evidence a run is judged by: its processes, events, and the children's logs."""

    procs: list[Proc]
    events: list[dict[str, Any]]
    witness: list[Witness]
    clock: list[tuple[float, int]]
    saves: list[SaveLine]
    checks: list[CheckLine]


def verdict(evidence: Evidence, facts: Facts) -> EtcdReport:
    """Judge ``evidence`` (the local judge with the lease's hook, then the etcd judge)."""
    ev = evidence
    found = judge(
        ev.procs,
        ev.events,
        ev.witness,
        ev.clock,
        saves=ev.saves,
        end_ns=facts.ended_ns,
        checks=ev.checks,
        losses=[(b, a, w) for b, a, w in facts.losses],
        backend=lease_evidence(ev.checks, ev.clock),
        wedge_bound=wedge_bound(facts.ttl),
    )
    final = next((p for p in ev.procs if p.role == "child" and p.pid == facts.final_pid), None)
    etcd = judge_etcd(
        ev.procs,
        ev.events,
        ev.clock,
        found,
        end_ns=facts.ended_ns,
        final=final,
        faults=[(b, e, w) for b, e, w in facts.faults],
        losses=[(b, a, w) for b, a, w in facts.losses],
        ttl=facts.ttl,
        checks=ev.checks,
    )
    return EtcdReport(
        seed=facts.seed,
        events=facts.events,
        found=found,
        noops=Counter(facts.noops),
        harness=Counter(facts.harness),
        duration_s=facts.duration_s,
        convergence_s=facts.convergence_s,
        interventions=facts.interventions,
        final_status=facts.final_status,
        torn_lines=facts.torn_lines,
        notes=list(facts.notes),
        emitted_events=len(ev.events),
        etcd=etcd,
        ttl=facts.ttl,
        left_behind=facts.left_behind,
        members_left=facts.members_left,
        final_problems=facts.final_problems,
        switched=Counter(),
    )


def run_etcd(
    events: int,
    seed: int,
    say: Callable[[str], None] | None = None,
    keep: Path | None = None,
    ttl: int = DEFAULT_TTL,
) -> EtcdReport:
    """Run ``events`` scheduled etcd events for ``seed``; return the judged report."""
    from scripts.chaos.main import keep_evidence  # noqa: PLC0415 (main imports this module)

    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    schedule = make_etcd_schedule(seed, events)
    root = Path(tempfile.mkdtemp(prefix="highlander-chaos-etcd-"))
    cluster: Cluster | None = None
    lab: Lab | None = None
    tail: EventTail | None = None
    began = time.monotonic()
    try:
        cluster = start_cluster(root / "etcd")
        lab = Lab(root, subreaper=True)
        tail = EventTail(str(lab.mirror))
        settings = {
            "HIGHLANDER_BACKEND": cluster.backend,
            "HIGHLANDER_PROJECT_ID": f"chaos-etcd/seed-{seed}/{uuid.uuid4().hex}",
            "HIGHLANDER_ETCD_TTL": str(ttl),
        }
        runner = EtcdRunner(lab, tail, say, cluster, settings, settler_host(seed))
        say(f"chaos (etcd): cluster {cluster.backend}, TTL {ttl} s, {len(schedule)} steps")
        runner.run(schedule)
        convergence, interventions = runner.settle(schedule)
        runner.drain(DRAIN_S)
        runner.poll()
        runner.finish()
        # The one holder after the drain (finish() lists it if there is not exactly one).
        final = next((p for p in lab.live_children() if p.believes), None)
        lab.end_all()
        runner.poll()
        _keep_member_logs(cluster, root / "etcd-logs")
        cluster.close()
        facts = Facts(
            seed=seed,
            events=len(schedule),
            ttl=ttl,
            ended_ns=lab.ended_ns,
            final_pid=final.pid if final is not None else None,
            duration_s=time.monotonic() - began,
            convergence_s=convergence,
            interventions=interventions,
            final_status=runner.final_status,
            left_behind=runner.left_behind,
            members_left=members_left(cluster),
            final_problems=runner.final_problems,
            notes=runner.notes,
            noops=dict(runner.noops),
            harness=dict(runner.harness),
            faults=runner.fault_spans,
            torn_lines=tail.torn,
            losses=runner.losses,
        )
        evidence = Evidence(
            lab.procs,
            tail.events(),
            read_witness(lab.kids.witness),
            lab.clock,
            read_saves(lab.saves),
            read_checks(lab.checks),
        )
        report = verdict(evidence, facts)
        if keep is None and not report.ok:
            # A failure found under load may not come back: never lose its evidence.
            keep = Path(tempfile.mkdtemp(prefix=f"highlander-chaos-etcd-evidence-seed{seed}-"))
            report.notes.append(f"the run failed: its evidence is kept in {keep}")
        if keep is not None:
            keep_evidence(runner, tail, keep)
            (keep / "run.json").write_text(json.dumps(asdict(facts), indent=0))
            (keep / "report.txt").write_text(replace(report, show=10**9).render() + "\n")
            shutil.copytree(root / "etcd-logs", keep / "etcd", dirs_exist_ok=True)
            (keep / "member-faults.json").write_text(json.dumps(runner.fault_spans, indent=0))
            (keep / "etcd.json").write_text(json.dumps({**settings, "seed": seed}, indent=0))
        return report
    finally:
        if lab is not None:
            lab.end_all()
        if cluster is not None:
            cluster.close()  # by pid, each member; twice is harmless
        if tail is not None:
            tail.close()
        shutil.rmtree(root, ignore_errors=True)
