"""A holder whose reign etcd ended early steps down at once: real processes, a real cluster.

A holder's bound counts from its last answered keepalive, which is sound
only while its lease ends by its TTL or by a fence (which then waits a
TTL).  Two things end a reign in etcd without either: someone deletes the
holder key by hand (``etcdctl del``), and a lease revoked early, which is
what etcd 3.5.1's stale leader did in ``make chaos-etcd`` (seeds 1 and 45:
a leader stopped past the TTL revoked, on resuming, leases the new leader
had kept alive).  Before, the first left the holder acting for ever beside
the next claimer (its lease lived on), and the second until its next
keepalive.  Now the holder's one watch also follows its holder key, and
the reign ends when the key is deleted or put on a lease that is not its
successor's.

And the successor's side of it.  A successor used to wait for an incumbent
slow to learn that its move applied (or stopped) to let go, and could see
its own reign ended in etcd meanwhile (chaos-etcd seed 2, fault
``etcd_end_reign``); it then read again and claimed the free key with the
handoff.  Since 2026-12-07 the incumbent lets go before it sends the move
and the successor holds at the move, so there is no such wait to test
(``tests/etcd/test_chaos_findings_2.py``).  And a newcomer stopped after
SAVED and resumed after other reigns, whose
last one ended in etcd, found the key free and claimed it with the old
handoff (seed 2: two minutes and 97 reigns late); it now begins fresh.
"""

from __future__ import annotations

import base64
import os
import signal
from typing import Any

from highlander._etcd import api
from highlander._etcd.session import app_root, holder_key
from tests.etcd.test_handle import FAST, SETTLE, Hosts, hosts
from tests.support.etcd_cluster import post
from tests.support.proctools import wait_stopped

__all__ = ["hosts"]


def _key(hosts: Hosts) -> bytes:
    return holder_key(app_root("child", hosts.project, {}))


def _holder(hosts: Hosts) -> api.KeyValue:
    _, kvs = api.got(post(hosts.etcd.endpoints[0], "/v3/kv/range", api.get(_key(hosts))))
    assert kvs, "nobody holds the project"
    return kvs[0]


def _deposed_by_etcd(hosts: Hosts, first: Any, why: str = "holder key was deleted") -> str:
    """The holder's step-down, as it told its application and the event log."""
    deposed = first.wait_for("deposed", timeout=SETTLE)
    assert first.finish(SETTLE)[0] == 0  # it left by itself
    lost = [e for e in hosts.events("lease_lost") if e["pid"] == first.pid]
    assert len(lost) == 1, hosts.events()
    assert why in lost[0]["reason"], lost
    return str(deposed["why"])


def test_a_holder_whose_key_is_deleted_by_hand_steps_down(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    key = base64.b64encode(_key(hosts)).decode()
    answer = post(hosts.etcd.endpoints[0], "/v3/kv/deleterange", {"key": key})
    assert answer.get("deleted") == "1", answer
    # Its lease lives on (keepalives are answered): only the key's watch can tell it.
    assert "lease" in _deposed_by_etcd(hosts, first)
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["outcome"] == "claimed_stale" and report["generation"] == 2, report
    assert hosts.events("terminated") == [] and hosts.events("fenced") == []


def test_a_holder_whose_lease_is_revoked_early_steps_down_before_its_next_keepalive(
    hosts: Hosts,
) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    lease = _holder(hosts).lease
    post(hosts.etcd.endpoints[0], "/v3/lease/revoke", api.revoke(lease))
    _deposed_by_etcd(hosts, first)  # before: "gone", learnt from a refused keepalive
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["generation"] == 2, report


def test_a_holder_whose_key_is_overwritten_on_its_own_lease_steps_down(hosts: Hosts) -> None:
    # The same lease, another write: the fencing token (its mod revision) moved on.
    first = hosts.start("h1")
    first.wait_for("ready")
    kv = _holder(hosts)
    body = {"key": base64.b64encode(kv.key).decode(), "value": "", "lease": str(kv.lease)}
    post(hosts.etcd.endpoints[0], "/v3/kv/put", body)
    _deposed_by_etcd(hosts, first, why="holder key was overwritten")


def test_its_own_handover_move_is_no_lost_key(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    second = hosts.start("h2")
    assert second.wait_for("ready", timeout=SETTLE)["outcome"] == "succeeded"
    assert first.finish(SETTLE)[0] == 0
    assert hosts.events("lease_lost") == [], hosts.events("lease_lost")
    assert _holder(hosts).lease != 0


def test_a_newcomer_resumed_after_later_reigns_claims_without_its_old_handoff(
    hosts: Hosts,
) -> None:
    first = hosts.start("h1", timeouts={**FAST, "request": 60.0})  # it waits for the ACK
    first.wait_for("ready")
    late = hosts.start("h2", before_ack={"stop": True, "once": True})
    late.wait_for("before_ack", timeout=SETTLE)  # it has the handoff, and stops itself
    wait_stopped(late.pid)
    first.proc.kill()  # no REFUSED ever comes: its stream ends with its lease
    first.proc.wait(timeout=SETTLE)
    second = hosts.start("h3")  # a later reign, once that lease ran out; it ends in etcd
    assert second.wait_for("ready", timeout=SETTLE)["generation"] == 2
    key = base64.b64encode(_key(hosts)).decode()
    post(hosts.etcd.endpoints[0], "/v3/kv/deleterange", {"key": key})
    second.wait_for("deposed", timeout=SETTLE)
    os.kill(late.pid, signal.SIGCONT)
    ready = late.wait_for("ready", timeout=SETTLE)
    # Before: "succeeded" with the first reign's handoff, older than the second's state.
    assert ready["outcome"] == "claimed_stale" and ready["handoff"] is None, ready
    assert ready["generation"] == 3 and ready["is_holder"] is True, ready
    aborted = [e for e in hosts.events("handover_aborted") if e["pid"] == late.pid]
    assert [e["peer_pid"] for e in aborted] == [first.pid], aborted
    assert "reigns began after" in aborted[0]["reason"]
