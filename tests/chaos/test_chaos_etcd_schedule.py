"""The etcd chaos schedule (scripts/chaos/etcd_schedule.py): fixed by its seed, etcd faults only.

Pure and fast: no cluster, no process.  ``make chaos-etcd`` runs the schedule
itself (docs/reliability.md, "Issue #15: chaos on etcd").
"""

from __future__ import annotations

from scripts.chaos.etcd_schedule import (
    HOSTS,
    LOCAL_ONLY,
    MEMBER_FAULTS,
    STORM,
    WEIGHTS,
    child_params,
    make_etcd_schedule,
    settler_host,
)
from scripts.chaos.schedule import STARTS, make_schedule

SEED = 1
EVENTS = 300


def test_the_etcd_schedule_is_fixed_by_the_seed() -> None:
    assert make_etcd_schedule(SEED, EVENTS) == make_etcd_schedule(SEED, EVENTS)
    assert make_etcd_schedule(SEED, EVENTS) != make_etcd_schedule(SEED + 1, EVENTS)
    assert settler_host(SEED) == settler_host(SEED) and settler_host(SEED) in HOSTS


def test_the_etcd_schedule_draws_no_local_only_fault() -> None:
    assert not LOCAL_ONLY & set(WEIGHTS)
    for seed in range(1, 11):
        kinds = {step.kind for step in make_etcd_schedule(seed, EVENTS)}
        assert not kinds & LOCAL_ONLY, (seed, kinds & LOCAL_ONLY)
        assert "switch_location" not in kinds and "start_low_nofile" not in kinds


def test_the_etcd_schedule_has_the_clusters_faults_and_their_undoing() -> None:
    schedule = make_etcd_schedule(SEED, EVENTS)
    kinds = {step.kind for step in schedule}
    assert set(MEMBER_FAULTS) <= {
        step.kind for seed in range(1, 4) for step in make_etcd_schedule(seed, EVENTS)
    }
    assert {"start_hang", "start_late_ack", "start_stuck", "sigkill_holder"} <= kinds
    assert {"sigstop_holder", "sigkill_newcomer", "sigstop_newcomer", "fork_worker"} <= kinds
    for step in schedule:
        if step.kind in MEMBER_FAULTS and step.index + step.params["after"] < EVENTS:
            undo = MEMBER_FAULTS[step.kind]
            assert any(
                later.kind == undo and later.params["origin"] == step.index
                for later in schedule[step.index + 1 :]
            ), step


def test_every_etcd_child_runs_on_a_drawn_host_and_never_hangs_in_on_deposed() -> None:
    schedule = make_etcd_schedule(SEED, EVENTS)
    assert schedule[0].kind == "start_normal"
    hosts: set[str] = set()
    for step in schedule:
        if step.kind in STARTS:
            assert step.params["host"] in HOSTS
            hosts.add(step.params["host"])
            assert not step.params.get("hang_when_deposed")
        if step.kind == "storm":
            assert step.params["count"] == STORM == len(step.params["hosts"])
            assert set(step.params["hosts"]) <= set(HOSTS)
            assert child_params(step.params, "h2") == {
                **{k: v for k, v in step.params.items() if k != "hosts"},
                "host": "h2",
            }
    assert hosts == set(HOSTS)


def test_the_local_schedule_is_untouched_by_the_etcd_tables() -> None:
    local = make_schedule(SEED, EVENTS)
    assert all("host" not in step.params for step in local)
    assert {"corrupt_state", "delete_socket"} <= {step.kind for step in local}
