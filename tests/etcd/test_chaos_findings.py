"""What ``make chaos-etcd`` found in the etcd backend (docs/reliability.md, issue #15's chaos).

Each test reproduces one finding outside the harness, with the library's own
defaults where that is enough; each failed before its fix (a fencer waiting
out its fence was fenced in turn; a session kept offering an ended lease; a
process that could not reach etcd said why and never exited).  No test
bounds a duration: the livelock is told by a count of fences, the others by
a hang guard.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from typing import Any

import pytest

from highlander._etcd.session import session_for
from tests.support.etcd_cluster import Cluster, free_port, post
from tests.support.proctools import Child, Children

#: Hang guard (never a performance bound).
SETTLE = 90.0
#: A correct fence ends a reign once; a chain of this many fences and no claim is the livelock.
CHAIN = 10


def _start(kids: Children, etcd: Cluster, project: str, host: str, **cfg: Any) -> Child:
    env = kids.env(
        HIGHLANDER_BACKEND=etcd.backend,
        HIGHLANDER_PROJECT_ID=project,
        HIGHLANDER_ETCD_TTL="5",
        HIGHLANDER_HOST_ID=host,
    )
    return kids.start(env, hold=600, **cfg)


def test_newcomers_arriving_during_a_fence_do_not_fence_the_fencer(
    kids: Children, etcd: Cluster
) -> None:
    # The library's defaults (hello 2 s, TTL 5 s); a holder hung in its save must be fenced.
    project = f"example.com/tests/{uuid.uuid4().hex}"
    first = _start(kids, etcd, project, "h0", save="stall")
    first.wait_for("ready")
    deadline = time.monotonic() + SETTLE
    newcomers: list[Child] = []
    while time.monotonic() < deadline:
        if len(newcomers) < 6:  # newcomers keep arriving, as under load
            newcomers.append(_start(kids, etcd, project, f"h{1 + len(newcomers) % 3}"))
        time.sleep(1.5)
        fenced = kids.events("fenced")
        claimed = [e for e in kids.events("claimed") if e["pid"] != first.pid]
        if claimed or len(fenced) >= CHAIN:
            break
    assert claimed, f"{len(fenced)} fences in a chain and no claim: {fenced[-3:]}"
    assert len(fenced) < CHAIN


def test_a_newcomer_that_cannot_reach_etcd_exits_with_its_one_line_error(kids: Children) -> None:
    env = kids.env(
        HIGHLANDER_BACKEND=f"etcd://127.0.0.1:{free_port()}",  # nobody listens there
        HIGHLANDER_PROJECT_ID=f"example.com/tests/{uuid.uuid4().hex}",
    )
    child = kids.start(env)
    try:
        status, _, err = child.finish(SETTLE)
    except subprocess.TimeoutExpired:
        pytest.fail("the process said why it gave up, then never exited")
    assert status == 1 and b"highlander: no etcd member answered" in err


def test_a_session_replaces_a_lease_that_ended(etcd: Cluster) -> None:
    session = session_for(etcd.backend, {}, ttl=2)
    try:
        keeper = session.lease_kept()
        lease = keeper.lease
        post(etcd.endpoints[0], "/v3/lease/revoke", {"ID": str(lease)})
        deadline = time.monotonic() + SETTLE
        while keeper.holds() and time.monotonic() < deadline:
            time.sleep(0.1)  # its keeper notices at its next keepalive
        assert not keeper.holds()
        assert session.lease_kept().lease != lease, "the session still offers the ended lease"
        body = {
            "key": base64.b64encode(f"/tests/{uuid.uuid4().hex}".encode()).decode(),
            "value": base64.b64encode(b"x").decode(),
            "lease": str(session.lease_kept().lease),
        }
        post(etcd.endpoints[0], "/v3/kv/put", body)  # raises HTTP 404 on a lease that is gone
    finally:
        session.close()
