"""After the commit: the successor holds at once, and sees its predecessor leave.

A committed incumbent ends the stream before its ``on_deposed`` runs, so the
newcomer's ``acquire()`` returns without waiting for the deposed process's
hook and exit; its serving side then waits for that exit (a pidfd) and ends
a predecessor that lingers past ``exit_grace`` (``highlander._shell.predecessor``;
the kill itself: ``tests/processes/test_watchdog.py``).  Real processes throughout.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.support.proctools import WAIT, Child, Children, wait_stopped

SLOW_EXIT = {"hello": 2.0, "exit_grace": 30.0, "term_grace": 0.5}
FAST_EXIT = {"hello": 2.0, "stall": 0.6, "exit_grace": 0.5, "term_grace": 0.5}


def _wait_for_busy(kids: Children, pid: int) -> None:
    deadline = time.monotonic() + WAIT  # a hang guard
    while not [e for e in kids.events("busy") if e["pid"] == pid]:
        assert time.monotonic() < deadline, kids.events()
        time.sleep(0.01)


def _signals(kids: Children) -> list[dict[str, object]]:
    return [e for e in kids.events() if e["event"] in ("hung", "terminated", "killed")]


def _succession_with_a_lingering_predecessor(
    kids: Children, gate: Path
) -> tuple[Child, Child, dict[str, Any]]:
    """A holder whose on_deposed lingers until ``gate`` exists, and its successor's report."""
    first = kids.start(linger_until=str(gate))
    first.wait_for("ready")
    second = kids.start(timeouts=SLOW_EXIT)
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded"
    return first, second, report


def test_the_successor_holds_while_its_predecessor_is_still_in_on_deposed(
    kids: Children, tmp_path: Path
) -> None:
    gate = tmp_path / "leave"
    first, _, report = _succession_with_a_lingering_predecessor(kids, gate)
    assert report["handoff"]["from"] == first.pid
    first.wait_for("deposed")
    # Holding, and its predecessor has not left: acquire() did not wait for it.
    assert first.proc.poll() is None
    gate.touch()
    assert first.finish()[0] == 0
    assert _signals(kids) == []  # it left within exit_grace: nobody signals it


def test_a_newcomer_meets_busy_until_the_predecessor_has_left(
    kids: Children, tmp_path: Path
) -> None:
    gate = tmp_path / "leave"
    first, second, _ = _succession_with_a_lingering_predecessor(kids, gate)
    third = kids.start(timeouts=FAST_EXIT)
    _wait_for_busy(kids, second.pid)  # the third asked while the first still lingered
    gate.touch()
    report = third.wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert report["generation"] == 3
    assert first.finish()[0] == 0
    assert second.finish()[0] == 0
    told = [e for e in kids.events("busy") if e["pid"] == second.pid]
    assert told and all(e["predecessor_pid"] == first.pid for e in told)
    assert _signals(kids) == []


def test_a_debt_of_exit_passes_to_the_next_holder_when_the_successor_dies_first(
    kids: Children,
) -> None:
    """The successor that owed its predecessor's exit is SIGKILLed within the grace:
    the next holder reads the debt from the record and ends the lingering process."""
    first = _depose_a_hanging_holder(kids)
    third = kids.start(timeouts=FAST_EXIT)
    assert third.wait_for("ready")["outcome"] == "claimed_stale"
    assert first.finish()[0] == -signal.SIGTERM
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    assert hung == [(third.pid, first.pid, "exit")]


def _depose_a_hanging_holder(kids: Children) -> Child:
    """A holder that hangs in on_deposed, deposed by a successor that is then SIGKILLed
    well within its exit grace: the exit it owed is left to whoever holds next."""
    first = kids.start(hang_when_deposed=True)
    first.wait_for("ready")
    second = kids.start(timeouts=SLOW_EXIT)
    assert second.wait_for("ready")["outcome"] == "succeeded"
    first.wait_for("deposed")
    os.kill(second.pid, signal.SIGKILL)
    second.finish()
    return first


