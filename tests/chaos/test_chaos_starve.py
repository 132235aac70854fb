"""The chaos fault ``starve_holder`` does what it says, and undoes it (real scheduling)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scripts.chaos.starve import Starver


def _policies(pid: int) -> set[int]:
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


def test_starve_then_feed_a_real_process() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
        pytest.skip("needs two CPUs")
    code = "import threading, time; threading.Thread(target=time.sleep, args=(60,)).start()"
    victim = subprocess.Popen([sys.executable, "-c", code + "; time.sleep(60)"])
    try:
        proc = SimpleNamespace(pid=victim.pid, stopped=False, alive=True, starved=[])
        starver = Starver()
        assert starver.starve(None) == "no running holder"
        assert starver.starve(proc).startswith(f"pid {victim.pid} starved")  # type: ignore[arg-type]
        assert starver.hog is not None
        hog = starver.hog.pid
        assert _policies(victim.pid) == {os.SCHED_IDLE}
        assert os.sched_getaffinity(victim.pid) == {cpus[0]}
        assert (
            os.sched_getaffinity(hog) == {cpus[0]} and os.getpriority(os.PRIO_PROCESS, hog) == -20
        )
        assert starver.starve(proc) == "a holder is starved already"  # type: ignore[arg-type]
        assert starver.feed() == f"pid {victim.pid} fed"
        ((began, ended),) = proc.starved  # the span the judge counts as off the CPU
        assert 0 < began < ended < float("inf")
        assert _policies(victim.pid) == {os.SCHED_OTHER}
        assert os.sched_getaffinity(victim.pid) == set(cpus)
        assert starver.hog is None and not Path(f"/proc/{hog}").exists()
        assert starver.feed() == "nothing starved"
    finally:
        victim.kill()
        victim.wait()


def test_the_settling_resumes_a_stopped_holder_whose_rendezvous_was_taken() -> None:
    """Seed 1: the lock was planted over 32 ms before the harness stopped the holder, which
    had not noticed yet; nobody could reach or end it, and the run never converged."""
    import signal

    from scripts.chaos.runner import Runner

    sent: list[tuple[int, int]] = []
    second = 1_000_000_000

    def holder(pid: int, stopped_at: int) -> SimpleNamespace:
        return SimpleNamespace(
            pid=pid,
            spawn_ns=1 * second,
            signals=[("SIGSTOP", stopped_at, stopped_at)],
            stopped=True,
            believes=True,
        )

    before_stop = holder(101, 5 * second)  # the loss came first (at 4 s)
    after_stop = holder(102, 3 * second)  # stopped, then the loss
    untouched = holder(103, 5 * second)
    untouched.spawn_ns = 6 * second  # started after the loss: its rendezvous is the new one
    lab = SimpleNamespace(
        live_children=lambda: [before_stop, after_stop, untouched],
        send=lambda proc, signum: sent.append((proc.pid, signum)) or True,
    )
    runner = Runner(lab, None, lambda line: None)  # type: ignore[arg-type]
    runner.losses = [(4 * second, 4 * second + 1000, "a plant at the lock")]
    runner.resume_lost()
    assert sent == [(101, signal.SIGCONT), (102, signal.SIGCONT)]


def test_cpythons_at_fork_hook_warning_is_counted_apart_from_exceptions() -> None:
    """Seed 6: logging imported on the log thread while the holder forked a worker."""
    from tests.chaos.test_chaos import _proc

    warning = (
        "Exception ignored in: <function _releaseLock at 0x7f05>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/logging/__init__.py", line 242, in _releaseLock\n'
        "    _lock.release()\n"
        "RuntimeError: cannot release un-acquired lock\n"
    )
    crash = (
        "Traceback (most recent call last):\n"
        '  File "/x/highlander/_host/names_key.py", line 62, in _publish_names_key\n'
        "OSError: [Errno 28] No space left on device\n"
    )
    proc = _proc(101, spawn=0, exit_=1, rc=1, ready=None)
    proc.stderr_tail = warning.encode()
    assert proc.exception() == "" and proc.fork_hook_races() == 1
    proc.stderr_tail = (warning + crash).encode()
    assert proc.exception().startswith("OSError: [Errno 28]") and proc.fork_hook_races() == 1
    proc.stderr_tail = (crash + warning).encode()
    assert proc.exception().startswith("OSError: [Errno 28]")


def test_time_starved_by_the_harness_is_not_running_time_for_the_excuse() -> None:
    """Seed 6: starved from before a wipe until 1.15 s after it, the holder noticed 53 ms
    after it was fed; without the starved span that was 1.2 s of "running"."""
    from scripts.chaos import current
    from tests.chaos.test_chaos import _proc

    second = 1_000_000_000
    holder = _proc(101, spawn=0, exit_=9 * second, rc=0, ready={"counter": 1})
    wipe = [(2 * second, 2 * second + 1000, "step 102: runtime dir wiped")]
    span = (1 * second, int(3.3 * second))  # acquired at 1 s, relinquished at 3.3 s
    assert current.excused_overlap(holder, span, True, int(2.5 * second), wipe, []) is None
    holder.starved = [(int(1.9 * second), int(3.25 * second))]
    excuse = current.excused_overlap(holder, span, True, int(2.5 * second), wipe, [])
    assert excuse is not None and excuse[0] == 0.05 * second
