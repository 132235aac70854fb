"""Judging a chaos run from its evidence: witness log, event log, and what the harness saw.

* **Double holders**: witness intervals (acquire .. release) that overlap.  An
  interval ends at the earliest of: the release line, the library's
  ``relinquished`` event (it had let go of the lock: ``is_holder`` is false
  from then on, while the application hears of it in ``on_deposed``, later
  on a loaded machine), the harness's SIGKILL, Highlander's fatal signal (its
  ``killed``/``terminated`` event: it never ran user code again), and the
  moment the harness's reaper saw it end.  An acquire line written after
  the reign had already ended (a starved main thread) opens no interval.
  Of two overlapping reigns the older is the lower generation, whatever the
  order of their acquire lines.
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
concurrent saves) and the newcomers' verdicts are in scripts/chaos/counters.py;
issue #11's (simultaneous ``check_current()`` passes, forked workers, the window
a wiped rendezvous leaves) in scripts/chaos/current.py.
"""

from __future__ import annotations

import re
import signal
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from scripts.chaos import counters, current
from scripts.chaos.findings import Findings, Reign
from scripts.chaos.log import CheckLine, SaveLine, Witness
from scripts.chaos.process import INF, Proc, Who, to_monotonic
from scripts.chaos.succession import Succession

#: How the protocol core words a message field it refuses to build or accept.
_BAD_FIELD = re.compile(r"^[A-Z_]+ field '\w+' ")


def judge(
    procs: list[Proc],
    events: list[dict[str, Any]],
    witness: list[Witness],
    clock: list[tuple[float, int]],
    *,
    saves: list[SaveLine] | None = None,
    end_ns: int | None = None,
    checks: list[CheckLine] | None = None,
    losses: list[tuple[int, int, str]] | None = None,
    backend: Callable[[Who, list[dict[str, Any]], Findings], None] | None = None,
    wedge_bound: float = counters.WEDGE_BOUND,
) -> Findings:
    """Judge a run: its processes, event log, witness and save lines, and clock samples.

    ``end_ns``: when the harness began ending every process (the end of the run);
    ``checks``: the check-witness lines; ``losses``: (before, after, what) of each
    wipe or plant at the lock file (the holder's lock file is gone from its path);
    ``backend``: what a backend's own evidence says about the reigns, once they are
    known and before they are judged (the etcd run's lease, scripts/chaos/etcd_check.py;
    the local run has none); ``wedge_bound``: the longest wait for a verdict (seconds).
    """
    who, found = Who(procs), Findings()
    found.reigns = _reigns(who, events, witness, found)
    _tally(events, found)
    _fatal_signals(who, events, clock, found)
    _relinquished(who, events, clock, found)
    if backend is not None:
        backend(who, events, found)
    _overlaps(found, losses or [], _saved(who, events, clock))
    _signals(who, events, found, current.Taken(losses or [], clock))
    _deaths(procs, events, found)
    _handoffs(found, clock, losses or [])
    _legacy(who, events, found)
    found.newcomers, found.crashes = counters.newcomers(procs)
    found.bad_messages += counters.refused_saved(procs)
    found.fork_hook_races = sum(p.fork_hook_races() for p in procs if p.role == "child")
    t0 = clock[0][1]
    found.healthy_signalled, found.fair_signals = counters.healthy_signals(who, events, clock)
    found.wedged, waited, waiter = counters.wedged(procs, end_ns, t0, wedge_bound)
    found.longest_wait = (waited, waiter)
    found.saves = sum(line.what == "start" for line in saves or [])
    found.concurrent_saves = counters.concurrent_saves(who, saves or [], t0)
    found.simultaneous, found.checks = current.simultaneous_passes(who, checks or [], t0)
    found.workers_kept, found.workers = current.workers_kept(procs, checks or [])
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
            reign.predecessor = e.get("peer_pid")
            reigns.append(reign)
            found.claims[reign.outcome] += 1
            if proc is None:
                found.anomalies.append(f"claimed by pid {e['pid']}, not a process of this run")
            elif id(proc) in by_proc:
                found.anomalies.append(f"pid {proc.pid} claimed twice")
            else:
                by_proc[id(proc)] = reign
    for e in (e for e in events if e["event"] in ("acked", "lost_rendezvous")):
        ended = by_proc.get(id(who.at_wall(e["pid"], e["ts"])))
        if ended is not None and e["event"] == "lost_rendezvous":
            ended.lost = True
        elif ended is not None:
            ended.successor = who.at_wall(e.get("peer_pid", -1), e["ts"])
    for line in witness:
        proc = who.at_ns(line.pid, line.ns)
        witnessed = by_proc.get(id(proc)) if proc is not None else None
        if witnessed is None:
            found.anomalies.append(f"witness {line.what} by pid {line.pid} without a claim")
        elif line.what == "acquire":
            witnessed.acquire_ns = line.ns
        else:
            witnessed.release_ns = line.ns
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


