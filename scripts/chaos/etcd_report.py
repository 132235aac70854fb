"""The etcd chaos run's summary: the local report's numbers that apply, and the lease's own."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scripts.chaos.etcd_check import EtcdFindings, wedge_bound
from scripts.chaos.report import CONVERGENCE_BOUND, SHOW, Report

#: Must-be-zero lists of the local report that have no meaning on etcd (always empty).
_LOCAL_ONLY = (
    "legacy locks of live processes removed",
    "files left in a switched XDG_RUNTIME_DIR/TMPDIR",
)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counter.most_common()) or "none"


@dataclass
class EtcdReport(Report):
    """One etcd run: the local :class:`Report` plus what the lease adds."""

    etcd: EtcdFindings = field(default_factory=EtcdFindings)
    ttl: int = 0
    #: Children alive after the drain besides the holder; members alive after the close.
    left_behind: list[str] = field(default_factory=list)
    members_left: list[str] = field(default_factory=list)
    #: What is wrong with the end state: not one live holder, named by the key, passing.
    final_problems: list[str] = field(default_factory=list)
    #: How many lines of each list to print (the kept evidence prints them all).
    show: int = SHOW

    def must_be_zero(self) -> dict[str, list[str]]:
        """The local report's lists that apply on etcd, and the etcd judge's."""
        checks = {k: v for k, v in super().must_be_zero().items() if k not in _LOCAL_ONLY}
        e = self.etcd
        checks.update(
            {
                "signals to a process on another host": e.other_host_signals,
                "handoffs applied twice": e.applied_twice,
                "holders replaced without a handover that did not step down by themselves": (
                    e.not_stepped_down
                ),
                "processes left behind after the drain": self.left_behind,
                "etcd members left running": self.members_left,
                "end state not one live holder, named by the key, passing check_current()": (
                    self.final_problems
                ),
            }
        )
        return checks

    def render(self) -> str:
        """The summary: figures, every must-be-zero number, the lists, the verdict."""
        f, e = self.found, self.etcd
        noops = sum(self.noops.values())
        successions = f.claims.get("succeeded", 0)
        conv = "never" if self.convergence_s is None else f"{self.convergence_s:.2f} s"
        checks = f.checks
        zero = {k: len(v) for k, v in self.must_be_zero().items()}
        lines = [
            f"chaos (etcd, TTL {self.ttl} s): seed {self.seed}: {self.events} events run in "
            f"{self.duration_s:.1f} s ({noops} of them no-ops: {dict(self.noops) or 'none'})",
            f"  newcomers: {sum(f.newcomers.values())} ({_counts(f.newcomers)})",
            f"  claims: {sum(f.claims.values())} ({_counts(f.claims)})",
            f"  successions (claimed outcome=succeeded): {successions} ({e.across} across "
            f"hosts, {e.same_host} on one host; no timely ACK after SAVED: {f.abandoned}; "
            f"handovers declined after SAVED: {f.handovers_aborted})",
            f"  handoffs passed intact: {f.handoffs_kept}; fresh reigns without the state: "
            f"{_counts(f.reset_lease)} (by lease), {f.reset_sigkill} after a harness SIGKILL, "
            f"{f.reset_hang_kill} after a kill by Highlander, {f.reset_rendezvous} after "
            "the harness ended a reign in etcd",
            f"  fences: {sum(e.fences.values())} (target {_counts(e.fences)})",
            f"  lease_lost step-downs: {sum(e.lease_lost.values())} ({_counts(e.lease_lost)})",
            f"  reigns ended at a SIGSTOP never come back from as holder: {e.stop_cuts}",
            f"  double holders (witness, relinquished): {len(f.double_holders)}, of them "
            f"{e.late_notices} between consecutive reigns whose older one had stopped "
            "passing check_current() before the newer acquired (told late, not proven twice)",
            f"  kills by Highlander (terminated/killed events, all on one host): {f.kills} "
            f"(hung: {_counts(f.hung)}; fair targets: {_counts(f.fair_signals)})",
            f"  check_current(): {checks['pass']} passes, {checks['fail']} fails, by "
            f"{checks['processes']} processes ({checks['unattributed']} unattributed)",
            f"  forked workers: {f.workers}; saves: {f.saves}; longest wait for a verdict: "
            f"{f.longest_wait[0]:.1f} s (wedge bound {wedge_bound(self.ttl):g} s)",
            f"  harness actions: {_counts(self.harness)}",
            f"  convergence after the last event: {conv} (bound {CONVERGENCE_BOUND:g} s; "
            f"operator interventions: {self.interventions})",
            f"  final holder key: {self._final()}",
            f"  evidence: {len(f.reigns)} reigns, {self.emitted_events} events emitted, "
            f"{self.torn_lines} torn line(s), {len(f.anomalies)} anomalies",
            "  must be 0:",
            *(f"    {name}: {count}" for name, count in zero.items()),
        ]
        for title, items in [
            *self.must_be_zero().items(),
            ("anomalies", f.anomalies),
            ("generation jumps", f.generation_jumps),
            ("notes", self.notes),
        ]:
            if items and title != "stdout bytes written by children":
                lines.append(f"  {title}:")
                lines += [f"    - {item}" for item in items[: self.show]]
                if len(items) > self.show:
                    lines.append(f"    ... and {len(items) - self.show} more")
        lines.append("RESULT: " + ("PASS" if self.ok else "FAIL"))
        return "\n".join(lines)

    def _final(self) -> str:
        s: dict[str, Any] | None = self.final_status
        if s is None:
            return "not read"
        if not s.get("answers"):
            return "no member answered"
        return f"pid {s.get('pid')} on {s.get('host')}, generation {s.get('generation')}"
