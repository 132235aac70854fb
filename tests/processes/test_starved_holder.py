"""A holder starved of CPU is not hung (#10, guarantee 8: "not when the machine is loaded").

Real starvation, not a mock: the holder's threads get ``SCHED_IDLE`` and share
one CPU with a busy loop at nice -20, so the kernel gives them about 35 us of
CPU a second while the loop runs.  Its serving thread is runnable (``R``) and
gains no CPU time: the newcomer spares it, since ``ceiling`` counts the CPU
time a silent holder uses, not the wall time it is kept waiting.

"About 35 us a second" is an average, not a bound: woken beside the loop, a
thread at ``SCHED_IDLE`` often gets a millisecond or two at once.  A warm
holder's first HELLO fits in that now: its serving thread used about 1.5 ms
of CPU from the newcomer's connect to HELLO and beyond (it was 8 ms when this
test was written), 9 of 10 starved holders that had served for 0.5 s
answered in time, and CI failed on three such rounds in a row (2026-12-06).
So the holder whose HELLO must be missed is starved right after its claim,
while its serving side still loads: it stays runnable and cannot fit that
work in a burst (6 of 6 missed HELLO).  A test whose
scenario is a missed HELLO still checks that it happened, and sets it up
again (bounded) when the newcomer got its HELLO.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from highlander._core.deadlines import QUEUED_EVIDENCE, STARVED_CAP, Sample, spared_busy, starved
from highlander._host.identity import run_state
from tests.support.proctools import WAIT, Child, Children

TIMEOUTS = {"hello": 0.3, "stall": 0.6, "ceiling": 2.0, "exit_grace": 1.0, "term_grace": 0.5}


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:  # the process ended meanwhile
        return []


def _starve(pid: int, cpu: int) -> None:
    for tid in _threads(pid):
        # A thread may end between the listing and the call (CI, 2026-12-03): gone is fine.
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, {cpu})
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))


def _feed(pid: int) -> None:
    for tid in _threads(pid):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile (see _starve)
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
            os.sched_setaffinity(tid, os.sched_getaffinity(0))


def _all_starved(pid: int, cpu: int) -> bool:
    """Whether every thread of ``pid`` is at ``SCHED_IDLE`` on ``cpu`` alone, now."""
    for tid in _threads(pid):
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile (see _starve)
            if os.sched_getscheduler(tid) != os.SCHED_IDLE or os.sched_getaffinity(tid) != {cpu}:
                return False
    return True


#: The busy loop: it says when it spins, so nothing is started before it does.
SPIN = "import os\nos.write(1, b'spinning\\n')\nwhile True: pass\n"


@contextlib.contextmanager
def _spin(cpu: int) -> Iterator[None]:
    """A nice -20 busy loop on ``cpu``, spinning before this yields; ended by its pid."""
    hog = subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE)
    try:
        os.sched_setaffinity(hog.pid, {cpu})
        os.setpriority(os.PRIO_PROCESS, hog.pid, -20)
        assert hog.stdout is not None and hog.stdout.readline() == b"spinning\n"
        yield
    finally:
        hog.kill()
        hog.communicate()


@contextlib.contextmanager
def _starved(holder: Child, cpu: int) -> Iterator[Callable[[], None]]:
    """The holder's threads at ``SCHED_IDLE`` on ``cpu`` (where :func:`_spin` spins).

    Yields once every thread of the holder is starved (a thread born while the
    threads were listed inherits its creator's old policy: listed again until
    none is left out); the call it yields starves threads born since.  On the
    way out the holder, if alive, gets its CPUs back.
    """
    try:
        hang_guard = time.monotonic() + WAIT
        _starve(holder.pid, cpu)
        while not _all_starved(holder.pid, cpu):
            assert time.monotonic() < hang_guard, f"pid {holder.pid} could not be starved"
            _starve(holder.pid, cpu)
        yield lambda: _starve(holder.pid, cpu)
    finally:
        if holder.proc.poll() is None:
            _feed(holder.pid)


@contextlib.contextmanager
def _hog(holder: Child, cpu: int) -> Iterator[Callable[[], None]]:
    """:func:`_starved` beside a :func:`_spin` loop started for it."""
    with _spin(cpu), _starved(holder, cpu) as starve:
        yield starve


def _missed_hello(kids: Children, newcomer: Child, holder: Child) -> bool | None:
    """Whether the newcomer's first conversation with the holder ended in a missed HELLO
    (``True``) or got HELLO in time (``False``); ``None`` while it has done neither."""
    for e in kids.events():
        if (e["pid"], e.get("peer_pid")) != (newcomer.pid, holder.pid):
            continue
        if e["event"] == "timeout" and e.get("phase") == "hello":
            return True
        if e["event"] == "hello":
            return False
    return None


def _log(kids: Children) -> str:
    return "\n".join(str(e) for e in kids.events())


#: Rounds of the scenario at most (see the module docstring: a HELLO in time).
ROUNDS = 3


def _starved_past_the_ceiling(kids: Children, victim_cpu: int, other: set[int]) -> bool:
    """One handover from a holder starved before the newcomer's HELLO; whether the
    newcomer saw it miss HELLO.  Either way nobody is signalled and it hands over."""
    with _spin(victim_cpu):
        # Starved the moment it holds, while its serving side loads (see the module
        # docstring): the loop spins already, so no fast machine's start-up beats it.
        holder = kids.start(timeouts=TIMEOUTS, save="normal", steps=1, hold=600)
        holder.wait_for("ready")
        with _starved(holder, victim_cpu) as starve:
            newcomer = kids.start(timeouts=TIMEOUTS)
            os.sched_setaffinity(newcomer.pid, other)
            hang_guard = time.monotonic() + 60
            missed = None
            while missed is None:
                assert newcomer.proc.poll() is None, _log(kids)
                assert time.monotonic() < hang_guard, f"neither HELLO nor a miss\n{_log(kids)}"
                time.sleep(0.05)
                starve()  # threads born meanwhile starve too
                missed = _missed_hello(kids, newcomer, holder)
            # Once the newcomer has seen the holder miss HELLO, starve it for twice
            # the ceiling more: the old rule (wall time) ended it after one.
            until = time.monotonic() + 2 * TIMEOUTS["ceiling"]
            while missed and newcomer.proc.poll() is None and time.monotonic() < until:
                time.sleep(0.05)
                starve()
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "succeeded", _log(kids)
    status, _, err = holder.finish()
    assert status == 0, err.decode()
    signalled = [e for e in kids.events() if e["event"] in ("terminated", "killed")]
    assert signalled == [], _log(kids)
    if missed:
        assert [e for e in kids.events("timeout") if e.get("busy")], _log(kids)
    return missed


@pytest.mark.timeout(120 * ROUNDS)
def test_a_holder_starved_past_the_ceiling_is_spared_and_hands_over(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
        pytest.skip("needs two CPUs (one to starve the holder on, one for the newcomer)")
    victim_cpu, other = cpus[0], set(cpus[1:])
    for attempt in range(ROUNDS):
        (tmp_path / f"round{attempt}").mkdir()
        kids = Children(tmp_path / f"round{attempt}")
        try:
            if _starved_past_the_ceiling(kids, victim_cpu, other):
                return
        finally:
            kids.cleanup()
    raise AssertionError(f"the newcomer never saw the starved holder miss HELLO ({ROUNDS} rounds)")


@pytest.mark.timeout(120)
def test_a_saver_starved_past_the_stall_deadline_is_spared(kids: Children) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
        pytest.skip("needs two CPUs (one to starve the holder on, one for the newcomer)")
    victim_cpu, other = cpus[0], set(cpus[1:])
    timeouts = {**TIMEOUTS, "ceiling": 20.0}  # the absolute bound stays; stall is 0.6 s
    holder = kids.start(timeouts=timeouts, save="normal", steps=4, step_delay=0.1, hold=600)
    holder.wait_for("ready")
    newcomer = kids.start(timeouts=timeouts)
    os.sched_setaffinity(newcomer.pid, other)
    holder.wait_for("saving")
    with _hog(holder, victim_cpu) as starve:
        # Starved mid-save for five times the stall deadline (the old rule: one).
        until = time.monotonic() + 5 * timeouts["stall"]
        while newcomer.proc.poll() is None and time.monotonic() < until:
            starve()
            time.sleep(0.05)
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "succeeded", _log(kids)
    assert report["handoff"] is not None
    status, _, err = holder.finish()
    assert status == 0, err.decode()
    assert [e for e in kids.events() if e["event"] in ("terminated", "killed", "hung")] == []
    spared = [e for e in kids.events("timeout") if e.get("phase") == "stall"]
    assert spared and all(e["busy"] for e in spared), _log(kids)


def _starved_after_the_ack(kids: Children, victim_cpu: int, other: set[int]) -> bool:
    """One handover whose incumbent is starved from before the ACK until 2.5 x exit_grace
    after it; asserts nobody was signalled; returns whether the newcomer had to spare it."""
    timeouts = {**TIMEOUTS, "exit_grace": 1.0}
    holder = kids.start(timeouts=timeouts, save="normal", steps=1, hold=600)
    holder.wait_for("ready")
    # The newcomer takes 1 s between SAVED and its ACK: time to starve the incumbent.
    newcomer = kids.start(timeouts=timeouts, before_ack={"delay": 1.0, "once": True})
    os.sched_setaffinity(newcomer.pid, other)
    hang_guard = time.monotonic() + 60
    while time.monotonic() < hang_guard and not [
        e for e in kids.events("saved") if e["pid"] == holder.pid
    ]:
        time.sleep(0.02)
    with _hog(holder, victim_cpu) as starve:
        until = time.monotonic() + 1.0 + 2.5 * timeouts["exit_grace"]
        while newcomer.proc.poll() is None and time.monotonic() < until:
            starve()
            time.sleep(0.05)
    report = newcomer.wait_for("ready")
    assert report["outcome"] == "succeeded", _log(kids)
    status, _, err = holder.finish()
    assert status == 0, err.decode()
    mine = [e for e in kids.events() if holder.pid in (e["pid"], e.get("peer_pid"))]
    assert [e for e in mine if e["event"] in ("terminated", "killed", "hung")] == [], _log(kids)
    spared = [e for e in mine if e["event"] == "timeout" and e.get("phase") == "exit"]
    assert all(e["busy"] for e in spared), _log(kids)
    os.kill(newcomer.pid, signal.SIGKILL)  # frees the project for the next round
    newcomer.finish()
    return bool(spared)


@pytest.mark.timeout(180)
def test_an_incumbent_starved_after_the_ack_is_spared_and_leaves(kids: Children) -> None:
    """Seed 1 with starve_holder: an incumbent kept off the CPU could not act on the ACK
    within exit_grace and was SIGTERMed as hung; it is healthy, and leaves once fed.
    SCHED_IDLE still leaves a sliver of CPU: up to three rounds, until one was starved
    past exit_grace (no round may see a signal)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
        pytest.skip("needs two CPUs (one to starve the holder on, one for the newcomer)")
    victim_cpu, other = cpus[0], set(cpus[1:])
    spared = any(_starved_after_the_ack(kids, victim_cpu, other) for _ in range(3))
    assert spared, "the incumbent was never starved past exit_grace"


