"""Judging an etcd chaos run: what the lease adds to the local judge (scripts/chaos/check.py).

The local judge runs unchanged (double holders from the witness and
``relinquished`` evidence, wrong and healthy signals, lost handoffs,
concurrent saves, simultaneous ``check_current()`` passes, forked workers,
wedged newcomers, crashes); :func:`lease_evidence` is its ``backend`` hook,
and tells it two things only the etcd run knows:

* **How a reign ended without a handover.**  A reign whose holder was
  ``fenced`` (its key moved off its lease, the lease revoked) or that logged
  ``lease_lost`` had no handover out: the next reign starts without its
  state, counted apart (``reset_lease``), not as a lost handoff.  A reign
  that did hand over (``acked``) is judged as on one machine, except when
  the successor it acknowledged was stopped by the harness and fenced before
  it held: the state was in that process only, as when it is SIGKILLed on
  one machine (a successor fenced while it ran stays a lost handoff).
* **When a stopped holder stopped acting.**  A holder on another host is
  never signalled: stopped by the harness, it stays stopped until the
  settling resumes it, its witness interval open.  If it never *began* a
  passing ``check_current()`` after that SIGSTOP (its check loop runs every
  20 ms whenever it runs), it acted as holder no more from the SIGSTOP on,
  and its reign ends there (``Reign.stop_cut_ns``).  One that passes again
  after its resumption keeps its reign, and any overlap counts.

Then the must-be-zero numbers of the etcd run (:func:`judge_etcd`):

* **Signals to another host**: every ``terminated``/``killed`` event whose
  signaller and target ran on different simulated hosts.
* **Handoffs applied twice**: two reigns that began with the same handoff
  (the same ``from`` and ``counter``).
* **Holders that did not step down by themselves**: a holder replaced
  without handing over (fenced, its lease run out, or stepped down) and
  neither SIGKILLed by the harness nor signalled by Highlander must have
  let go (``relinquished``), told its application (``deposed``) and exited
  with status 0 before the end of the run (it was resumed at the settling).

And figures: fences and why their target could not answer, ``lease_lost``
step-downs and what was going on then, successions across hosts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scripts.chaos.counters import WINDOW_NS
from scripts.chaos.etcd_schedule import STORM
from scripts.chaos.findings import Findings, Reign
from scripts.chaos.log import CheckLine
from scripts.chaos.process import Proc, Who, to_monotonic
from scripts.chaos.schedule import TIMEOUTS

#: How long after a member fault ended a lease may still be lost because of it
#: (seconds, beyond the TTL): an election, and a keepalive round after it.
AFTER_FAULT_S = 2.0
#: What one handover over etcd costs at most before the fence (seconds): the local
#: worst case (counters.WEDGE_BOUND's reasoning: hello + ceiling + request +
#: exit_grace + term_grace).
_HANDOVER_S = sum(TIMEOUTS[k] for k in ("hello", "ceiling", "request", "exit_grace", "term_grace"))
#: One queued handover of a storm over etcd (seconds): the ACK's p90 on two cores was
#: 0.9 s in seed 1's run (the local harness counts 0.3 s on a socket).
_STORM_HANDOVER_S = 1.0


def wedge_bound(ttl: int) -> float:
    """The etcd run's longest wait for a verdict, reasoned as on one machine
    (counters.WEDGE_BOUND: ten worst-case handovers plus a storm), where the worst
    handover also fences (a TTL's wait) or waits out a lease (up to another TTL)."""
    return 10 * (_HANDOVER_S + 2 * ttl) + STORM * _STORM_HANDOVER_S


def host(proc: Proc | None) -> str | None:
    """The simulated host a child ran on (``None``: not a child of the run)."""
    if proc is None or proc.role != "child":
        return None
    return str((proc.cfg or {}).get("host"))


def lease_evidence(
    checks: list[CheckLine], clock: list[tuple[float, int]]
) -> Callable[[Who, list[dict[str, Any]], Findings], None]:
    """The judge's ``backend`` hook for an etcd run (see the module docstring)."""

    def hook(who: Who, events: list[dict[str, Any]], found: Findings) -> None:
        reign_of = {id(r.proc): r for r in found.reigns if r.proc is not None}
        for e in events:
            if e["event"] == "fenced":
                proc = who.at_wall(e.get("peer_pid", -1), e["ts"])
                target = reign_of.get(id(proc))
                if target is not None:
                    target.lease_ended = "fenced"
                elif proc is not None:
                    _successor_fenced(proc, to_monotonic(e["ts"], clock), found)
            elif e["event"] == "lease_lost":
                own = reign_of.get(id(who.at_wall(e["pid"], e["ts"])))
                if own is not None and own.lease_ended is None:
                    own.lease_ended = "lease ran out"
        last_pass: dict[int, int] = {}
        for line in checks:
            proc = who.at_ns(line.pid, line.began) if line.passed else None
            if proc is not None:
                last_pass[id(proc)] = max(line.began, last_pass.get(id(proc), 0))
        for reign in found.reigns:
            _cut_at_stop(reign, last_pass)

    return hook


def _successor_fenced(proc: Proc, at: float, found: Findings) -> None:
    """A fence of an acknowledged successor the harness had stopped before it held.

    The state was in that stopped process only (the move put the key on its
    lease, its predecessor had left): across hosts nobody can wait for it, and
    the fence is the designed answer, as a verified kill of a stopped holder is
    on one machine.  Its predecessor's reign then ended without a handover the
    next reign could take, counted apart; a successor fenced while it ran is
    not excused (a lost handoff).
    """
    if not proc.stopped_during(at - WINDOW_NS, at):
        return
    for reign in found.reigns:
        if reign.successor is proc and reign.lease_ended is None:
            reign.lease_ended = "its successor, stopped, fenced before it held"


def _cut_at_stop(reign: Reign, last_pass: dict[int, int]) -> None:
    """End ``reign`` at the first harness SIGSTOP after which it never passed a check."""
    proc = reign.proc
    if proc is None or reign.acquire_ns is None:
        return
    passed = last_pass.get(id(proc), -1)
    stops = [
        before
        for name, before, _ in proc.signals
        if name == "SIGSTOP" and before >= reign.acquire_ns and before > passed
    ]
    if stops:
        reign.stop_cut_ns = min(stops)


@dataclass
class EtcdFindings:
    """What the etcd judge adds: its must-be-zero lists and its figures."""

    other_host_signals: list[str] = field(default_factory=list)
    applied_twice: list[str] = field(default_factory=list)
    not_stepped_down: list[str] = field(default_factory=list)
    #: Fences, by why their target could not answer (or "healthy").
    fences: Counter[str] = field(default_factory=Counter)
    #: ``lease_lost`` step-downs, by what was going on then.
    lease_lost: Counter[str] = field(default_factory=Counter)
    #: Successions whose handoff crossed hosts, and those on one host.
    across: int = 0
    same_host: int = 0
    #: Reigns cut at a SIGSTOP they never came back from as holder.
    stop_cuts: int = 0
    #: Same-host signals (the only ones allowed).
    same_host_signals: int = 0
    #: Overlapping reigns (the double holders, by the witness and ``relinquished``)
    #: where the older one had stopped passing ``check_current()`` before the newer
    #: acquired: late telling of an ended reign, not two proofs at once.
    late_notices: int = 0


def judge_etcd(
    procs: list[Proc],
    events: list[dict[str, Any]],
    clock: list[tuple[float, int]],
    found: Findings,
    *,
    end_ns: int | None,
    final: Proc | None,
    faults: list[tuple[int, int, str]],
    ttl: int,
    checks: list[CheckLine],
    losses: list[tuple[int, int, str]] | None = None,
) -> EtcdFindings:
    """The etcd counters over a judged run (``found``: the local judge's findings;
    ``losses``: the reigns the harness ended in etcd, scripts/chaos/etcd_data.py)."""
    who, out = Who(procs), EtcdFindings()
    _signals(who, events, out)
    _successions(found, out)
    _stepped_down(who, events, found, out, end_ns, final)
    _fences(who, events, clock, out)
    _lease_lost(who, events, clock, out, faults, ttl, losses or [])
    out.stop_cuts = sum(r.stop_cut_ns is not None for r in found.reigns)
    out.late_notices = _late_notices(found, checks)
    return out


def _late_notices(found: Findings, checks: list[CheckLine]) -> int:
    """Consecutive reigns that overlap although the older's last pass ended before."""
    last_end: dict[int, int] = {}
    for line in checks:
        if line.passed:
            last_end[line.pid] = max(line.ended, last_end.get(line.pid, 0))
    late = 0
    for older, newer in zip(found.reigns, found.reigns[1:], strict=False):
        if older.proc is None or older.acquire_ns is None or newer.acquire_ns is None:
            continue
        if older.end_ns() > newer.acquire_ns and older.proc is not newer.proc:
            passed = last_end.get(older.pid, -1)
            late += older.acquire_ns <= passed < newer.acquire_ns or passed < 0
    return late


def _signals(who: Who, events: list[dict[str, Any]], out: EtcdFindings) -> None:
    for e in events:
        if e["event"] not in ("terminated", "killed"):
            continue
        signaller = who.at_wall(e["pid"], e["ts"])
        target = who.identity(e.get("peer_pid", -1), e.get("start_time"))
        there, here = host(target), host(signaller)
        if there is None or here is None:
            continue  # not a child of the run: the local judge's wrong signals list it
        if there != here:
            out.other_host_signals.append(
                f"{e.get('signal')} from pid {e['pid']} on {here} to pid {e.get('peer_pid')} "
                f"on {there}"
            )
        else:
            out.same_host_signals += 1


def _successions(found: Findings, out: EtcdFindings) -> None:
    by_handoff: dict[tuple[Any, Any], list[Reign]] = defaultdict(list)
    for i, reign in enumerate(found.reigns):
        handoff = reign.handoff
        if reign.outcome != "succeeded" or not handoff:
            continue
        by_handoff[(handoff.get("from"), handoff.get("counter"))].append(reign)
        source = next((r for r in reversed(found.reigns[:i]) if r.pid == handoff.get("from")), None)
        if source is not None:
            crossed = host(source.proc) != host(reign.proc)
            out.across += crossed
            out.same_host += not crossed
    for (origin, counter), reigns in by_handoff.items():
        if len(reigns) > 1:
            pids = ", ".join(f"pid {r.pid} (gen {r.generation})" for r in reigns)
            out.applied_twice.append(f"the handoff of pid {origin} (counter {counter}): {pids}")


def _stepped_down(
    who: Who,
    events: list[dict[str, Any]],
    found: Findings,
    out: EtcdFindings,
    end_ns: int | None,
    final: Proc | None,
) -> None:
    # A holder's last word decides: ``resumed`` (its commit did not apply) undoes an ACK.
    last: dict[int, str] = {}
    for e in events:
        if e["event"] in ("acked", "relinquished", "resumed"):
            last[id(who.at_wall(e["pid"], e["ts"]))] = e["event"]
    acked = {p for p, said in last.items() if said != "resumed"}
    let_go = {p for p, said in last.items() if said == "relinquished"}
    end = end_ns if end_ns is not None else float("inf")
    for reign in found.reigns:
        p = reign.proc
        if p is None or p is final or id(p) in acked:
            continue  # the last holder; or one that handed over (the local judge's case)
        killed = p.kill_began_ns is not None and p.kill_began_ns < end
        if killed or id(p) in found.signalled:
            continue
        exited = p.exit_ns is not None and p.exit_ns < end and p.returncode == 0
        if id(p) in let_go and p.deposed and exited:
            continue
        how = reign.lease_ended or "replaced"
        out.not_stepped_down.append(
            f"pid {p.pid} (gen {reign.generation}, host {host(p)}, {how}): "
            f"relinquished {id(p) in let_go}, deposed {p.deposed}, "
            f"exit {'before the end' if exited else 'none'} (status {p.returncode})"
        )


def _fences(
    who: Who, events: list[dict[str, Any]], clock: list[tuple[float, int]], out: EtcdFindings
) -> None:
    """Why each fenced holder could not answer (as counters.healthy_signals does for kills)."""
    hung: dict[tuple[int, int], float] = {}
    for e in events:
        if e["event"] == "hung":
            hung[(e["pid"], e.get("peer_pid", -1))] = to_monotonic(e["ts"], clock)
        if e["event"] != "fenced":
            continue
        target = who.at_wall(e.get("peer_pid", -1), e["ts"])
        at = to_monotonic(e["ts"], clock)
        since = hung.get((e["pid"], e.get("peer_pid", -1)), at) - WINDOW_NS
        if target is None and who.ended_before(e.get("peer_pid", -1), e["ts"]):
            out.fences["ended already (its lease not yet)"] += 1
        elif target is None or target.role != "child":
            out.fences["not a child of the run"] += 1
        elif target.stopped_during(since, at):
            out.fences["stopped"] += 1
        elif target.hangs:
            out.fences["configured to hang"] += 1
        elif target.self_stop_ns is not None:
            out.fences["stopped itself before its ACK"] += 1
        else:
            out.fences["healthy"] += 1


def _lease_lost(
    who: Who,
    events: list[dict[str, Any]],
    clock: list[tuple[float, int]],
    out: EtcdFindings,
    faults: list[tuple[int, int, str]],
    ttl: int,
    losses: list[tuple[int, int, str]],
) -> None:
    fenced = {
        id(who.at_wall(e.get("peer_pid", -1), e["ts"])) for e in events if e["event"] == "fenced"
    }
    span = (ttl + AFTER_FAULT_S) * 1e9
    for e in (e for e in events if e["event"] == "lease_lost"):
        proc = who.at_wall(e["pid"], e["ts"])
        at = to_monotonic(e["ts"], clock)
        if proc is None:
            out.lease_lost["not a child of the run"] += 1
        elif id(proc) in fenced:
            out.lease_lost["fenced"] += 1
        elif any(proc.spawn_ns <= before <= at for before, _, _ in losses):
            out.lease_lost["its reign ended in etcd by the harness"] += 1
        elif proc.stopped_during(at - ttl * 1e9, at):
            out.lease_lost["stopped by the harness"] += 1
        elif any(b <= at and (a < 0 or a >= at - span) for b, a, _ in faults):
            out.lease_lost["an etcd member down"] += 1
        else:
            out.lease_lost["none of these (load)"] += 1
