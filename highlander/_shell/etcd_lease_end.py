"""An incumbent's lease running out, waited for: never a signal, another host's or not.

:func:`expires`: a silent reign whose lease nobody renews is left to run out
rather than fenced (:meth:`EtcdBackend.fence
<highlander._shell.etcd_backend.EtcdBackend.fence>`), bounded, on the lease
as etcd reports it (``/v3/lease/timetolive``).  (A successor no longer
outlasts the incumbent that moved the key to it: that incumbent stopped
acting before it sent the move, :mod:`highlander._shell.etcd_takeover`.)
"""

from __future__ import annotations

from highlander._core.errors import EtcdError
from highlander._core.lease import KEEPALIVES_PER_TTL, margin_for
from highlander._etcd import api
from highlander._host.waiting import Waiter
from highlander._shell.etcd_backend import POLL, EtcdBackend
from highlander._shell.etcd_opened import Opened


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