def _saved(
    who: Who, events: list[dict[str, Any]], clock: list[tuple[float, int]]
) -> dict[int, list[float]]:
    """When each process sent SAVED (a handover out), by process."""
    sent: dict[int, list[float]] = defaultdict(list)
    for e in events:
        if e["event"] == "saved":
            sent[id(who.at_wall(e["pid"], e["ts"]))].append(to_monotonic(e["ts"], clock))
    return sent


def _relinquished(
    who: Who, events: list[dict[str, Any]], clock: list[tuple[float, int]], found: Findings
) -> None:
    """When each reign's library let go of the lock (its first ``relinquished`` event).

    A ``resumed`` after it (etcd: the commit did not apply) takes it back: the
    reign went on, and its next ``relinquished`` ends it.
    """
    reign_of = {id(r.proc): r for r in found.reigns if r.proc is not None}
    for e in (e for e in events if e["event"] in ("relinquished", "resumed")):
        reign = reign_of.get(id(who.at_wall(e["pid"], e["ts"])))
        if reign is None:
            continue
        if e["event"] == "resumed":
            reign.relinquished_ns = None
        elif reign.relinquished_ns is None:
            reign.relinquished_ns = to_monotonic(e["ts"], clock)


def _overlaps(
    found: Findings, losses: list[tuple[int, int, str]], saved: dict[int, list[float]]
) -> None:
    spans = [(r.acquire_ns, r.end_ns(), r) for r in found.reigns if r.acquire_ns is not None]
    spans.sort(key=lambda span: span[0])
    active: list[tuple[int, float, Reign]] = []
    for start, end, reign in spans:
        for other_start, other_end, other in active:
            overlap = min(end, other_end) - max(start, other_start)
            if overlap <= 0:
                continue
            first = other.generation <= reign.generation
            older, newer = (other, reign) if first else (reign, other)
            assert older.acquire_ns is not None and newer.acquire_ns is not None
            excuse = current.excused_overlap(
                older.proc,
                (older.acquire_ns, older.end_ns()),
                older.lost,
                newer.acquire_ns,
                losses,
                saved.get(id(older.proc), []),
            )
            if excuse is not None:
                found.excused[id(older)] = excuse
            else:
                found.double_holders.append(
                    f"pid {older.pid} (gen {older.generation}) still held when pid {newer.pid} "
                    f"(gen {newer.generation}, {newer.outcome}) acquired: overlap "
                    f"{overlap / 1e6:.3f} ms; its reign ended by {older.ending()[1]}"
                )
        active = [a for a in active if a[1] > start] + [(start, end, reign)]


