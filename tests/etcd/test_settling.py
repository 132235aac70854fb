"""A successor that learns late that it holds is waited for, not fenced: real processes.

Found by ``make chaos-etcd`` (seed 27, docs/reliability.md): an incumbent's
move went to a frozen member and landed a second late; its successor learned
of it later still (its own requests slow), and a third newcomer that met the
moved key found the reign's ``since`` (the incumbent's clock when it *sent*
the move, plus the successor's exit deadline and a HELLO) already past, got
no HELLO, fenced the successor's reign and began without the handed-over
state.  A newcomer now also counts the grace from when it first saw the
moved key (:mod:`highlander._core.settling`).

The successor here (``slow_begin``, tests/programs/etcd_faults.py) begins 4.5 s
after it saw the move, its lease renewed meanwhile: past the old grace (the
third newcomer, slowed by its turn in the queue, fenced it about 3.5 s after
the move: the test failed twice in two runs), within the new one (exit
deadline + HELLO + the successor's TTL = 6 s from the first sight).
"""

from __future__ import annotations

from highlander._core.settling import begins_in, settles_ms
from tests.etcd.test_handle import SETTLE, Hosts
from tests.support.etcd_cluster import Cluster
from tests.support.proctools import Children

#: The chaos run's own deadlines (scripts/chaos/schedule.py) and its TTL.
CHAOS = {"hello": 0.5, "stall": 0.6, "ceiling": 2.0, "exit_grace": 0.5, "request": 1.0}
TTL = 5
#: How long after seeing the move the successor begins.
LATE = 4.5


def test_a_successor_that_learns_of_its_move_late_is_waited_for_not_fenced(
    kids: Children, etcd: Cluster
) -> None:
    hosts = Hosts(kids, etcd)
    first = hosts.start("h1", ttl=TTL, timeouts=CHAOS, hold=600)
    first.wait_for("ready")
    second = hosts.start("h2", ttl=TTL, timeouts=CHAOS, hold=600, slow_begin={"delay": LATE})
    second.wait_for("move_seen", timeout=SETTLE)
    third = hosts.start("h3", ttl=TTL, timeouts=CHAOS, hold=600)

    ready = second.wait_for("ready", timeout=SETTLE)
    assert ready["outcome"] == "succeeded" and ready["handoff"]["from"] == first.pid, ready
    after = third.wait_for("ready", timeout=SETTLE)
    fenced = [e for e in hosts.events("fenced") if e.get("peer_pid") == second.pid]
    assert not fenced, f"the late successor was fenced: {fenced}"
    assert after["outcome"] == "succeeded", after
    assert after["handoff"]["from"] == second.pid, after


def test_the_grace_counts_from_the_first_sight_and_not_past_twice_its_length() -> None:
    settles = settles_ms(0.5, 0.5, 3)  # a move: exit deadline, HELLO, the successor's TTL
    assert settles == 4000
    since = 10_000
    # The writer's clock alone would say begun; our first sight says 3.5 s more.
    assert begins_in(since, settles, 11_000, seen=100.0, now=100.5) == 3.5
    # A reign that names no grace (a claim) is judged by its since alone.
    assert begins_in(since, 0, 11_000, seen=100.0, now=100.5) == -1.0
    # A reign first seen long after it was written has begun by now, whoever looks.
    assert begins_in(since, settles, since + 2 * settles, seen=100.0, now=100.0) < 0
    # Its since ahead (a fence's wait on the writer's clock) still counts.
    assert begins_in(since, settles, 8_000, seen=None, now=0.0) == 2.0
