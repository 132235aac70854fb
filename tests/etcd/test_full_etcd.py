"""A full etcd (the NOSPACE alarm): the holder keeps its reign and state; a newcomer hears the fix.

etcd stops taking writes once its database reaches its quota, and raises
the ``NOSPACE`` alarm until an operator frees space and disarms it; lease
keepalives go on.  The etcd counterpart of a full disk on one machine.  A
holder then keeps holding (nothing it needs is a write), a newcomer cannot
begin (its lease grant and its claim are writes) and says what to do
(``refusals.FULL``), and an incumbent whose move etcd refuses keeps the
project instead of retrying until its lease bound and stepping down, which
left the state only in a newcomer that could claim nothing.  Once the alarm
is disarmed the next newcomer takes over with the state.

The alarm is raised with etcd's own maintenance API (``ACTIVATE``), as the
quota raises it, on a cluster of this module's own (one member): the
suite's shared cluster never sees it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from highlander._etcd import api
from scripts.chaos.etcd_data import nospace
from tests.etcd.test_handle import FAST, SETTLE, Hosts
from tests.etcd.test_key_lost import _holder
from tests.support.etcd_cluster import Cluster, post, start_cluster
from tests.support.proctools import Child, Children


@pytest.fixture
def full(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A one-member cluster for the alarm; ended by pid afterwards."""
    cluster = start_cluster(tmp_path_factory.mktemp("full"), size=1)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def hosts(kids: Children, full: Cluster) -> Hosts:
    """Children of one fresh project on the one-member cluster."""
    return Hosts(kids, full)


def _alarm(etcd: Cluster, *, on: bool) -> list[object]:
    """Raise or disarm the NOSPACE alarm (as ``make chaos-etcd`` does); the alarms etcd then has."""
    assert nospace(etcd, on=on) is not None
    listed = post(etcd.endpoints[0], "/v3/maintenance/alarm", {"action": "GET"})
    alarms = listed.get("alarms", [])
    assert isinstance(alarms, list)
    return alarms


def _told_the_fix(newcomer: Child) -> None:
    """The newcomer ended with an EtcdError that names etcd's words and the fix."""
    error = newcomer.wait_for("error", timeout=SETTLE)
    assert error["type"] == "EtcdError", error
    assert "database space exceeded" in error["message"], error
    assert "etcdctl alarm disarm" in error["message"], error
    assert newcomer.finish(SETTLE)[0] == 1


def _takes_over_after_the_disarm(hosts: Hosts, etcd: Cluster, first: Child) -> None:
    """Disarmed, a newcomer takes over with the state the holder kept all along."""
    assert _alarm(etcd, on=False) == []
    third = hosts.start("h3")
    report = third.wait_for("ready", timeout=SETTLE)
    assert (report["outcome"], report["generation"]) == ("succeeded", 2), report
    assert report["handoff"]["from"] == first.pid and report["handoff"]["counter"] == 1
    assert first.finish(SETTLE)[0] == 0  # deposed by the handover, not before


def test_a_newcomer_to_a_full_etcd_is_told_the_fix_and_the_holder_keeps(
    hosts: Hosts, full: Cluster
) -> None:
    first = hosts.start("h1")
    assert first.wait_for("ready")["generation"] == 1
    assert _alarm(full, on=True) != []
    _told_the_fix(hosts.start("h2", report_errors=True))
    # The holder's keepalives are no writes: its lease lives on, whatever time passed.
    lease = _holder(hosts).lease
    assert int(post(full.endpoints[0], "/v3/lease/timetolive", api.time_to_live(lease))["TTL"]) > 0
    assert first.proc.poll() is None
    assert not hosts.events("lease_lost") and not hosts.events("deposed")
    _takes_over_after_the_disarm(hosts, full, first)


def test_a_move_etcd_refuses_leaves_the_incumbent_holding(hosts: Hosts, full: Cluster) -> None:
    # The incumbent runs its move a second after the ACK; etcd is full by then.  The
    # newcomer waits 4 s for the incumbent's answer: longer than the incumbent's lease
    # bound (TTL 2 s), which a retry against the refusal ran into (STEP_DOWN).
    first = hosts.start("h1", before_move={"delay": 1.0})
    first.wait_for("ready")
    second = hosts.start("h2", timeouts={**FAST, "exit_grace": 4.0}, report_errors=True)
    first.wait_for("moving", timeout=SETTLE)
    assert _alarm(full, on=True) != []
    assert first.wait_for("moved", timeout=SETTLE)["then"] == "Then.KEEP"
    _told_the_fix(second)  # it found the incumbent silent; its fence is a write too
    assert first.proc.poll() is None
    assert not hosts.events("lease_lost")
    # It let go before the move, and took the project back when etcd refused it.
    said = [e["event"] for e in hosts.events() if e["pid"] == first.pid]
    assert "resumed" in said[said.index("relinquished") :], said
    _takes_over_after_the_disarm(hosts, full, first)
