"""The judge's excuse for a holder that outlives its taken rendezvous: a handover it
sent out *after* the loss (before it noticed) counts, as the library waits for it."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from scripts.chaos.check import judge
from scripts.chaos.etcd_check import lease_evidence
from scripts.chaos.findings import Findings
from scripts.chaos.log import Witness
from scripts.chaos.process import Proc
from scripts.chaos.schedule import TIMEOUTS
from tests.chaos.test_chaos import _claimed, _proc
from tests.support.proctools import Child, Children, wait_stopped

SECOND = 1_000_000_000


def _found(release: int, saved_at: int | None) -> Findings:
    old = _proc(101, spawn=0, exit_=9 * SECOND, rc=0, ready={"counter": 4})
    new = _proc(102, spawn=SECOND, exit_=9 * SECOND, rc=0, ready={"counter": 1})
    events = [
        _claimed(101, 1 * SECOND, 1, "claimed_free"),
        _claimed(102, 2 * SECOND, 2, "claimed_free"),
    ]
    if saved_at is not None:
        events.append({"ts": saved_at / 1e9, "event": "saved", "pid": 101, "peer_pid": 103})
    events.sort(key=lambda e: e["ts"])
    wipe = [(int(1.9 * SECOND), int(1.9 * SECOND) + 1000, "step 7: runtime dir wiped")]
    witness = [
        Witness("acquire", 101, 1, 1 * SECOND),
        Witness("acquire", 102, 2, 2 * SECOND),
        Witness("release", 101, 1, release),
    ]
    return judge([old, new], events, witness, [(0.0, 0)], losses=wipe)


def test_a_handover_sent_after_the_loss_extends_the_excuse_by_request_only() -> None:
    request = int(TIMEOUTS["request"] * SECOND)
    late = int(1.9 * SECOND) + request  # the handover's end: past the 1 s bound alone
    # Without a handover out, holding until then is a double holder.
    assert len(_found(late, None).double_holders) == 1
    # SAVED sent after the wipe (before the holder noticed): it waits for the handover.
    found = _found(late, saved_at=int(1.95 * SECOND))
    assert found.double_holders == [] and len(found.excused) == 1
    (ran, _, out) = next(iter(found.excused.values()))
    assert out and ran > SECOND
    # Never longer than the bound plus request.
    beyond = int(1.9 * SECOND) + request + int(1.2 * SECOND)
    assert len(_found(beyond, saved_at=int(1.95 * SECOND)).double_holders) == 1


def _relinquished(pid: int, at: int) -> dict[str, Any]:
    return {"ts": at / 1e9, "event": "relinquished", "pid": pid, "outcome": "deposed"}


def test_a_reign_ends_at_its_relinquished_event_not_at_a_late_line() -> None:
    """A starved holder's main thread may write its acquire (or release) line after the
    library already handed the project on: the library's relinquished event ends the reign."""
    old = _proc(101, spawn=0, exit_=9 * SECOND, rc=0, ready={"counter": 1})
    new = _proc(102, spawn=SECOND, exit_=9 * SECOND, rc=0, ready={"counter": 2})
    events: list[dict[str, Any]] = [
        _claimed(101, 1 * SECOND, 1, "claimed_free"),
        _relinquished(101, int(1.5 * SECOND)),
        _claimed(102, int(1.6 * SECOND), 2, "succeeded"),
    ]
    witness = [
        Witness("acquire", 102, 2, int(1.7 * SECOND)),
        Witness("acquire", 101, 1, int(1.8 * SECOND)),  # late: already deposed
        Witness("release", 101, 1, int(1.9 * SECOND)),
    ]
    found = judge([old, new], events, witness, [(0.0, 0)])
    assert found.double_holders == []
    # Without the event the same lines are a double holder (the older by generation named).
    found = judge([old, new], events[::2], witness, [(0.0, 0)])
    assert len(found.double_holders) == 1
    assert found.double_holders[0].startswith("pid 101 (gen 1) still held when pid 102")
    # A relinquished event after the newer reign began does not hide the overlap.
    late = [events[0], events[2], _relinquished(101, int(1.85 * SECOND))]
    found = judge([old, new], late, witness, [(0.0, 0)])
    assert len(found.double_holders) == 1 and "overlap 50.000 ms" in found.double_holders[0]


