"""What the chaos judge found (scripts/chaos/check.py): the reigns, and every count.

``Findings`` holds the must-be-zero lists (the report, scripts/chaos/report.py,
names them) and the numbers printed beside them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scripts.chaos.process import INF, Proc


@dataclass
class Reign:
    """One claim of the project, from its ``claimed`` event, joined with the witness log."""

    proc: Proc | None
    pid: int
    generation: int
    outcome: str
    ts: float
    acquire_ns: int | None = None
    release_ns: int | None = None
    #: When Highlander sent it a signal it could not survive (SIGKILL, or SIGTERM while running).
    fatal_ns: float | None = None
    #: Its ``relinquished`` event: the library had let go of the lock (``is_holder`` false).
    relinquished_ns: float | None = None
    #: The pid its ``claimed`` event names as its predecessor (a succession).
    predecessor: int | None = None
    #: The process it acknowledged as its successor (``acked``), if any.
    successor: Proc | None = None
    #: It stepped down because its lock file or directory was taken (``lost_rendezvous``).
    lost: bool = False
    #: (etcd) How its lease ended without a handover: "fenced" or "lease ran out".
    lease_ended: str | None = None
    #: (etcd) When the harness stopped it, if it never began a passing
    #: ``check_current()`` after that: it acted as holder no more from then on.
    stop_cut_ns: float | None = None

    @property
    def counter(self) -> int | None:
        ready = self.proc.ready if self.proc else None
        return ready.get("counter") if ready else None

    @property
    def handoff(self) -> dict[str, Any] | None:
        ready = self.proc.ready if self.proc else None
        return ready.get("handoff") if ready else None

    def end_ns(self) -> float:
        return self.ending()[0]

    def ending(self) -> tuple[float, str]:
        """When this reign ended, and by what evidence."""
        p = self.proc
        ends = [
            (self.release_ns, "release line"),
            (p.killed_ns if p else None, "harness SIGKILL"),
            (self.fatal_ns, "Highlander's fatal signal (event time)"),
            (self.relinquished_ns, "its relinquished event"),
            (self.stop_cut_ns, "stopped, never passing check_current() again"),
            (p.exit_ns if p else None, f"observed exit, status {p.returncode if p else None}"),
        ]
        known = [(float(ns), how) for ns, how in ends if ns is not None]
        return min(known) if known else (INF, "still alive")


@dataclass
class Findings:
    """Everything the checks found; ``violations`` are the must-be-zero lists."""

    reigns: list[Reign] = field(default_factory=list)
    claims: Counter[str] = field(default_factory=Counter)
    kills: int = 0
    hung: Counter[str] = field(default_factory=Counter)
    #: Holders whose successor left after SAVED (``timeout`` in phase ``ack``).
    abandoned: int = 0
    #: Messages with an invalid field between processes of this run (no attacker here).
    bad_messages: list[str] = field(default_factory=list)
    double_holders: list[str] = field(default_factory=list)
    wrong_signals: list[str] = field(default_factory=list)
    late_signals: int = 0
    #: Signals to the incumbent after its ACK or claim but before its acquire line.
    before_acquire: int = 0
    #: Signals from a successor to the predecessor that acknowledged it (missed exit).
    exit_kills: int = 0
    #: Signals from the holder of the moment to a deposed holder whose successor
    #: ended before it had left (the exit owed, inherited through the record).
    inherited_exit_kills: int = 0
    #: Signals to a holder that acknowledged a successor but had not logged
    #: ``relinquished`` (so not let go of the lock) yet: stopped in between.
    acked_holding: int = 0
    unlogged_deaths: list[str] = field(default_factory=list)
    bystanders_hurt: list[str] = field(default_factory=list)
    lost_handoffs: list[str] = field(default_factory=list)
    handoffs_kept: int = 0
    reset_sigkill: int = 0
    reset_hang_kill: int = 0
    #: (etcd) Fresh reigns after the last one was fenced or its lease ran out, by how.
    reset_lease: Counter[str] = field(default_factory=Counter)
    generation_jumps: list[str] = field(default_factory=list)
    legacy: Counter[str] = field(default_factory=Counter)
    wrong_legacy: list[str] = field(default_factory=list)
    newcomers: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    #: CPython's at-fork hook warnings (not exceptions of the process; see Proc.fork_hook_races).
    fork_hook_races: int = 0
    stdout_bytes: int = 0
    anomalies: list[str] = field(default_factory=list)
    #: Processes Highlander signalled (by identity), and which signals.
    signalled: dict[int, set[str]] = field(default_factory=dict)
    #: Handovers the incumbent kept after SAVED (``handover_aborted``: not an anomaly).
    handovers_aborted: int = 0
    healthy_signalled: list[str] = field(default_factory=list)
    #: Why the other signals were fair: stopped, configured to hang, stopped itself.
    fair_signals: Counter[str] = field(default_factory=Counter)
    wedged: list[str] = field(default_factory=list)
    #: The longest wait from spawn to verdict (seconds, own stops excluded), and whose.
    longest_wait: tuple[float, str] = (0.0, "")
    saves: int = 0
    concurrent_saves: list[str] = field(default_factory=list)
    #: Issue #11: passes of check_current() in two processes at once (current.py).
    simultaneous: list[str] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)
    #: Forked workers that kept the lock, a listener, is_holder or a passing check.
    workers_kept: list[str] = field(default_factory=list)
    workers: int = 0
    #: Holders whose overlap the taken rendezvous explains (by reign): (running ns after
    #: it was taken, what was done, whether a handover was out).
    excused: dict[int, tuple[float, str, bool]] = field(default_factory=dict)
    #: Fresh reigns after the rendezvous was taken under the last holder (nothing to hand).
    reset_rendezvous: int = 0
    #: Handovers committed by a holder that was no longer the incumbent (after a wipe).
    stale_acks: int = 0
    #: Signals from a successor to the holder that sent it SAVED, whose rendezvous was
    #: taken meanwhile (no longer the incumbent, but that handover's own predecessor).
    stale_kills: int = 0
    #: SIGKILLs after ``term_grace`` that follow a fair SIGTERM from the same process.
    escalations: int = 0
