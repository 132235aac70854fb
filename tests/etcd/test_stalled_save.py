"""A save that stops advancing, over etcd, after the newcomer it was for left.

Found by ``make chaos-etcd`` (seeds 27 and 42, docs/reliability.md): a
newcomer that had judged a holder's save stalled asked again and was
answered BUSY naming itself, 200 times, then gave up, and so did the next
newcomer.  The holder still called it its successor: its follower of the hung
hook sent nothing, so nothing told it the newcomer's conversation had ended
(:class:`highlander._shell.saving.SuccessorLeft`).  Reproduced here with a
newcomer SIGKILLed mid-save (the next newcomer gave up after 200 attempts
before the fix); the same on one machine is in tests/processes/test_watchdog.py.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

from tests.support.etcd_cluster import Cluster
from tests.support.proctools import Child, Children

#: The chaos run's own deadlines (scripts/chaos/schedule.py).
CHAOS = {"hello": 0.5, "stall": 0.6, "ceiling": 2.0, "exit_grace": 0.5, "request": 2.0}
#: Hang guard (never a performance bound).
SETTLE = 90.0


def _start(kids: Children, etcd: Cluster, project: str, host: str, **cfg: Any) -> Child:
    """A child holding (or claiming) ``project`` on simulated host ``host``, TTL 2 s."""
    env = kids.env(
        HIGHLANDER_BACKEND=etcd.backend, HIGHLANDER_PROJECT_ID=project, HIGHLANDER_HOST_ID=host,
        HIGHLANDER_ETCD_TTL="2",
    )  # fmt: skip
    return kids.start(env, hold=600, **cfg)


def test_a_newcomer_killed_during_a_hung_save_leaves_no_successor_behind(
    kids: Children, etcd: Cluster
) -> None:
    project = f"example.com/tests/{uuid.uuid4().hex}"
    saves = kids.witness.with_name("saves.log")
    first = _start(
        kids, etcd, project, "h1", steps=2, step_delay=0.05, save="stall", save_witness=str(saves)
    )
    first.wait_for("ready")
    patience = {**CHAOS, "stall": 600.0, "ceiling": 1200.0}  # it would wait ten minutes
    patient = _start(kids, etcd, project, "h2", timeouts=patience)
    deadline = time.monotonic() + SETTLE  # a hang guard
    while not [e for e in kids.events("progress") if e["pid"] == patient.pid and e["counter"] == 2]:
        assert time.monotonic() < deadline, "the patient newcomer saw no progress"
        time.sleep(0.05)
    os.kill(patient.pid, signal.SIGKILL)
    assert patient.finish()[0] == -signal.SIGKILL
    second = _start(kids, etcd, project, "h3", timeouts=CHAOS)
    ready = second.wait_for("ready", timeout=SETTLE)
    assert ready["outcome"] == "claimed_stale", ready
    left = [e for e in kids.events("timeout") if e.get("reason") == "successor left"]
    assert [(e["pid"], e["peer_pid"]) for e in left][:1] == [(first.pid, patient.pid)]
    # A SIGKILLed newcomer's keys go with its lease (TTL 2 s): until then the
    # holder cannot know it left, and says BUSY in its name; never after.
    named = [e for e in kids.events("busy") if e.get("successor_pid") == patient.pid]
    assert all(e["ts"] <= left[0]["ts"] for e in named if e["pid"] == first.pid), named
    assert [(e["pid"], e["phase"]) for e in kids.events("hung")][:1] == [(second.pid, "stall")]
    assert [line.split()[0] for line in saves.read_text().splitlines()] == ["start"]
