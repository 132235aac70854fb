"""The etcd chaos harness cannot fail on its own: a member etcd ended itself is restarted.

Seed 28 at 0c37b81: an etcd member had exited though the harness took none
down, the next member fault picked it as a follower, and its SIGSTOP raised
``ProcessLookupError``: the run ended with a traceback instead of a verdict.
The member's end is etcd's, not Highlander's; the harness now restarts it,
reports it (a note with the member's last log line, a harness count) and
goes on. Real cluster, real SIGKILL from outside the harness.
"""

from __future__ import annotations

from pathlib import Path

from scripts.chaos.etcd_runner import EtcdRunner
from scripts.chaos.log import EventTail
from scripts.chaos.procs import Lab
from scripts.chaos.schedule import Step
from tests.support.etcd_cluster import Cluster


def test_a_member_that_ended_by_itself_is_restarted_not_faulted(
    tmp_path: Path, faulty: Cluster
) -> None:
    (tmp_path / "lab").mkdir()
    lab = Lab(tmp_path / "lab")
    try:
        env = {"HIGHLANDER_BACKEND": faulty.backend, "HIGHLANDER_PROJECT_ID": "harness/test"}
        tail = EventTail(str(tmp_path / "events.jsonl"))
        runner = EtcdRunner(lab, tail, lambda _: None, faulty, env, "h0")
        member = faulty.members[1]
        assert member.process is not None
        member.process.kill()  # etcd's own end, as far as the harness knows
        member.process.wait(timeout=30)
        said = runner.member_fault(Step(5, "etcd_stop_follower", {"pick": 0.0}))
        assert said == f"etcd {member.name} had exited by itself: restarted"
        assert member.process.poll() is None  # running again
        assert runner.harness["etcd member exited by itself, restarted"] == 1
        assert any(f"etcd {member.name} exited by itself" in note for note in runner.notes)
        assert runner.member_faults == {}  # no fault was made on top
    finally:
        lab.end_all()
