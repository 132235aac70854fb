"""The chaos fault ``starve_holder``: a loaded machine keeps the holder off the CPU.

Real starvation, as a storm on two cores causes it: the holder's threads
get ``SCHED_IDLE`` and are pinned to one CPU beside a busy loop at nice -20
(about 35 us of CPU a second for them), until ``feed_holder`` a few steps
later (or the settling) gives them back their policy and every CPU and ends
the loop by its pid.  A starved holder is healthy: signalling it counts in
"healthy holders signalled" like any other.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

from scripts.chaos.process import INF, Proc


class Starver:
    """At most one starved holder at a time, and the busy loop that starves it."""

    def __init__(self) -> None:
        self.hog: subprocess.Popen[bytes] | None = None
        self.victim: Proc | None = None

    def starve(self, holder: Proc | None) -> str:
        """Starve ``holder``; say what was done (or why nothing was)."""
        cpus = sorted(os.sched_getaffinity(0))
        if holder is None or holder.stopped:
            return "no running holder"
        if self.hog is not None:
            return "a holder is starved already"
        if len(cpus) < 2 or not hasattr(os, "SCHED_IDLE"):
            return "not starved: one CPU only"
        self.hog = subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.sched_setaffinity(self.hog.pid, {cpus[0]})
        os.setpriority(os.PRIO_PROCESS, self.hog.pid, -20)
        self.victim = holder
        _each_thread(holder.pid, os.SCHED_IDLE, {cpus[0]})
        # From once it is off the CPU (the judge counts no running time in it).
        holder.starved.append((time.monotonic_ns(), INF))
        return f"pid {holder.pid} starved on CPU {cpus[0]}"

    def feed(self) -> str:
        """Give the starved holder its CPUs back and end the busy loop (by its pid)."""
        if self.hog is None:
            return "nothing starved"
        victim, self.victim = self.victim, None
        if victim is not None and victim.starved:  # until just before it may run again
            victim.starved[-1] = (victim.starved[-1][0], time.monotonic_ns())
        if victim is not None and victim.alive:
            _each_thread(victim.pid, os.SCHED_OTHER, os.sched_getaffinity(0))
        self.hog.kill()
        self.hog.wait()
        self.hog = None
        return f"pid {victim.pid if victim else '?'} fed"


def _each_thread(pid: int, policy: int, cpus: set[int]) -> None:
    """Set every thread's policy and CPUs (a thread may end meanwhile: skipped)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)
            os.sched_setscheduler(int(tid), policy, os.sched_param(0))
