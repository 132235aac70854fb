"""Judging a chaos run from its evidence: witness log, event log, and what the harness saw.

* **Double holders**: witness intervals (acquire .. release) that overlap.  A
  holder that never wrote its release line died; its interval ends at the
  earliest of: the harness's SIGKILL, Highlander's fatal signal (its
  ``killed``/``terminated`` event: it never ran user code again), and the
  moment the harness's reaper saw it end.
* **Wrong signals**: every ``terminated``/``killed`` event names its target
  by pid and start time; the target must be a process of this run that held
  the project (its ``claimed`` event; normally its ``acquire`` line too) and
  was the incumbent (the last ``claimed``) when it was signalled.  A signal
  logged after the successor claimed a *free* project is counted as late:
  the lock was free, so the target was already exiting.  Every death by a
  signal must be the harness's SIGKILL or named by such an event.
* **Handoffs**: every reign counts ``handoff counter + 1``.  A reign that
  starts without its predecessor's counter is a lost handoff unless the
  predecessor died without saving (SIGKILLed by the harness, or killed by
  Highlander after a hang), reported separately.

The counters issue #10 added (healthy holders signalled, wedged projects,
concurrent saves) and the newcomers' verdicts are in scripts/chaos_counters.py.
"""

from __future__ import annotations

import re
import signal
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import chaos_counters as counters
from chaos_log import SaveLine, Witness
from chaos_process import INF, Proc, Who, to_monotonic

#: How the protocol core words a message field it refuses to build or accept.
_BAD_FIELD = re.compile(r"^[A-Z_]+ field '\w+' ")


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
    #: The process it acknowledged as its successor (``acked``), if any.
    successor: Proc | None = None

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
    unlogged_deaths: list[str] = field(default_factory=list)
    bystanders_hurt: list[str] = field(default_factory=list)
    lost_handoffs: list[str] = field(default_factory=list)
    handoffs_kept: int = 0
    reset_sigkill: int = 0
    reset_hang_kill: int = 0
    generation_jumps: list[str] = field(default_factory=list)
    legacy: Counter[str] = field(default_factory=Counter)
    wrong_legacy: list[str] = field(default_factory=list)
    newcomers: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
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


def judge(
    procs: list[Proc],
    events: list[dict[str, Any]],
    witness: list[Witness],
    clock: list[tuple[float, int]],
    *,
    saves: list[SaveLine] | None = None,
    end_ns: int | None = None,
) -> Findings:
    """Judge a run: its processes, event log, witness and save lines, and clock samples.

    ``end_ns``: when the harness began ending every process (the end of the run).
    """
    who, found = Who(procs), Findings()
    found.reigns = _reigns(who, events, witness, found)
    _tally(events, found)
    _fatal_signals(who, events, clock, found)
    _overlaps(found)
    _signals(who, events, found)
    _deaths(procs, events, found)
    _handoffs(found)
    _legacy(who, events, found)
    found.newcomers, found.crashes = counters.newcomers(procs)
    t0 = clock[0][1]
    found.healthy_signalled, found.fair_signals = counters.healthy_signals(who, events, clock)
    found.wedged, *longest = counters.wedged(procs, end_ns, t0)
    found.longest_wait = (longest[0], longest[1])
    found.saves = sum(line.what == "start" for line in saves or [])
    found.concurrent_saves = counters.concurrent_saves(who, saves or [], t0)
    return found


def _reigns(
    who: Who, events: list[dict[str, Any]], witness: list[Witness], found: Findings
) -> list[Reign]:
    reigns: list[Reign] = []
    by_proc: dict[int, Reign] = {}
    for e in events:
        if e["event"] == "claimed":
            proc = who.at_wall(e["pid"], e["ts"])
            reign = Reign(proc, e["pid"], e.get("generation", -1), e.get("outcome", "?"), e["ts"])
            reigns.append(reign)
            found.claims[reign.outcome] += 1
            if proc is None:
                found.anomalies.append(f"claimed by pid {e['pid']}, not a process of this run")
            elif id(proc) in by_proc:
                found.anomalies.append(f"pid {proc.pid} claimed twice")
            else:
                by_proc[id(proc)] = reign
    for e in events:
        if e["event"] == "acked":
            holder = who.at_wall(e["pid"], e["ts"])
            reign = by_proc.get(id(holder)) if holder is not None else None
            if reign is not None:
                reign.successor = who.at_wall(e.get("peer_pid", -1), e["ts"])
    for line in witness:
        proc = who.at_ns(line.pid, line.ns)
        reign = by_proc.get(id(proc)) if proc is not None else None
        if reign is None:
            found.anomalies.append(f"witness {line.what} by pid {line.pid} without a claim")
        elif line.what == "acquire":
            reign.acquire_ns = line.ns
        else:
            reign.release_ns = line.ns
    return reigns


