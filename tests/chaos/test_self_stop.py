"""A child that stops itself stops before its next step, from whichever thread it asks.

The chaos faults that stop a child at a chosen moment (``before_move``:
an incumbent between its ACK and its move; ``before_ack``) hold that step
back only if the stop lands before it.  ``kill(getpid(), SIGSTOP)`` sends
the signal to the process, which the kernel gives to the main thread: a
session thread that asked ran on until the main thread was scheduled, and
sent the move it was to hold back (seed 3 of ``make chaos-etcd`` at
d9e10bf: the successor held 5 ms after the stop, before etcd was made
full).  Real processes, real SIGSTOP; no etcd needed.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from highlander._host.identity import is_halted
from tests.support.paths import REPO

#: Hang guard only.
WAIT = 10.0
ROUNDS = 20

#: A thread (not the main one, which sleeps) says "before", stops itself, says "after".
CHILD = """
import os, sys, threading, time
sys.path.insert(0, {programs!r})
import etcd_faults

def step():
    for _ in range({rounds}):
        os.write(1, b"b")
        etcd_faults.stop_here()
        os.write(1, b"a")

threading.Thread(target=step).start()
time.sleep(3600)
"""


def _read_one(fd: int) -> bytes:
    """One byte from ``fd`` if one is there now, else ``b""``."""
    ready, _, _ = select.select([fd], [], [], 0)
    return os.read(fd, 1) if ready else b""


def test_a_thread_that_stops_itself_takes_no_further_step_until_resumed() -> None:
    code = CHILD.format(programs=str(REPO / "tests" / "programs"), rounds=ROUNDS)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.fileno()
    try:
        for n in range(ROUNDS):
            assert os.read(out, 1) == b"b"
            deadline = time.monotonic() + WAIT
            while not is_halted(proc.pid):
                assert time.monotonic() < deadline, "it never stopped"
                time.sleep(0.001)
            # Stopped: nothing it did after asking may have happened.
            assert _read_one(out) == b"", f"round {n}: it stepped on after its stop"
            os.kill(proc.pid, signal.SIGCONT)
            assert os.read(out, 1) == b"a"
    finally:
        proc.kill()
        proc.wait(timeout=WAIT)
        proc.stdout.close()
