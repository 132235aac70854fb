"""The chaos run's summary: the numbers, which of them must be zero, and the verdict."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scripts.chaos.counters import WEDGE_BOUND
from scripts.chaos.current import DETECTION_BOUND_NS
from scripts.chaos.findings import Findings
from scripts.chaos.process import INF

#: Convergence after the last event must take less than this (seconds).
CONVERGENCE_BOUND = 20.0
#: How many lines of each violation list the summary prints.
SHOW = 10


@dataclass
class Report:
    """One run: what was done, what was found, and how it settled."""

    seed: int
    events: int
    found: Findings
    noops: Counter[str] = field(default_factory=Counter)
    harness: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0
    convergence_s: float | None = None
    interventions: int = 0
    final_status: dict[str, Any] | None = None
    event_files: int = 0
    torn_lines: int = 0
    notes: list[str] = field(default_factory=list)
    #: Issue #11: files a ``switch_location`` newcomer left in its other XDG_RUNTIME_DIR.
    switched_files: list[str] = field(default_factory=list)
    #: How each ``switch_location`` newcomer ended.
    switched: Counter[str] = field(default_factory=Counter)
    #: Forking holders SIGKILLed with their worker alive; longest wait for the next claim.
    fork_kills: tuple[int, float] = (0, 0.0)
    #: Events in the project's own log (the judge reads the children's mirror of it).
    project_log_events: int = 0
    emitted_events: int = 0

    def must_be_zero(self) -> dict[str, list[str]]:
        f = self.found
        checks = {
            "double holders": f.double_holders,
            "signals to a process that was not the verified incumbent": f.wrong_signals,
            "deaths by a signal nobody logged": f.unlogged_deaths,
            "bystanders signalled": f.bystanders_hurt,
            "lost handoffs": f.lost_handoffs,
            "legacy locks of live processes removed": f.wrong_legacy,
            "stdout bytes written by children": ["bytes"] * f.stdout_bytes,
            "uncaught exceptions in Highlander processes": f.crashes,
            "invalid messages between Highlander processes": f.bad_messages,
            "healthy holders signalled": f.healthy_signalled,
            "wedged projects": f.wedged,
            "concurrent saves": f.concurrent_saves,
            "check_current() passes at the same moment": f.simultaneous,
            "forked workers that kept the project": f.workers_kept,
            "files left in a switched XDG_RUNTIME_DIR/TMPDIR": self.switched_files,
        }
        if self.convergence_s is None or self.convergence_s > CONVERGENCE_BOUND:
            checks["convergence within the bound"] = [f"{self.convergence_s}"]
        return checks

    @property
    def ok(self) -> bool:
        return not any(self.must_be_zero().values())

    def _issue_11_lines(self) -> list[str]:
        f = self.found
        checks = f.checks
        kills, longest = self.fork_kills
        wait = "-" if not kills else "never" if longest == INF else f"{longest:.2f} s"
        ran = max((ns for ns, _, _ in f.excused.values()), default=0.0) / 1e6
        out = sum(handover for _, _, handover in f.excused.values())
        switched = ", ".join(f"{v} {k}" for k, v in self.switched.most_common()) or "none"
        return [
            "  check_current() passes at the same moment (must be 0): "
            f"{len(f.simultaneous)} (checks: {checks['pass']} passed, {checks['fail']} failed, "
            f"by {checks['processes']} processes; {checks['unattributed']} unattributed)",
            f"  forked workers that kept the project (must be 0): {len(f.workers_kept)} "
            f"(workers: {f.workers}; holders SIGKILLed with their worker alive: {kills}, "
            f"longest wait for the next claim: {wait})",
            "  files left in a switched XDG_RUNTIME_DIR/TMPDIR (must be 0): "
            f"{len(self.switched_files)} (switch_location newcomers: {switched})",
            "  holders overlapping a newer one after their rendezvous was taken, within the "
            f"detection bound ({DETECTION_BOUND_NS / 1e9:g} s of running, + request with a "
            f"handover out): {len(f.excused)} (longest {ran:.1f} ms; {out} with a handover "
            f"out; {f.stale_acks} such handovers committed after a newer claim)",
        ]

    def row(self) -> str:
        """One line of a ``--seeds`` summary (a Markdown table row)."""
        f = self.found
        failed = [name for name, items in self.must_be_zero().items() if items]
        conv = "never" if self.convergence_s is None else f"{self.convergence_s:.2f} s"
        return (
            f"| {self.seed} | {'PASS' if self.ok else 'FAIL'} | {self.duration_s:.0f} s "
            f"| {f.claims.get('succeeded', 0)} | {f.handoffs_kept} | {f.kills} "
            f"| {self.harness.get('SIGKILL', 0)} | {conv} | {', '.join(failed) or '-'} |"
        )

    def render(self) -> str:
        f = self.found
        successions = f.claims.get("succeeded", 0)
        claims = ", ".join(f"{k} {v}" for k, v in sorted(f.claims.items()))
        hung = ", ".join(f"{k} {v}" for k, v in sorted(f.hung.items())) or "none"
        harness = ", ".join(f"{k} {v}" for k, v in sorted(self.harness.items())) or "none"
        noops = sum(self.noops.values())
        newcomers = "; ".join(f"{v} {k}" for k, v in f.newcomers.most_common())
        conv = "never" if self.convergence_s is None else f"{self.convergence_s:.2f} s"
        fair = ", ".join(f"{k} {v}" for k, v in sorted(f.fair_signals.items())) or "none"
        lines = [
            f"chaos: seed {self.seed}: {self.events} events run in {self.duration_s:.1f} s "
            f"({noops} of them no-ops: {dict(self.noops) or 'none'})",
            f"  newcomers: {sum(f.newcomers.values())} ({newcomers})",
            f"  claims: {sum(f.claims.values())} ({claims})",
            f"  successions (claimed outcome=succeeded): {successions} (no timely ACK after "
            f"SAVED: {f.abandoned}; handovers declined after SAVED, incumbent kept: "
            f"{f.handovers_aborted})",
            f"  kills by Highlander (terminated/killed events): {f.kills} (hung: {hung})",
            f"  healthy holders signalled (must be 0): {len(f.healthy_signalled)} (fair "
            f"targets: {fair})",
            f"  wedged projects (must be 0): {len(f.wedged)} (bound {WEDGE_BOUND:g} s; longest "
            f"wait for a verdict: {f.longest_wait[0]:.1f} s, {f.longest_wait[1] or '-'})",
            f"  concurrent saves (must be 0): {len(f.concurrent_saves)} (saves: {f.saves})",
            *self._issue_11_lines(),
            f"  harness actions: {harness}",
            f"  double holders (must be 0): {len(f.double_holders)}",
            "  signals to a process that was not the verified incumbent (must be 0): "
            f"{len(f.wrong_signals)} (from a successor to its deposed predecessor: "
            f"{f.exit_kills}; from a later holder to a deposed one it inherited: "
            f"{f.inherited_exit_kills}; to an incumbent already exiting: {f.late_signals}; to an "
            f"incumbent between its ACK or claim and its acquire line: {f.before_acquire}; "
            f"to a wiped holder from the newcomer it sent SAVED to: {f.stale_kills}; "
            f"to a holder between its ACK and letting go of the lock: {f.acked_holding}; "
            f"SIGKILLs escalating such a fair SIGTERM: {f.escalations})",
            f"  deaths by a signal nobody logged (must be 0): {len(f.unlogged_deaths)}",
            f"  bystanders signalled (must be 0): {len(f.bystanders_hurt)}",
            f"  lost handoffs (must be 0): {len(f.lost_handoffs)} "
            f"(handoffs passed intact: {f.handoffs_kept})",
            "  holder died without a save (counter restarts, reported separately): "
            f"{f.reset_sigkill} SIGKILLed by the harness, "
            f"{f.reset_hang_kill} killed by Highlander after a hang; "
            f"{f.reset_rendezvous} fresh after the rendezvous was taken (wipe, plant at the lock)",
            f"  legacy locks: {dict(f.legacy) or 'none'}; removed while naming a live "
            f"process (must be 0): {len(f.wrong_legacy)}",
            f"  stdout bytes written by children (must be 0): {f.stdout_bytes}",
            f"  generation not advancing by exactly one: {len(f.generation_jumps)} "
            "(each after a corrupted or planted .state)",
            "  invalid messages between Highlander processes (must be 0): "
            f"{len(f.bad_messages)} (a newcomer failed on SAVED's descriptors counts)",
            f"  uncaught exceptions in Highlander processes (must be 0): {len(f.crashes)} "
            f"(CPython at-fork hook warnings of logging, apart: {f.fork_hook_races})",
            f"  convergence after the last event: {conv} (bound {CONVERGENCE_BOUND:g} s; "
            f"operator interventions: {self.interventions})",
        ]
        if self.final_status is not None:
            s = self.final_status
            lines.append(
                f"  final `highlander status --json`: held={s.get('held')} "
                f"answers={s.get('answers')} pid={s.get('pid')} generation={s.get('generation')}"
            )
        lines.append(
            f"  evidence: {len(f.reigns)} reigns, {self.emitted_events} events emitted "
            f"({self.project_log_events} of them found in the project's own log, "
            f"{self.event_files} file(s), {self.torn_lines} torn line(s)), "
            f"{len(f.anomalies)} anomalies"
        )
        for title, items in [
            *self.must_be_zero().items(),
            ("generation jumps", f.generation_jumps),
            ("anomalies", f.anomalies),
            ("notes", self.notes),
        ]:
            if items and title != "stdout bytes written by children":
                lines.append(f"  {title}:")
                lines += [f"    - {item}" for item in items[:SHOW]]
                if len(items) > SHOW:
                    lines.append(f"    ... and {len(items) - SHOW} more")
        lines.append("RESULT: " + ("PASS" if self.ok else "FAIL"))
        return "\n".join(lines)


#: Header of the ``--seeds`` summary table (see :meth:`Report.row`).
SUMMARY_HEADER = (
    "| seed | result | duration | successions | handoffs kept | kills by Highlander "
    "| harness SIGKILLs | convergence | failed checks |\n"
    "|---|---|---|---|---|---|---|---|---|"
)