def test_an_inherited_debt_of_exit_passes_on_again_when_its_heir_dies_too(
    kids: Children,
) -> None:
    """Found by the chaos (seed 1, pids 21446 and 22231): the heir of the debt claimed the
    project and was killed within the grace too, and its record named no debt, so the
    third holder let the deposed process hang on for good."""
    first = _depose_a_hanging_holder(kids)
    heir = kids.start(timeouts=SLOW_EXIT)
    assert heir.wait_for("ready")["outcome"] == "claimed_stale"
    os.kill(heir.pid, signal.SIGKILL)
    heir.finish()
    last = kids.start(timeouts=FAST_EXIT)
    assert last.wait_for("ready")["outcome"] == "claimed_stale"
    assert first.finish(timeout=10)[0] == -signal.SIGTERM
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    assert hung == [(last.pid, first.pid, "exit")]


def test_a_debt_of_exit_survives_a_destroyed_record_in_the_lock_file(kids: Children) -> None:
    """Found by the chaos (seed 1, pid 21495): the record naming the debt was emptied
    before the next holder read it; the lock file keeps a copy, as of the generation."""
    first = _depose_a_hanging_holder(kids)
    (state,) = kids.runtime.glob("*.state")
    state.write_bytes(b"")
    last = kids.start(timeouts=FAST_EXIT)
    assert last.wait_for("ready")["outcome"] == "claimed_stale"
    assert first.finish(timeout=10)[0] == -signal.SIGTERM
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    assert hung == [(last.pid, first.pid, "exit")]


def _heir_by_a_verified_kill(kids: Children, **timeouts: float) -> tuple[Child, Child]:
    """A hangs in on_deposed; B succeeds it and is SIGSTOPped, its socket deleted; C finds
    B hung (phase ``socket``), ends it by the verified kill and claims: C owes A's exit."""
    first = kids.start(hang_when_deposed=True)
    first.wait_for("ready")
    second = kids.start(timeouts=SLOW_EXIT)
    assert second.wait_for("ready")["outcome"] == "succeeded"
    first.wait_for("deposed")
    os.kill(second.pid, signal.SIGSTOP)
    # Stopped for real before its socket goes: kill() returns before every thread has
    # stopped, and a holder republishes a deleted socket (CI: C then claimed_stale).
    wait_stopped(second.pid)
    (sock,) = kids.runtime.glob("*.sock")
    sock.unlink()
    heir = kids.start(timeouts={**SLOW_EXIT, **timeouts})
    assert heir.wait_for("ready")["outcome"] == "claimed_free"
    assert second.finish()[0] == -signal.SIGKILL
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    # With a short exit_grace the heir may also have found A hung by now (a loaded
    # machine reads this late): A's end is the caller's to check, once it is over.
    assert [h for h in hung if h[1] != first.pid] == [(heir.pid, second.pid, "socket")]
    return first, heir


def test_a_holder_ended_as_hung_passes_its_debt_of_exit_to_its_killer(kids: Children) -> None:
    """Chaos seed 1 at 84e34c2 (pids 11659, 11671, 11731): the killer's claim inherits."""
    first, heir = _heir_by_a_verified_kill(kids, exit_grace=0.5)
    assert first.finish(timeout=10)[0] == -signal.SIGTERM
    assert [e["peer_pid"] for e in kids.events("hung")][1:] == [first.pid]
    assert [e["phase"] for e in kids.events("hung") if e["pid"] == heir.pid] == ["socket", "exit"]


def test_a_debt_of_exit_survives_a_replaced_lock_file_and_a_damaged_record(
    kids: Children,
) -> None:
    """Chaos seed 1 at 84e34c2 (pid 11659 left alive): its heir 11731 was SIGSTOPped
    0.22 s after its claim, then the lock file was replaced (a FIFO, removed) and the
    record emptied and forged before 11731 was SIGKILLed: the next claim found neither
    copy.  The floor in ``~/.local/state``, which no wipe of the runtime dir reaches,
    keeps a third."""
    first, heir = _heir_by_a_verified_kill(kids)
    os.kill(heir.pid, signal.SIGSTOP)
    wait_stopped(heir.pid)  # else it may still see its lock file go and step down
    (lock,) = kids.runtime.glob("*.lock")
    lock.unlink()
    (state,) = kids.runtime.glob("*.state")
    state.write_bytes(b"")
    os.kill(heir.pid, signal.SIGKILL)
    heir.finish()
    last = kids.start(timeouts=FAST_EXIT)
    assert last.wait_for("ready")["outcome"] in ("claimed_free", "claimed_stale")
    assert first.finish(timeout=10)[0] == -signal.SIGTERM
    hung = [(e["pid"], e["peer_pid"], e["phase"]) for e in kids.events("hung")]
    assert hung[1:] == [(last.pid, first.pid, "exit")]
