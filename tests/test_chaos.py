"""The chaos harness (scripts/chaos.py) in the normal suite, bounded: ~100 events, one seed.

``make chaos`` runs the same harness for 500 events; docs/reliability.md has
the numbers.  The harness is imported from scripts/, not duplicated here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from proctools import Children

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.append(str(SCRIPTS))

import chaos  # noqa: E402
from chaos_check import judge  # noqa: E402
from chaos_log import Witness  # noqa: E402
from chaos_procs import Lab, Proc  # noqa: E402
from chaos_schedule import TIMEOUTS, make_schedule  # noqa: E402

SEED = 1
EVENTS = 100


def test_the_schedule_is_fixed_by_the_seed() -> None:
    assert make_schedule(SEED, EVENTS) == make_schedule(SEED, EVENTS)
    assert make_schedule(SEED, EVENTS) != make_schedule(SEED + 1, EVENTS)
    kinds = {step.kind for step in make_schedule(SEED, EVENTS)}
    assert {"start_normal", "sigkill_holder", "sigstop_holder", "corrupt_state"} <= kinds


@pytest.mark.timeout(300)
def test_chaos_run_keeps_every_guarantee() -> None:
    report = chaos.run(EVENTS, SEED, say=lambda line: None)
    summary = report.render()
    assert report.events == EVENTS
    violations = {name: items for name, items in report.must_be_zero().items() if items}
    assert not violations, summary
    assert report.convergence_s is not None, summary
    # The chaos really happened: successions, kills of both kinds, pauses.
    found = report.found
    assert found.claims["succeeded"] > 0, summary
    assert found.kills > 0 and report.harness["SIGKILL"] > 0, summary
    assert report.harness["SIGSTOP"] > 0, summary
    assert found.handoffs_kept > 0, summary


# -- the harness itself: it must not fail on its own ---------------------------------

#: Processes the table test starts: past ``select()``'s ceiling of descriptor 1024.
STARTS = 1100


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(300)
def test_the_process_table_holds_descriptors_only_for_live_processes(tmp_path: Path) -> None:
    """Found running seed 11: the harness kept every ended child's pipes (select() past 1024)."""
    lab = Lab(tmp_path)
    baseline = _open_descriptors()
    per_process = 4  # report pipe, stdout, stderr, pidfd
    try:
        for batch in range(STARTS // 50):
            for i in range(50):
                lab.start_piped(batch * 50 + i, ["true"])
            live = sum(p.alive for p in lab.procs)
            assert lab.descriptors() <= per_process * 50
            assert _open_descriptors() <= baseline + per_process * 50, (batch, live)
            # Every ended process gives its descriptors back once reaped and drained.
            assert lab.wait_until(lambda: lab.descriptors() == 0, 30.0), lab.descriptors()
        assert len(lab.procs) == STARTS and all(p.returncode == 0 for p in lab.procs)
        assert _open_descriptors() == baseline
    finally:
        lab.end_all()


def test_a_process_that_already_ended_is_not_signalled_by_the_harness(tmp_path: Path) -> None:
    """A zombie still takes signals: its death must not be booked as the harness's kill."""
    lab = Lab(tmp_path)
    popen = subprocess.Popen(["true"])
    proc = Proc(
        role="dead",
        popen=popen,
        pidfd=os.pidfd_open(popen.pid),
        start_time=0,
        step=0,
        spawn_ns=time.monotonic_ns(),
        spawn_wall=time.time(),
    )
    try:
        os.waitid(os.P_PIDFD, proc.pidfd, os.WEXITED | os.WNOWAIT)  # ended, not reaped
        assert not lab.send(proc, signal.SIGKILL)
        assert proc.killed_ns is None and proc.signals == []
    finally:
        popen.wait()
        os.close(proc.pidfd)
        lab.end_all()


def test_a_harness_kill_seen_first_by_the_reaper_is_still_the_harness_kill() -> None:
    """Found with seed 7 under load: the reaper recorded the exit before the kill's stamp,
    and the checker called the death "unexplained" and the next reign a lost handoff."""
    second = 1_000_000_000
    first = _proc(101, spawn=0, exit_=int(4.5 * second), rc=-9, ready={"counter": 1})
    first.kill_began_ns, first.killed_ns = 4 * second, 5 * second  # send returned late
    first.signals = [("SIGKILL", 4 * second, 5 * second)]
    after = _proc(102, spawn=3 * second, exit_=9 * second, rc=0, ready={"counter": 1})
    events = [
        _claimed(101, 1 * second, 1, "claimed_free"),
        _claimed(102, 6 * second, 2, "claimed_stale"),
    ]
    witness = [Witness("acquire", 101, 1, 1 * second), Witness("acquire", 102, 2, 6 * second)]
    found = judge([first, after], events, witness, [(0.0, 0)])
    assert found.lost_handoffs == [] and found.unlogged_deaths == []
    assert found.reset_sigkill == 1


def test_seed_ranges() -> None:
    assert chaos.seed_range("3") == [3]
    assert chaos.seed_range("1-10") == list(range(1, 11))
    with pytest.raises(Exception, match="backwards"):
        chaos.seed_range("5-2")
    with pytest.raises(Exception, match="range such as"):
        chaos.seed_range("a-b")


# -- the checker itself: it must see each violation in evidence that has one --------


def _proc(pid: int, *, spawn: int, exit_: int, rc: int, ready: dict[str, Any] | None) -> Proc:
    return Proc(
        role="child",
        popen=SimpleNamespace(pid=pid),  # type: ignore[arg-type]
        pidfd=-1,
        start_time=pid * 10,
        step=0,
        spawn_ns=spawn,
        spawn_wall=spawn / 1e9,
        exit_ns=exit_,
        exit_wall=exit_ / 1e9,
        returncode=rc,
        ready=ready,
    )


def _claimed(pid: int, at: int, generation: int, outcome: str) -> dict[str, Any]:
    return {
        "ts": at / 1e9,
        "event": "claimed",
        "pid": pid,
        "generation": generation,
        "outcome": outcome,
    }


def test_the_checker_finds_each_violation() -> None:
    second = 1_000_000_000
    first = _proc(101, spawn=0, exit_=5 * second, rc=0, ready={"counter": 1, "handoff": None})
    # Acquired while the first still held (its release comes later): two holders.
    handoff = {"counter": 7, "from": 101}
    usurper = _proc(
        102, spawn=second, exit_=6 * second, rc=0, ready={"counter": 8, "handoff": handoff}
    )
    # Starts afresh although the usurper saved and released: a lost handoff.
    fresh = _proc(103, spawn=5 * second, exit_=9 * second, rc=0, ready={"counter": 1})
    events = [
        _claimed(101, 1 * second, 1, "claimed_free"),
        _claimed(102, 2 * second, 2, "succeeded"),
        # A signal to the first holder after it was succeeded.
        {"ts": 2.5, "event": "killed", "pid": 103, "peer_pid": 101, "start_time": 1010},
        # A signal to a process that is not one of the run's.
        {"ts": 7.0, "event": "terminated", "pid": 103, "peer_pid": 4242, "start_time": 1},
        _claimed(103, 7 * second, 3, "claimed_free"),
    ]
    witness = [
        Witness("acquire", 101, 1, 1 * second),
        Witness("acquire", 102, 2, 2 * second),
        Witness("release", 101, 1, 3 * second),
        Witness("release", 102, 2, 4 * second),
        Witness("acquire", 103, 3, 7 * second),
    ]
    found = judge([first, usurper, fresh], events, witness, [(0.0, 0)])
    assert len(found.double_holders) == 1 and "pid 101" in found.double_holders[0]
    assert len(found.wrong_signals) == 2
    assert "not the incumbent (pid 102 was)" in found.wrong_signals[0]
    assert "pid 4242" in found.wrong_signals[1]
    # The usurper's handoff names the right predecessor but not its counter.
    assert len(found.lost_handoffs) == 2
    assert found.handoffs_kept == 0


# -- library bugs the chaos found (fixed; kept as regression tests) ------------------


def _holder_with_record(kids: Children, **fields: Any) -> Any:
    """A holder whose .state then gets ``fields`` (well-formed JSON, as the chaos writes it)."""
    first = kids.start(timeouts=TIMEOUTS)
    first.wait_for("ready")
    (state,) = kids.runtime.glob("*.state")
    record = json.loads(state.read_text())
    state.write_text(json.dumps({**record, **fields} if fields else record))
    return first, state, record


def _claims_or_fails(kids: Children, outcome: str) -> None:
    newcomer = kids.start(timeouts=TIMEOUTS)
    report = newcomer.next_report()  # None: it ended without holding
    if report is None:
        _, _, err = newcomer.finish()
        pytest.fail(f"the newcomer did not take the project: {err.decode()[-300:]}")
    assert report["outcome"] == outcome


def test_wrong_typed_state_record_is_treated_as_absent(kids: Children) -> None:
    """Found by the chaos (`make chaos`, seed 1): every claim crashed in new_record."""
    first, state, record = _holder_with_record(kids)
    state.write_text(json.dumps({key: [str(value)] for key, value in record.items()}))
    os.kill(first.pid, signal.SIGKILL)
    first.finish()
    _claims_or_fails(kids, "claimed_stale")


@pytest.mark.parametrize("pid", [0, -1, 2**40])
def test_socketless_holder_with_an_impossible_pid_in_its_record(kids: Children, pid: int) -> None:
    """Found by the chaos (seed 1 event 70, seed 2 event 43): os.pidfd_open's error escaped."""
    first, _, _ = _holder_with_record(kids, pid=pid)
    for sock in kids.runtime.glob("*.sock"):
        sock.unlink()
    newcomer = kids.start(timeouts=TIMEOUTS)
    status, out, err = newcomer.finish()
    assert status == 1 and out == b""
    assert b"Traceback" not in err, err.decode()[-400:]
    assert err.decode().strip().splitlines()[-1].startswith("highlander: ")
    assert first.proc.poll() is None  # nothing was signalled


def test_record_with_a_generation_past_63_bits(kids: Children) -> None:
    """Found by the chaos (seed 2 event 54): the next holder could not say HELLO."""
    first, _, _ = _holder_with_record(kids, generation=2**63)
    os.kill(first.pid, signal.SIGKILL)
    first.finish()
    _claims_or_fails(kids, "claimed_stale")
    # The new holder must be able to hand over.
    _claims_or_fails(kids, "succeeded")


def test_generation_keeps_growing_after_the_record_is_damaged(kids: Children) -> None:
    """Found by the chaos: a damaged `.state` sent the fencing generation back to 1."""
    first = kids.start()
    assert first.wait_for("ready")["generation"] == 1
    second = kids.start()
    assert second.wait_for("ready")["generation"] == 2
    first.finish()
    (state,) = kids.runtime.glob("*.state")
    state.write_text("\x00 not a record")
    os.kill(second.pid, signal.SIGKILL)
    second.finish()
    third = kids.start()
    report = third.wait_for("ready")
    assert report["outcome"] == "claimed_stale"
    assert report["generation"] == 3  # from the copy the lock file keeps
    state.unlink()
    fourth = kids.start()
    assert fourth.wait_for("ready")["generation"] == 4  # a deleted record too
