"""Hung incumbents, long saves, PID reuse: the watchdog and the verified kill, for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from highlander._core.deadlines import Timeouts
from highlander._host.waiting import BLOCKING, run_blocking
from highlander._shell.unreachable import end_unreachable_holder
from tests.support.proctools import Child, Children, wait_stopped

FAST = {"hello": 0.5, "stall": 0.6, "ceiling": 1.5, "exit_grace": 0.5, "term_grace": 0.5}


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated live process whose pid the tests plant in records."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _kinds(kids: Children, pid: int) -> list[str]:
    return [e["event"] for e in kids.events() if e["pid"] == pid]


def test_sigstopped_incumbent_gets_sigterm_then_sigkill(kids: Children) -> None:
    first = kids.start()
    first.wait_for("ready")
    os.kill(first.pid, signal.SIGSTOP)
    wait_stopped(first.pid)
    began = time.monotonic()
    second = kids.start(timeouts=FAST)
    report = second.wait_for("ready")
    waited = time.monotonic() - began
    assert report["outcome"] == "claimed_stale"
    assert report["generation"] == 2
    status, _, _ = first.finish()
    assert status == -signal.SIGKILL  # a stopped process only dies of SIGKILL
    kinds = _kinds(kids, second.pid)
    assert kinds.index("hung") < kinds.index("terminated") < kinds.index("killed")
    assert kinds.index("killed") < kinds.index("claimed")
    signals = [e for e in kids.events() if e["event"] in ("terminated", "killed")]
    assert [(e["signal"], e["peer_pid"]) for e in signals] == [
        ("SIGTERM", first.pid),
        ("SIGKILL", first.pid),
    ]
    # It waited out both graces before claiming (a logical bound, not a timing one).
    assert waited >= FAST["hello"] + FAST["term_grace"]


def test_slow_save_that_keeps_advancing_is_never_killed(kids: Children) -> None:
    # 9 steps of 0.2 s: three times the 0.6 s stall timeout, always advancing.
    first = kids.start(steps=9, step_delay=0.2)
    first.wait_for("ready")
    second = kids.start(timeouts={**FAST, "ceiling": 30.0})
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert report["handoff"]["counter"] == 1
    assert first.finish()[0] == 0
    assert not kids.events("terminated") and not kids.events("killed")
    counters = [e["counter"] for e in kids.events("progress")]
    assert counters == list(range(10))


def test_save_that_stops_advancing_is_killed_after_the_stall_timeout(kids: Children) -> None:
    first = kids.start(steps=2, step_delay=0.05, save="stall")
    first.wait_for("ready")
    second = kids.start(timeouts=FAST)
    report = second.wait_for("ready")
    assert report["outcome"] == "claimed_stale"
    assert report["handoff"] is None  # the save never finished: nothing to hand over
    assert first.finish()[0] == -signal.SIGTERM
    hung = kids.events("hung")
    assert [e["phase"] for e in hung] == ["stall"]


def test_save_that_advances_forever_is_killed_at_the_ceiling(kids: Children) -> None:
    first = kids.start(step_delay=0.1, save="forever")
    first.wait_for("ready")
    second = kids.start(timeouts=FAST)
    assert second.wait_for("ready")["outcome"] == "claimed_stale"
    assert first.finish()[0] == -signal.SIGTERM
    assert [e["phase"] for e in kids.events("hung")] == ["ceiling"]
    # It advanced the whole time: far more progress than one stall timeout allows.
    assert len(kids.events("progress")) > FAST["ceiling"] / 0.1 / 2


def test_incumbent_that_hangs_after_saved_is_killed_and_the_handoff_kept(
    kids: Children,
) -> None:
    first = kids.start(hang_when_deposed=True)
    first.wait_for("ready")
    second = kids.start(timeouts=FAST)
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert report["handoff"]["counter"] == 1
    assert report["generation"] == 2
    assert first.finish()[0] == -signal.SIGTERM
    # Ended after the commit by its successor's serving side, not by its acquire().
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    assert hung == [(second.pid, first.pid, "exit")]


def _rewrite_record(kids: Children, **fields: object) -> None:
    (state,) = kids.runtime.glob("*.state")
    record = json.loads(state.read_text())
    record.update(fields)
    state.write_text(json.dumps(record))


def test_record_naming_a_reused_pid_with_a_stale_socket(
    kids: Children, bystander: subprocess.Popen[bytes]
) -> None:
    first = kids.start()
    first.wait_for("ready")
    os.kill(first.pid, signal.SIGKILL)
    first.finish()
    _rewrite_record(kids, pid=bystander.pid, start_time=1)
    second = kids.start(timeouts=FAST)
    assert second.wait_for("ready")["outcome"] == "claimed_stale"
    assert bystander.poll() is None
    assert not kids.events("terminated")


def test_unreachable_holder_is_verified_through_its_lock_before_any_signal(
    kids: Children, bystander: subprocess.Popen[bytes]
) -> None:
    """Lock held, socket deleted by hand, record pointing at someone else: no signal."""
    first = kids.start()
    first.wait_for("ready")
    os.kill(first.pid, signal.SIGSTOP)
    wait_stopped(first.pid)  # else it may republish the socket deleted next
    for sock in kids.runtime.glob("*.sock"):
        sock.unlink()
    ident = (Path(f"/proc/{bystander.pid}/stat").read_bytes().rsplit(b")", 1)[1]).split()
    _rewrite_record(kids, pid=bystander.pid, start_time=int(ident[19]), exe="/usr/bin/sleep")
    second = kids.start(timeouts=FAST)
    status, out, err = second.finish()
    assert status == 1
    assert out == b""
    assert "never signals" in err.decode().strip().splitlines()[-1]
    assert bystander.poll() is None
    assert first.proc.poll() is None  # still there, stopped: nobody verified it
    assert not kids.events("terminated")
    assert kids.events("identity_mismatch")


def test_unreachable_but_verified_holder_is_replaced(kids: Children) -> None:
    """Lock held, socket deleted by hand, record intact: the holder is verified and ended."""
    first = kids.start()
    first.wait_for("ready")
    os.kill(first.pid, signal.SIGSTOP)
    wait_stopped(first.pid)  # else it may republish the socket deleted next
    for sock in kids.runtime.glob("*.sock"):
        sock.unlink()
    second = kids.start(timeouts=FAST)
    report = second.wait_for("ready")
    assert report["outcome"] == "claimed_free"
    assert first.finish()[0] == -signal.SIGKILL
    assert [e["peer_pid"] for e in kids.events("killed")] == [first.pid]


def test_socket_deleted_during_the_save_does_not_lose_the_handoff(kids: Children) -> None:
    first = kids.start(steps=5, step_delay=0.1)
    first.wait_for("ready")
    second = kids.start(timeouts={**FAST, "ceiling": 30.0})
    first.wait_for("saving")
    for sock in kids.runtime.glob("*.sock"):
        sock.unlink()
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert report["handoff"]["counter"] == 1
    assert first.finish()[0] == 0
    assert list(kids.runtime.glob("*.sock")), "the successor publishes a socket again"
    third = kids.start(timeouts=FAST)
    assert third.wait_for("ready")["outcome"] == "succeeded"  # and it answers


def test_newcomer_waits_out_a_handover_whose_predecessor_hangs(kids: Children) -> None:
    first = kids.start(hang_when_deposed=True)
    first.wait_for("ready")
    second = kids.start(timeouts=FAST)
    first.wait_for("deposed")
    os.kill(first.pid, signal.SIGSTOP)
    wait_stopped(first.pid)
    third = kids.start(timeouts=FAST)
    assert second.wait_for("ready")["outcome"] == "succeeded"
    report = third.wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert report["generation"] == 3
    assert first.finish()[0] == -signal.SIGKILL
    assert second.finish()[0] == 0


def test_a_holder_whose_connection_queue_stays_full_is_verified_and_ended(kids: Children) -> None:
    """A connect to a full backlog fails at once and leaves an unconnected socket
    (SO_PEERCRED: pid 0, uid -1); newcomers used to call that a foreign holder."""
    import socket

    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)  # it accepts nothing now (kill() returns before it stops)
    (path,) = kids.runtime.glob("*.sock")
    fillers: list[socket.socket] = []
    try:
        for _ in range(1000):  # the backlog is 128: the kernel refuses well before 1000
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                sock.connect(str(path))
            except BlockingIOError:
                sock.close()
                break
            fillers.append(sock)
        assert len(fillers) < 1000, "the connection queue never filled"
        report = kids.start(timeouts=FAST).wait_for("ready")
    finally:
        for sock in fillers:
            sock.close()
    assert report["outcome"] == "claimed_stale"
    assert holder.finish()[0] == -signal.SIGKILL
    assert not kids.events("identity_mismatch")
    assert [e["reason"] for e in kids.events("unreachable")] == ["queue full"]
    (hung,) = kids.events("hung")
    assert (hung["phase"], hung["peer_pid"]) == ("queue", holder.pid)
    assert [e["reason"] for e in kids.events("killed")] == ["queue full"]


def test_a_holder_that_claimed_after_a_recordless_patience_ran_out_is_left_alone(
    kids: Children,
) -> None:
    """Chaos seed 3: a newcomer's patience with a socketless holder ran out while the
    record was unreadable (corrupted); a newcomer beside it claimed the project and
    wrote its record in the millisecond before the ending read it, and the healthy
    new holder was SIGTERMed.  No record when the patience began, one now: a new
    reign, looked at afresh, never signalled."""
    holder = kids.start()
    assert holder.wait_for("ready")["is_holder"]
    settings = kids.settings("child", Timeouts(**FAST))
    for sock in kids.runtime.glob("*.sock"):
        sock.unlink()  # nobody listens: what the patience ran out on
    run_blocking(end_unreachable_holder(settings, BLOCKING, queue_full=False, seen=None))
    time.sleep(0.2)  # a SIGTERM would have landed by now
    assert holder.proc.poll() is None
    assert [e for e in kids.events() if e["event"] in ("hung", "terminated", "killed")] == []


# The newcomer that joins a hung save.  The holder relays the save's progress to it
# and may gain a CPU tick in its first stall window, which the watchdog rightly takes
# as a starved saver and spares once (2 of 10 runs of the stopped case).  With the FAST
# ceiling (1.5 s) two windows of 0.6 s left 0.3 s, and a CI machine's delay made the
# verdict "ceiling" (stop 38).  A far ceiling leaves the stall as the only verdict
# unless the holder kept gaining CPU for 30 s: a real defect this test should catch.
JOINER = {**FAST, "ceiling": 30.0}


def _patient_in_a_hung_save(kids: Children, api: str, **holder: Any) -> tuple[Child, Child, Path]:
    """A holder (``api``) whose hook stops advancing after two steps and never returns,
    and a patient newcomer (it would wait ten minutes) that has seen both steps.

    Returns the holder, the newcomer and the hook's witness file.
    """
    saves = kids.witness.with_name("saves.log")
    first = kids.start(
        steps=2, step_delay=0.05, save="stall", save_witness=str(saves),
        **{"async": api == "async"}, **holder,
    )  # fmt: skip
    first.wait_for("ready")
    patient = kids.start(timeouts={**FAST, "stall": 600.0, "ceiling": 1200.0})
    deadline = time.monotonic() + 30  # a hang guard
    while not [e for e in kids.events("progress") if e["pid"] == patient.pid and e["counter"] == 2]:
        assert time.monotonic() < deadline, "the patient newcomer saw no progress"
        time.sleep(0.02)
    return first, patient, saves


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_newcomer_killed_during_a_hung_save_leaves_no_successor_behind(
    kids: Children, api: str
) -> None:
    # The hook stops advancing after two steps and never returns.  The first
    # newcomer (patient: it would wait ten minutes) is SIGKILLed mid-save; the
    # holder must stop calling it its successor, or it answers every later
    # newcomer BUSY in a dead process's name and none can judge the save.
    first, patient, saves = _patient_in_a_hung_save(kids, api)
    os.kill(patient.pid, signal.SIGKILL)
    assert patient.finish()[0] == -signal.SIGKILL
    second = kids.start(timeouts=JOINER)
    report = second.wait_for("ready")
    assert report["outcome"] == "claimed_stale"
    assert not [e for e in kids.events("busy") if e.get("successor_pid") == patient.pid]
    left = [e for e in kids.events("timeout") if e.get("reason") == "successor left"]
    assert [(e["pid"], e["peer_pid"]) for e in left][:1] == [(first.pid, patient.pid)]
    # The second newcomer joined the same run of the hook and judged it stalled.
    assert [(e["pid"], e["phase"]) for e in kids.events("hung")] == [(second.pid, "stall")]
    # One run of the hook, never two at once (it never ended: SIGTERM took the holder).
    assert [line.split()[0] for line in saves.read_text().splitlines()] == ["start"]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_newcomer_stopped_during_a_hung_save_is_let_go_after_stall(
    kids: Children, api: str
) -> None:
    # As above, but the patient newcomer is SIGSTOPped (a terminal's Ctrl-Z): its
    # conversation stays open, and without the kernel's word the holder would call
    # it its successor, answer BUSY in its name, and nobody could judge the hung
    # hook, for as long as it stays stopped.
    first, patient, saves = _patient_in_a_hung_save(kids, api, timeouts=FAST)
    os.kill(patient.pid, signal.SIGSTOP)
    wait_stopped(patient.pid)
    try:
        second = kids.start(timeouts=JOINER)
        report = second.wait_for("ready")
        assert report["outcome"] == "claimed_stale"
    finally:
        os.kill(patient.pid, signal.SIGCONT)
    # Resumed, it finds its conversation closed and asks the new holder in turn.
    resumed = patient.wait_for("ready")
    assert (resumed["outcome"], resumed["generation"]) == ("succeeded", report["generation"] + 1)
    second.wait_for("deposed")
    stopped = [e for e in kids.events("timeout") if e.get("reason") == "successor stopped"]
    assert [(e["pid"], e["peer_pid"]) for e in stopped] == [(first.pid, patient.pid)]
    # The holder's stall (FAST: 0.6 s) of the newcomer being stopped, then the second
    # newcomer joined the same run of the hook and judged it stalled.
    assert [(e["pid"], e["phase"]) for e in kids.events("hung")] == [(second.pid, "stall")]
    assert [line.split()[0] for line in saves.read_text().splitlines()] == ["start"]