def _signals(who: Who, events: list[dict[str, Any]], found: Findings, taken: current.Taken) -> None:
    """Each signal must reach the incumbent: who last claimed, or whom the last holder
    acknowledged as its successor (it holds the lock from its ACK on, before its
    own ``claimed`` event); or, from that successor, the deposed holder that
    acknowledged it and then missed its exit; or, after a wipe, the holder whose
    rendezvous was taken, from the newcomer it had sent SAVED to (its successor
    ends it when it misses its exit, as it would have without the wipe); or, from
    the holder of the moment, a deposed holder that acknowledged a successor
    and outlived it (the exit its successor owed passes on with the record); or,
    from anyone, a holder that acknowledged a successor but had not logged
    ``relinquished`` yet (it lets go of the lock only after that line: stopped in
    between, it still holds it, and the kernel names it the holder)."""
    gave = {
        (id(who.at_wall(e["pid"], e["ts"])), id(who.at_wall(e.get("peer_pid", -1), e["ts"])))
        for e in events
        if e["event"] == "saved"
    }
    claimed_at = {id(r.proc): r.ts for r in found.reigns if r.proc is not None}
    acquired = {id(r.proc) for r in found.reigns if r.acquire_ns is not None and r.proc}
    held = {id(r.proc) for r in found.reigns if r.proc is not None}
    held |= {id(r.successor) for r in found.reigns if r.successor is not None}
    line = Succession(who, found)
    #: (signaller pid, target) of every SIGTERM judged fair: its SIGKILL after
    #: ``term_grace`` is the same verified kill (the target could not run in between
    #: unless it died of the SIGTERM, or it was stopped throughout).
    fair_terms: set[tuple[int, int]] = set()
    for e in events:
        kind = e["event"]
        if kind in ("claimed", "acked", "relinquished", "resumed"):
            line.see(e)
            continue
        if kind not in ("terminated", "killed"):
            continue
        target = who.identity(e.get("peer_pid", -1), e.get("start_time"))
        what = f"{e.get('signal')} from pid {e['pid']} to pid {e.get('peer_pid')}"
        wrong = len(found.wrong_signals)
        if kind == "killed" and (e["pid"], id(target)) in fair_terms:
            found.escalations += 1
        elif target is None or target.role != "child":
            role = target.role if target else "not a process of this run"
            found.wrong_signals.append(f"{what}: {role} (start time {e.get('start_time')})")
        elif id(target) not in held:
            found.wrong_signals.append(f"{what}: never held the project")
        elif target is line.incumbent:
            # It held the lock (its ACK or its claim); under load it can miss a
            # deadline before its witness line is written.
            found.before_acquire += id(target) not in acquired
        elif (excuse := line.leaving(target, who.at_wall(e["pid"], e["ts"]))) is not None:
            setattr(found, excuse, getattr(found, excuse) + 1)
        elif (id(target), id(who.at_wall(e["pid"], e["ts"]))) in gave and taken.between(
            claimed_at.get(id(target)), e["ts"]
        ):
            found.stale_kills += 1
        else:
            now = line.incumbent.pid if line.incumbent else None
            found.wrong_signals.append(f"{what}: not the incumbent (pid {now} was)")
        if kind == "terminated" and len(found.wrong_signals) == wrong:
            fair_terms.add((e["pid"], id(target)))


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
        if p.role in ("bystander", "worker") and not by_harness:
            found.bystanders_hurt.append(f"{p.role} pid {p.pid} died of {name}")
        elif not by_harness and name not in named.get((p.pid, p.start_time), set()):
            found.unlogged_deaths.append(f"{p.role} pid {p.pid} died of {name}, no event")


def _handoffs(
    found: Findings, clock: list[tuple[float, int]], losses: list[tuple[int, int, str]]
) -> None:
    claimed = {id(r.proc) for r in found.reigns}
    for i, (before, reign) in enumerate(zip(found.reigns, found.reigns[1:], strict=False)):
        where = f"gen {reign.generation} (pid {reign.pid}, {reign.outcome}) after pid {before.pid}"
        if reign.generation != before.generation + 1:
            found.generation_jumps.append(f"{before.generation} -> {where}")
        if reign.outcome == "succeeded":
            # The predecessor its claim names: after a wipe, a holder that had a
            # handover out may commit it after a newer claim (two lineages).
            named = (r for r in reversed(found.reigns[: i + 1]) if r.pid == reign.predecessor)
            source = next(named, before)
            handoff = reign.handoff or {}
            if reign.proc is not None and reign.proc.ready is None:
                found.anomalies.append(f"{where}: no ready report (handoff unverifiable)")
            elif handoff.get("counter") != source.counter or handoff.get("from") != source.pid:
                found.lost_handoffs.append(
                    f"{where}: handoff {handoff} but the predecessor counted {source.counter}"
                )
            else:
                found.handoffs_kept += 1
            continue
        _without_handoff(found, before, reign, where, claimed, clock, losses)


def _without_handoff(
    found: Findings,
    before: Reign,
    reign: Reign,
    where: str,
    claimed: set[int],
    clock: list[tuple[float, int]],
    losses: list[tuple[int, int, str]],
) -> None:
    """Why ``reign`` began without ``before``'s state: a reset, or a lost handoff."""
    if before.lost or current.taken_between(
        losses, to_monotonic(before.ts, clock), to_monotonic(reign.ts, clock)
    ):
        found.reset_rendezvous += 1  # wiped or planted: nobody to hand it over
        return
    if before.lease_ended is not None:
        # Over etcd: fenced, or its lease ran out, with no handover out; the state
        # could not pass (set only by the etcd run's evidence).
        found.reset_lease[before.lease_ended] += 1
        return
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
