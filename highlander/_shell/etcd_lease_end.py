"""An incumbent's lease running out, waited for: never a signal, another host's or not.

Two waits of the newcomer's over etcd, both on the incumbent's lease as etcd
reports it (``/v3/lease/timetolive``), both bounded:

* :func:`outlast`: the incumbent's move put the key on our lease, and we
  wait for it to let its own lease go, so that its ``relinquished`` comes
  before our reign (:mod:`highlander._shell.etcd_takeover`);
* :func:`expires`: a silent reign whose lease nobody renews is left to run
  out rather than fenced (:meth:`EtcdBackend.fence
  <highlander._shell.etcd_backend.EtcdBackend.fence>`).
"""

from __future__ import annotations

from highlander._core.errors import EtcdError
from highlander._core.lease import KEEPALIVES_PER_TTL, margin_for
from highlander._etcd import api
from highlander._host.waiting import Waiter
from highlander._shell.etcd_backend import POLL, EtcdBackend
from highlander._shell.etcd_opened import Opened


async def outlast(backend: EtcdBackend, opened: Opened, waiter: Waiter) -> None:
    """Wait until the incumbent that moved the key to us has let its lease go (bounded).

    Its move applied, but it learns so from etcd's answer: until then it has
    not said ``relinquished``, and it ends its reign (its lease, and the
    stream on it) only after.  Its commit retries while its lease bound
    holds; a lease nobody renews ends one TTL after its last keepalive.  So
    at most two of its TTLs (and etcd's rounding to whole seconds) after we
    saw the move, it has let go or cannot act any more: then we begin anyway.
    """
    # The lease its stream rides on: the holder key's, as we read it when we
    # opened, may since have been a fence's that it has moved off and revoked.
    if opened.channel.peer_gone:
        return  # its stream's keys went with its lease: it let go
    lease = opened.channel.peer_lease or opened.incumbent.lease
    deadline = waiter.now() + 2 * opened.holder.ttl + 1.0
    while waiter.now() < deadline:
        left = _lease_left(backend, lease)
        if left is not None and left[0] < 0:
            return
        await waiter.sleep(POLL)


def _lease_left(backend: EtcdBackend, lease: int) -> tuple[int, int] | None:
    """Whole seconds ``lease`` has left (-1: gone) and its granted TTL; ``None`` if unknown."""
    session = backend.session
    try:
        answer = session.call(session.client.call, "/v3/lease/timetolive", api.time_to_live(lease))
    except EtcdError:
        return None
    return api.remaining(answer)


#: How long after a lease's expiry etcd may take to delete its keys: its lessor
#: looks for expired leases every 500 ms, then commits their revoke through raft.
EXPIRY_NOTICED = 1.0


async def expires(backend: EtcdBackend, last: Opened, waiter: Waiter) -> bool:
    """Whether the silent reign's lease, unrenewed for a keepalive period, ran out.

    A live keeper renews every TTL/4, so a lease with less than 3/4 of
    its TTL (and a margin) left has had no keepalive for a while: its
    holder is dead or stopped, and the lease ends by itself sooner than
    a fence's wait of a whole TTL.  Waiting for that takes nothing from
    anyone; the key still there afterwards (renewed after all) is fenced.
    """
    lease = last.incumbent.lease
    remaining = _lease_left(backend, lease)
    if remaining is None:
        return False
    left, ttl = remaining
    if left > ttl * (1 - 1 / KEEPALIVES_PER_TTL) - margin_for(ttl):
        return False  # renewed lately: alive somewhere, and hung
    # etcd rounds the time left to whole seconds, and deletes an expired lease's
    # keys only when its lessor next looks (every 500 ms) and the revoke is
    # committed: waiting less made a dead holder's failover two TTLs (a fence).
    deadline = waiter.now() + max(left, 0) + 1.0 + EXPIRY_NOTICED
    while waiter.now() < deadline:
        kv = backend.session.holder(backend.key)
        if kv is None or kv.lease != lease:
            return True
        await waiter.sleep(POLL)
    return False