def test_a_resumed_reign_goes_on_after_its_relinquished() -> None:
    """Over etcd a holder says ``relinquished`` before its move; a move that does not
    apply gives its reign back (``resumed``), so a newer reign beside it overlaps."""
    old = _proc(101, spawn=0, exit_=9 * SECOND, rc=0, ready={"counter": 1})
    new = _proc(102, spawn=SECOND, exit_=9 * SECOND, rc=0, ready={"counter": 2})
    events: list[dict[str, Any]] = [
        _claimed(101, 1 * SECOND, 1, "claimed_free"),
        _relinquished(101, int(1.5 * SECOND)),
        {"ts": 1.55, "event": "resumed", "pid": 101, "generation": 1},
        _claimed(102, int(1.6 * SECOND), 2, "claimed_stale"),
    ]
    witness = [
        Witness("acquire", 101, 1, int(1.1 * SECOND)),
        Witness("acquire", 102, 2, int(1.7 * SECOND)),
        Witness("release", 101, 1, int(1.9 * SECOND)),
    ]
    found = judge([old, new], events, witness, [(0.0, 0)])
    assert len(found.double_holders) == 1 and "overlap 200.000 ms" in found.double_holders[0]
    # Without the resumed event the reign ended at its relinquished: no overlap.
    found = judge([old, new], [e for e in events if e["event"] != "resumed"], witness, [(0.0, 0)])
    assert found.double_holders == []


