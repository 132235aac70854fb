"""Scratch: a newcomer SIGSTOPped during a hung save."""

from __future__ import annotations

import os
import signal
import time

from tests.processes.test_watchdog import FAST
from tests.support.proctools import Children


def test_stopped(kids: Children) -> None:
    saves = kids.witness.with_name("saves.log")
    first = kids.start(steps=2, step_delay=0.05, save="stall", save_witness=str(saves))
    first.wait_for("ready")
    patient = kids.start(timeouts={**FAST, "stall": 600.0, "ceiling": 1200.0})
    deadline = time.monotonic() + 30
    while not [e for e in kids.events("progress") if e["pid"] == patient.pid and e["counter"] == 2]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.kill(patient.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        second = kids.start(timeouts=FAST)
        report = second.next_report(100)
        print("second after", time.monotonic() - t0, report, FAST)
        from collections import Counter
        print(Counter(e["event"] for e in kids.events() if e["pid"] == second.pid))
    finally:
        os.kill(patient.pid, signal.SIGKILL)