def test_a_stuck_saver_is_not_taken_for_a_starved_one() -> None:
    stall = 0.6
    assert starved(Sample("S", 0.10), Sample("R", 0.12), stall)  # runnable, 20 ms of CPU
    assert not starved(Sample("S", 0.10), Sample("S", 0.10), stall)  # asleep, no CPU: stuck
    assert not starved(Sample("R", 0.10), Sample("R", 0.80), stall)  # spinning: 0.7 s of CPU
    assert not starved(Sample("R", 0.10), Sample("T", 0.10), stall)  # stopped
    assert not starved(None, Sample("R", 0.10), stall)
    # Asleep at the instant of the look, but kept waiting for a CPU meanwhile.
    assert starved(Sample("S", 0.1, 2.0), Sample("S", 0.1, 2.0 + 1.5 * QUEUED_EVIDENCE), stall)
    assert not starved(Sample("S", 0.1, 2.0), Sample("S", 0.1, 2.0 + 0.5 * QUEUED_EVIDENCE), stall)
    assert not starved(Sample("S", 0.1, 2.0), Sample("T", 0.1, 3.0), stall)  # stopped


def test_queued_time_tells_a_starved_sleeper_from_a_hung_one() -> None:
    """Chaos seed 4: a starved holder showed every thread asleep at the newcomer's look.

    Real processes, real scheduling.  A process that wakes every 20 ms is
    starved for a second on one CPU beside a nice -20 busy loop, then fed;
    a second process sleeps for good.  Neither need gain a CPU tick, and both
    may show every thread asleep when looked at (a starved thread is ``R``
    only while it waits; one that got its sliver and went back to sleep is
    ``S``).  The time the starved one waited for a CPU tells them apart.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
        pytest.skip("needs two CPUs (one to starve the sleeper on, one for this test)")
    code = "import time\nwhile True: time.sleep(0.02)\n"
    napper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    sleeper = subprocess.Popen([sys.executable, "-c", code])
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(hog.pid, {cpus[0]})
        os.setpriority(os.PRIO_PROCESS, hog.pid, -20)
        time.sleep(0.5)  # both children past their start, the napper asleep for good
        before = {p.pid: run_state(p.pid) for p in (napper, sleeper)}
        _starve(sleeper.pid, cpus[0])
        time.sleep(1.0)
        _feed(sleeper.pid)  # its wait ends: the kernel counts it once it runs
        time.sleep(0.1)
        after = {p.pid: run_state(p.pid) for p in (napper, sleeper)}
        for pid, sample in after.items():
            first = before[pid]
            assert sample is not None and first is not None, pid
            # What seed 4's look saw: every thread asleep, no CPU tick gained.
            # The sleeper's 80 wake-ups can add up to a 10 ms tick (CI saw
            # one), which alone would call it busy; the queued time is what
            # is under test, so it is judged without that tick.
            after[pid] = Sample("S", first.cpu, sample.queued)
        napper_now = run_state(napper.pid)
        assert napper_now is not None and napper_now.cpu == before[napper.pid].cpu  # truly idle
        assert starved(before[sleeper.pid], after[sleeper.pid], 0.6), (before, after)
        assert not starved(before[napper.pid], after[napper.pid], 0.6), (before, after)
    finally:
        for proc in (hog, napper, sleeper):
            proc.kill()
            proc.wait()


def test_a_silent_holder_is_spared_by_cpu_used_and_never_past_the_wall_cap() -> None:
    ceiling = 2.0
    assert spared_busy(5.0, 0.01, ceiling)  # starved: kept off the CPU
    assert not spared_busy(2.5, 2.1, ceiling)  # spinning: it used the CPU, answered nobody
    assert not spared_busy(STARVED_CAP * ceiling + 0.1, 0.0, ceiling)  # the wall cap


def test_run_state_sees_a_running_thread_behind_a_sleeping_main_thread() -> None:
    code = (
        "import sys, threading, time\n"
        "threading.Thread(target=lambda: [None for _ in iter(int, 1)], daemon=True).start()\n"
        "sys.stdout.write('spinning\\n'); sys.stdout.flush()\n"
        "time.sleep(60)\n"
    )
    spinner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert spinner.stdout is not None and spinner.stdout.readline() == b"spinning\n"
        time.sleep(0.2)  # the main thread is in its sleep now, for the rest of the test
        with open(f"/proc/{spinner.pid}/stat", "rb") as handle:
            main_state = handle.read().rsplit(b")", 1)[1].split()[0]
        assert main_state == b"S"  # what /proc/PID/stat alone says
        states = {state.state for state in (run_state(spinner.pid) for _ in range(20)) if state}
        assert states == {"R"}  # the spinning thread: running, or waiting for a CPU
    finally:
        spinner.kill()
        spinner.communicate()