def _tally(events: list[dict[str, Any]], found: Findings) -> None:
    for e in events:
        kind = e["event"]
        if kind in ("terminated", "killed"):
            found.kills += 1
        elif kind == "hung":
            found.hung[e.get("phase", "?")] += 1
        elif kind == "timeout" and e.get("phase") == "ack":
            found.abandoned += 1
        elif kind == "handover_aborted":
            found.handovers_aborted += 1
        elif kind == "protocol_error" and _BAD_FIELD.match(str(e.get("reason", ""))):
            found.bad_messages.append(f"pid {e['pid']} (peer {e.get('peer_pid')}): {e['reason']}")


def _fatal_signals(
    who: Who, events: list[dict[str, Any]], clock: list[tuple[float, int]], found: Findings
) -> None:
    """A process that received SIGKILL, or SIGTERM while not stopped, never ran again.

    (A SIGTERM that arrives while the harness has the process stopped stays
    pending and is fatal from the harness's next SIGCONT.)

    The event is logged right after the signal was sent, so its time bounds
    the end of the reign from above (and comes before the reaper sees the
    death, which races with the successor's claim).
    """
    reign_of = {id(r.proc): r for r in found.reigns if r.proc is not None}
    for e in events:
        if e["event"] not in ("terminated", "killed"):
            continue
        proc = who.identity(e.get("peer_pid", -1), e.get("start_time"))
        reign = reign_of.get(id(proc)) if proc is not None else None
        if proc is None or reign is None:
            continue
        at = to_monotonic(e["ts"], clock)
        if e.get("signal") != "SIGKILL" and proc.stopped_at(at):
            # Pending while stopped: fatal from the harness's next SIGCONT, if any.
            resumed = proc.resumed_after(at)
            if resumed is None:
                continue
            at = resumed
        reign.fatal_ns = at if reign.fatal_ns is None else min(reign.fatal_ns, at)


def _overlaps(found: Findings) -> None:
    spans = [(r.acquire_ns, r.end_ns(), r) for r in found.reigns if r.acquire_ns is not None]
    spans.sort(key=lambda span: span[0])
    active: list[tuple[int, float, Reign]] = []
    for start, end, reign in spans:
        for _, other_end, other in active:
            if other_end > start:
                found.double_holders.append(
                    f"pid {other.pid} (gen {other.generation}) still held when pid {reign.pid} "
                    f"(gen {reign.generation}, {reign.outcome}) acquired: overlap "
                    f"{(other_end - start) / 1e6:.3f} ms; its reign ended by {other.ending()[1]}"
                )
        active = [a for a in active if a[1] > start] + [(start, end, reign)]


def _signals(who: Who, events: list[dict[str, Any]], found: Findings) -> None:
    """Each signal must reach the incumbent: who last claimed, or whom the last holder
    acknowledged as its successor (it holds the lock from its ACK on, before its
    own ``claimed`` event); or, from that successor, the deposed holder that
    acknowledged it and then missed its exit."""
    acquired = {id(r.proc) for r in found.reigns if r.acquire_ns is not None and r.proc}
    held = {id(r.proc) for r in found.reigns if r.proc is not None}
    held |= {id(r.successor) for r in found.reigns if r.successor is not None}
    incumbent: Proc | None = None
    previous: Proc | None = None
    took_free = False  # the incumbent claimed a free project (so `previous` was gone)
    deposed_by: dict[int, Proc | None] = {}  # successor -> the holder that acknowledged it
    for e in events:
        kind = e["event"]
        if kind in ("claimed", "acked"):
            pid = e["pid"] if kind == "claimed" else e.get("peer_pid", -1)
            proc = who.at_wall(pid, e["ts"])
            if kind == "acked" and proc is not None:
                deposed_by[id(proc)] = who.at_wall(e["pid"], e["ts"])
            if proc is not incumbent:
                previous, incumbent = incumbent, proc
                took_free = kind == "claimed" and e.get("outcome") != "succeeded"
            continue
        if kind not in ("terminated", "killed"):
            continue
        target = who.identity(e.get("peer_pid", -1), e.get("start_time"))
        what = f"{e.get('signal')} from pid {e['pid']} to pid {e.get('peer_pid')}"
        if target is None or target.role != "child":
            role = target.role if target else "not a process of this run"
            found.wrong_signals.append(f"{what}: {role} (start time {e.get('start_time')})")
        elif id(target) not in held:
            found.wrong_signals.append(f"{what}: never held the project")
        elif target is incumbent:
            # It held the lock (its ACK or its claim); under load it can miss a
            # deadline before its witness line is written.
            found.before_acquire += id(target) not in acquired
        elif target is previous and took_free:
            found.late_signals += 1  # the successor found the lock free: the target was exiting
        elif target is previous and deposed_by.get(id(who.at_wall(e["pid"], e["ts"]))) is target:
            found.exit_kills += 1  # the successor ends its deposed predecessor (missed exit)
        else:
            now = incumbent.pid if incumbent else None
            found.wrong_signals.append(f"{what}: not the incumbent (pid {now} was)")


