"""Claim a project's holder key on etcd: put-if-absent on our lease, with a fencing token.

The holder key exists exactly while somebody holds the project, attached to
the holder's lease, so a holder that dies or is fenced (its lease revoked)
lets go without a word.  The claim is one transaction: put the key on our
lease if ``create_revision == 0`` (it does not exist), and read it either
way.  The key's create revision is the fencing token: etcd's revision only
grows, cluster-wide, so every later reign's token is greater, and a user's
own write guarded by ``compare create_revision(holder key) == token`` fails
once this reign is over (docs/etcd.md, "Fencing your own writes").
"""

from __future__ import annotations

from dataclasses import dataclass

from highlander._etcd import api
from highlander._etcd.client import Client

#: How often a claim is tried again when the holder key vanished between the
#: transaction's compare and its read (a holder's lease ended at that instant).
_RACES = 3


@dataclass(frozen=True)
class Held:
    """We hold the project: the fencing token, and the lease the key rides on."""

    token: int
    lease: int
    value: bytes


async def claim(client: Client, key: bytes, value: bytes, lease: int) -> Held | api.KeyValue:
    """Hold ``key`` on ``lease`` if nobody does: :class:`Held`, or the holder's key.

    A claim whose first attempt timed out may have been applied all the same
    (the client asks the next member): when the key that stops the retry
    rides on our own lease, it is ours, and counts as won.
    """
    for _ in range(_RACES):
        answer = api.txn(await client.call("/v3/kv/txn", api.put_if_absent(key, value, lease)))
        if not answer.kvs:
            continue  # the key went between compare and read: try again
        kv = answer.kvs[0]
        if answer.succeeded or kv.lease == lease:
            return Held(kv.create_revision, lease, kv.value)
        return kv
    raise api.MalformedAnswer(f"the holder key {key!r} kept vanishing during the claim")


async def holder(client: Client, key: bytes) -> api.KeyValue | None:
    """The holder key now (a linearizable read), or ``None`` while nobody holds."""
    _, kvs = api.got(await client.call("/v3/kv/range", api.get(key)))
    return kvs[0] if kvs else None


async def still_held(client: Client, key: bytes, held: Held) -> bool:
    """Whether ``held`` is still the reign etcd records (linearizable: ``check_current()``)."""
    kv = await holder(client, key)
    return kv is not None and kv.create_revision == held.token and kv.lease == held.lease