def test_a_kill_at_the_ceiling_is_fair_only_once_the_save_ran_that_long() -> None:
    """Guarantee 6: never before the absolute ceiling. A starved saver is spared at
    ``stall``; at ``ceiling`` it is fair game, but only if its save really began then."""
    from tests.chaos.test_chaos import _holder, _term

    ceiling = int(TIMEOUTS["ceiling"] * SECOND)
    on_time = _holder(101, spawn=0, exit_=10 * SECOND)
    early = _holder(102, spawn=0, exit_=10 * SECOND)
    events: list[dict[str, Any]] = []
    for proc, began in ((on_time, 9 * SECOND - ceiling), (early, 9 * SECOND - ceiling // 2)):
        events += [
            {"ts": began / 1e9, "event": "save_requested", "pid": proc.pid, "peer_pid": 200},
            {
                "ts": 9 * SECOND / 1e9,
                "event": "hung",
                "pid": 200,
                "peer_pid": proc.pid,
                "phase": "ceiling",
            },
            _term(200, proc, 9 * SECOND),
        ]
    events.sort(key=lambda e: e["ts"])
    found = judge([on_time, early], events, [], [(0.0, 0)])
    assert found.fair_signals == {"its save ran past the absolute ceiling": 1}
    assert len(found.healthy_signalled) == 1 and "to pid 102" in found.healthy_signalled[0]


def test_a_later_holder_may_end_a_deposed_holder_its_predecessor_owed_an_exit() -> None:
    """101 acknowledged 102 and hung in ``on_deposed``; 102 was killed before 101's exit
    grace ran out; 103 claimed and inherited the debt through the record."""
    deposed = _proc(101, spawn=0, exit_=6 * SECOND, rc=-9, ready={"counter": 1})
    killed = _proc(102, spawn=SECOND, exit_=3 * SECOND, rc=-9, ready={"counter": 2})
    later = _proc(103, spawn=SECOND, exit_=9 * SECOND, rc=0, ready={"counter": 3})
    other = _proc(104, spawn=SECOND, exit_=9 * SECOND, rc=0, ready=None)
    acked = {"ts": 2.0, "event": "acked", "pid": 101, "peer_pid": 102}
    # It let go of the lock (its on_deposed hangs after that line).
    let_go = _relinquished(101, 2 * SECOND)

    def signals(acked_event: bool, by: int) -> Findings:
        events: list[dict[str, Any]] = [
            _claimed(101, 1 * SECOND, 1, "claimed_free"),
            *([acked, let_go] if acked_event else []),
            _claimed(102, int(2.1 * SECOND), 2, "succeeded"),
            _claimed(103, 4 * SECOND, 3, "claimed_stale"),
            _kill(by, deposed, 5 * SECOND),
        ]
        return judge([deposed, killed, later, other], events, [], [(0.0, 0)])

    found = signals(acked_event=True, by=103)
    assert found.wrong_signals == [] and found.inherited_exit_kills == 1
    # Not before it acknowledged a successor: 101 could still be holding.
    found = signals(acked_event=False, by=103)
    assert found.inherited_exit_kills == 0 and len(found.wrong_signals) == 1
    # Not from a process that does not hold the project.
    found = signals(acked_event=True, by=104)
    assert found.inherited_exit_kills == 0 and len(found.wrong_signals) == 1


def _kill(by: int, target: Any, at: int) -> dict[str, Any]:
    return {
        "ts": at / 1e9,
        "event": "killed",
        "pid": by,
        "peer_pid": target.pid,
        "start_time": target.start_time,
        "signal": "SIGKILL",
    }


def _successor_fenced(stopped: bool) -> Findings:
    """101 saves and hands over to 103 (acked), which the harness may stop before it
    holds; 104 fences 103 and claims the project afresh (over etcd)."""
    old = _proc(101, spawn=0, exit_=9 * SECOND, rc=0, ready={"counter": 3})
    successor = _proc(103, spawn=SECOND, exit_=9 * SECOND, rc=0, ready=None)
    fencer = _proc(104, spawn=2 * SECOND, exit_=9 * SECOND, rc=0, ready={"counter": 1})
    if stopped:
        successor.signals.append(("SIGSTOP", int(2.1 * SECOND), int(2.1 * SECOND) + 1000))
    events: list[dict[str, Any]] = [
        _claimed(101, 1 * SECOND, 1, "claimed_free"),
        {"ts": 2.0, "event": "saved", "pid": 101, "peer_pid": 103},
        {"ts": 2.2, "event": "acked", "pid": 101, "peer_pid": 103},
        _relinquished(101, int(2.2 * SECOND)),
        {"ts": 3.0, "event": "fenced", "pid": 104, "peer_pid": 103, "generation": 3},
        _claimed(104, 6 * SECOND, 3, "claimed_stale"),
    ]
    witness = [
        Witness("acquire", 101, 1, 1 * SECOND),
        Witness("release", 101, 1, int(2.3 * SECOND)),
        Witness("acquire", 104, 3, int(6.1 * SECOND)),
    ]
    clock = [(0.0, 0)]
    hook = lease_evidence([], clock)
    return judge([old, successor, fencer], events, witness, clock, backend=hook)


def test_a_successor_stopped_before_it_held_and_fenced_takes_the_state_with_it() -> None:
    # Stopped by the harness: the state was in that process only (as when it is killed).
    found = _successor_fenced(stopped=True)
    assert found.lost_handoffs == []
    assert sum(found.reset_lease.values()) == 1
    # Fenced while it ran: nothing excuses the loss.
    found = _successor_fenced(stopped=False)
    assert len(found.lost_handoffs) == 1, found.lost_handoffs


def _event(at: float, pid: int, event: str, **fields: Any) -> dict[str, Any]:
    return {"ts": at, "event": event, "pid": pid, **fields}


def _acked_then_stopped(relinquished_before_the_signal: bool) -> Findings:
    """Recorded (real processes, tests/programs/child.py ``stop_after_event``): 32158
    committed its handover to 32161, logged ``acked`` and was stopped before it let
    go of the lock; its successor ended it (missed exit) and so did a newcomer, 32171,
    that found it silent and still holding the lock (missed HELLO, verified)."""
    holder = _proc(32158, spawn=0, exit_=2 * SECOND, rc=-9, ready={"counter": 1})
    successor = _proc(32161, spawn=SECOND // 5, exit_=9 * SECOND, rc=0, ready={"counter": 2})
    newcomer = _proc(32171, spawn=SECOND // 2, exit_=9 * SECOND, rc=0, ready={"counter": 3})
    holder.start_time = 343895
    t = {"peer_pid": 32158, "start_time": 343895}
    events = [
        _event(0.101, 32158, "claimed", outcome="claimed_free", generation=1),
        _event(0.329, 32158, "saved", peer_pid=32161, generation=1),
        _event(0.333, 32158, "acked", peer_pid=32161),
        _event(0.840, 32161, "hung", peer_pid=32158, phase="exit"),
        _event(0.840, 32161, "terminated", **t, signal="SIGTERM"),
        _event(0.959, 32171, "timeout", peer_pid=32158, phase="hello", busy=False),
        _event(0.972, 32171, "hung", peer_pid=32158, phase="hello"),
        _event(0.975, 32171, "terminated", **t, signal="SIGTERM"),
        _event(1.144, 32161, "killed", **t, signal="SIGKILL"),
        _event(1.160, 32161, "claimed", outcome="succeeded", generation=2, peer_pid=32158),
        _event(1.245, 32161, "acked", peer_pid=32171),
        _event(1.246, 32161, "relinquished", peer_pid=32171, outcome="deposed", generation=2),
        _event(1.249, 32171, "claimed", outcome="succeeded", generation=3, peer_pid=32161),
    ]
    if relinquished_before_the_signal:
        events.insert(3, _event(0.334, 32158, "relinquished", peer_pid=32161, outcome="deposed"))
    return judge([holder, successor, newcomer], events, [], [(0.0, 0)])


def test_a_holder_stopped_between_its_ack_and_letting_go_may_be_ended_by_anyone() -> None:
    """CI, seed 1: "SIGTERM from pid 30436 to pid 30416: not the incumbent (pid 30421
    was)".  A holder logs ``acked`` before it lets go of the lock (then
    ``relinquished``, then the lock): stopped in between, it still holds the project
    as far as the kernel can tell, and the newcomer's verified kill is fair."""
    found = _acked_then_stopped(relinquished_before_the_signal=False)
    assert found.wrong_signals == []
    assert (found.exit_kills, found.acked_holding, found.escalations) == (1, 1, 1)
    # Once it has logged relinquished it may have let go: the same signal is wrong.
    found = _acked_then_stopped(relinquished_before_the_signal=True)
    assert found.wrong_signals == [
        "SIGTERM from pid 32171 to pid 32158: not the incumbent (pid 32161 was)"
    ]
    assert found.acked_holding == 0


def _as_run(child: Child, spawn_wall: float, end_wall: float) -> Proc:
    """``child`` as the harness would have known it (wall clock as the monotonic one)."""
    start_time = int(Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    return Proc(
        role="child",
        popen=child.proc,
        pidfd=-1,
        start_time=start_time,
        step=0,
        spawn_ns=int(spawn_wall * 1e9),
        spawn_wall=spawn_wall,
        exit_ns=int(end_wall * 1e9),
        exit_wall=end_wall,
    )


def test_a_newcomer_may_end_a_holder_stopped_between_its_ack_and_letting_go(
    kids: Children,
) -> None:
    """The recorded sequence above, made again: the holder stops right after its
    ``acked`` line; its successor waits (a long exit_grace) and a newcomer that finds
    it silent ends it, verified (it still holds the lock).  The judge agrees."""
    began = time.time()
    holder = kids.start(stop_after_event="acked")
    holder.wait_for("ready")
    procs = [_as_run(holder, began, began + 3600)]
    successor = kids.start(timeouts={"exit_grace": 30.0})
    procs.append(_as_run(successor, time.time(), began + 3600))
    holder.wait_for("stopped_after")
    wait_stopped(holder.pid)
    newcomer = kids.start(timeouts={"hello": 0.5, "term_grace": 0.3})
    procs.append(_as_run(newcomer, time.time(), began + 3600))
    assert successor.wait_for("ready")["outcome"] == "succeeded"
    assert newcomer.wait_for("ready")["outcome"] == "succeeded"
    assert holder.finish()[0] == -signal.SIGKILL  # stopped: SIGTERM stays pending
    events = kids.events()
    acked = [(e["pid"], e["peer_pid"]) for e in events if e["event"] == "acked"]
    assert acked[0] == (holder.pid, successor.pid)
    assert not [e for e in events if e["event"] == "relinquished" and e["pid"] == holder.pid]
    signals = [(e["pid"], e["peer_pid"], e["signal"]) for e in events if "signal" in e]
    assert signals == [(newcomer.pid, holder.pid, "SIGTERM"), (newcomer.pid, holder.pid, "SIGKILL")]
    procs[0].exit_wall, procs[0].exit_ns = time.time(), int(time.time() * 1e9)
    procs[0].returncode = -signal.SIGKILL
    found = judge(procs, events, [], [(0.0, 0)])
    assert found.wrong_signals == []
    assert (found.acked_holding, found.escalations) == (1, 1)
