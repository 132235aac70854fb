"""A SIGKILLed holder on etcd is outlasted (its lease runs out), never fenced: real processes.

Found by ``make bench`` (its failover row, median 10.2 s against TTL + 0.5 s):
a newcomer that finds a silent holder whose lease was not renewed lately
waits for the lease to end rather than fence (a fence waits a whole TTL
after its revoke).  It waited the lease's time left, in etcd's whole seconds,
plus one second; but etcd deletes an expired lease's keys only when its
lessor next looks (every 500 ms) and the revoke is committed, so a holder
killed just after a keepalive, whose lease had just under a whole second
left at the look, was fenced about half of the time.  The test kills the
holder right after etcd saw a keepalive, the worst phase.
"""

from __future__ import annotations

import time
from typing import Any

from highlander._etcd import api
from highlander._etcd.session import app_root, holder_key
from tests.etcd.test_handle import FAST, SETTLE, Hosts
from tests.support.etcd_cluster import Cluster, post
from tests.support.proctools import Children

#: The library's default TTL and HELLO deadline: the newcomer looks at the lease
#: after two silent attempts, about 4.1 s after the kill, just under 1 s before its end.
TTL = 5
TIMEOUTS = {**FAST, "hello": 2.0}


def _lease_ttl(project: Hosts, lease: int) -> int:
    answer = post(project.etcd.endpoints[0], "/v3/lease/timetolive", api.time_to_live(lease))
    return api.remaining(answer)[0]


def _holders_lease(project: Hosts) -> int:
    key = holder_key(app_root("child", project.project, {}))
    answer = post(project.etcd.endpoints[0], "/v3/kv/range", api.get(key))
    _, kvs = api.got(answer)
    assert kvs, "nobody holds the project"
    return kvs[0].lease


def _just_renewed(project: Hosts, lease: int) -> None:
    """Return right after etcd renewed ``lease`` (its time left went up)."""
    deadline = time.monotonic() + SETTLE  # a hang guard: a keepalive comes every TTL/4
    last = _lease_ttl(project, lease)
    while (now := _lease_ttl(project, lease)) <= last:
        assert time.monotonic() < deadline, "the holder's lease was never renewed"
        last = now
        time.sleep(0.005)


def test_a_holder_killed_right_after_a_keepalive_is_outlasted_not_fenced(
    kids: Children, etcd: Cluster
) -> None:
    """Two rounds: the old wait fenced in about half of the rounds (2 of 4 in a row)."""
    for _ in range(2):
        project = Hosts(kids, etcd)  # a fresh project each round
        first = project.start("h1", ttl=TTL, timeouts=TIMEOUTS)
        first.wait_for("ready")
        _just_renewed(project, _holders_lease(project))
        first.proc.kill()
        first.proc.wait(timeout=SETTLE)
        second = project.start("h2", ttl=TTL, timeouts=TIMEOUTS)
        report: dict[str, Any] = second.wait_for("ready", timeout=SETTLE)
        assert report["outcome"] == "claimed_stale" and report["handoff"] is None
        mine = [e["event"] for e in project.events() if e["pid"] == second.pid]
        assert "hung" in mine, mine  # it found the holder silent, and looked at its lease
        assert "fenced" not in mine, mine
        second.proc.kill()
        second.proc.wait(timeout=SETTLE)