def _deaths(procs: list[Proc], events: list[dict[str, Any]], found: Findings) -> None:
    named: dict[tuple[int, int], set[str]] = defaultdict(set)
    for e in events:
        if e["event"] in ("terminated", "killed"):
            named[(e.get("peer_pid", -1), e.get("start_time", -1))].add(e.get("signal", ""))
    for p in procs:
        if (p.pid, p.start_time) in named:
            found.signalled[id(p)] = named[(p.pid, p.start_time)]
        found.stdout_bytes += p.stdout_bytes
        if p.returncode is None or p.returncode >= 0:
            continue
        name = signal.Signals(-p.returncode).name
        by_harness = name == "SIGKILL" and p.killed_ns is not None
        if p.role == "bystander" and not by_harness:
            found.bystanders_hurt.append(f"bystander pid {p.pid} died of {name}")
        elif not by_harness and name not in named.get((p.pid, p.start_time), set()):
            found.unlogged_deaths.append(f"{p.role} pid {p.pid} died of {name}, no event")


def _handoffs(found: Findings) -> None:
    claimed = {id(r.proc) for r in found.reigns}
    for before, reign in zip(found.reigns, found.reigns[1:], strict=False):
        where = f"gen {reign.generation} (pid {reign.pid}, {reign.outcome}) after pid {before.pid}"
        if reign.generation != before.generation + 1:
            found.generation_jumps.append(f"{before.generation} -> {where}")
        if reign.outcome == "succeeded":
            handoff = reign.handoff or {}
            if reign.proc is not None and reign.proc.ready is None:
                found.anomalies.append(f"{where}: no ready report (handoff unverifiable)")
            elif handoff.get("counter") != before.counter or handoff.get("from") != before.pid:
                found.lost_handoffs.append(
                    f"{where}: handoff {handoff} but the predecessor counted {before.counter}"
                )
            else:
                found.handoffs_kept += 1
            continue
        # The state died with the holder: the predecessor, or the successor it had
        # acknowledged (which holds the lock and the handoff from then on) when that
        # one was killed before its own claim.
        holder = before.proc
        if before.release_ns is not None:
            holder = before.successor if id(before.successor) not in claimed else None
        how = _killed_by(holder, found)
        if how == "harness":
            found.reset_sigkill += 1
        elif how == "highlander":
            found.reset_hang_kill += 1
        elif before.release_ns is not None:
            found.lost_handoffs.append(f"{where}: the predecessor saved and released, then nothing")
        else:
            p = before.proc
            status = f"exit status {p.returncode}" if p else "unknown process"
            found.lost_handoffs.append(f"{where}: the predecessor ended unexplained ({status})")


def _killed_by(proc: Proc | None, found: Findings) -> str | None:
    """``harness`` or ``highlander`` if ``proc`` died of a signal from one of them."""
    if proc is None or (proc.returncode or 0) >= 0:
        return None
    # The kill may have caused the death if its sending began before the reaper
    # saw the end (the reaper can see it before pidfd_send_signal returns).
    if proc.kill_began_ns is not None and proc.kill_began_ns <= (proc.exit_ns or INF):
        return "harness"
    return "highlander" if id(proc) in found.signalled else None


def _legacy(who: Who, events: list[dict[str, Any]], found: Findings) -> None:
    for e in events:
        if e["event"] not in ("legacy_removed", "legacy_kept"):
            continue
        found.legacy[e["event"]] += 1
        named = who.at_wall(e.get("holder_pid", -1), e["ts"])
        if e["event"] == "legacy_removed" and named is not None and named.role == "bystander":
            found.wrong_legacy.append(f"legacy lock of live pid {named.pid} removed: {e}")
