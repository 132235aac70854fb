"""Claim a project's holder key on etcd: put-if-absent on our lease, with a fencing token.

The holder key exists exactly while somebody holds the project, attached to
the holder's lease, so a holder that dies or is fenced (its lease revoked)
lets go without a word.  A reign begins with exactly one write of that key
and never writes it again: the claim (put on our lease if
``create_revision == 0``) or a succession's commit (put on the successor's
lease while the key is still the incumbent's reign, :func:`commit`).  The
revision of that write, the key's ``mod_revision``, is the fencing token:
etcd's revision only grows, cluster-wide, so every later reign's token is
greater, and a user's own write guarded by ``compare mod_revision(holder
key) == token`` fails once this reign is over (docs/etcd.md, "Fencing your
own writes").  For a claimed reign that is also the key's create revision;
a commit cannot give a new one (etcd refuses to delete and re-create one key
in a transaction), so the token is the mod revision throughout.
"""

from __future__ import annotations

from collections.abc import Callable

from highlander._core.values import Value
from highlander._etcd import api
from highlander._etcd.client import Client

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._etcd.opening import Opening

#: How often a claim is tried again when the holder key vanished between the
#: transaction's compare and its read (a holder's lease ended at that instant).
_RACES = 3


class Held(Value):
    """We hold the project: the fencing token, and the lease the key rides on."""

    token: int
    lease: int
    value: bytes
    #: Claimed after a reign that neither handed over nor let go by a release
    #: (it died, was fenced, or its lease ran out): ``claimed_stale``.
    stale: bool = False


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
            return Held(kv.mod_revision, lease, kv.value)
        return kv
    raise api.MalformedAnswer(f"the holder key {key!r} kept vanishing during the claim")


def counter_key(key: bytes) -> bytes:
    """The key beside the holder key that counts reigns (the generation; on no lease)."""
    return key + b".generation"


def count_of(kv: api.KeyValue | None) -> int:
    """The generation a counter key records (0: none yet, or not a number)."""
    if kv is None:
        return 0
    try:
        return max(0, int(kv.value.split(maxsplit=1)[0]))
    except (ValueError, IndexError):
        return 0  # damaged: the claim's compare on its revision still keeps reigns apart


async def claim_reign(
    client: Client,
    key: bytes,
    lease: int,
    value_for: Callable[[int], bytes],
    opening: Opening | None = None,
) -> Held | api.KeyValue:
    """:func:`claim`, counting the reign: the new holder's value is ``value_for(generation)``.

    The claim and the counter's increment are one transaction that holds
    only while the counter is as the claim believes it, so every reign's
    generation is one more than the reign before it, cluster-wide.  The
    first attempt believes no counter exists (a project's first claim);
    when that is wrong, the failure branch has read the holder key and the
    counter: a held project is known in one request, and a free one is
    claimed with the counter just read.

    ``opening``: the first attempt's failure branch also queues us and opens
    our conversation (:mod:`highlander._etcd.opening`), which learns from
    its answer what it did.
    """
    counter = counter_key(key)
    last = mod = 0
    stale = False
    for attempt in range(_RACES):
        body = api.claim_counted(key, value_for(last + 1), lease, counter, mod, last + 1)
        if opening is not None and attempt == 0:
            raw = await client.call("/v3/kv/txn", opening.extend(body))
            opening.read(raw)
            answer = api.txn(raw)
        else:
            answer = api.txn(await client.call("/v3/kv/txn", body))
        holders = answer.ranges[0] if answer.ranges else ()
        if holders:
            kv = holders[0]
            if answer.succeeded or kv.lease == lease:
                return Held(kv.mod_revision, lease, kv.value, stale)
            return kv
        if answer.succeeded:
            continue  # the key went between the put and the read: again
        # Nobody holds, but the counter is not as believed: claim above it.
        counted = answer.ranges[1] if len(answer.ranges) > 1 else ()
        last = count_of(counted[0] if counted else None)
        mod = counted[0].mod_revision if counted else 0
        stale = last > 0 and not counted[0].value.endswith(api.RELEASED)
    raise api.MalformedAnswer(f"the holder key {key!r} kept changing during the claim")


async def mark_released(client: Client, key: bytes, held: Held, generation: int) -> None:
    """Record that reign ``generation`` (``held``) lets go by a release (``api.mark_released``)."""
    body = api.mark_released(key, held.token, counter_key(key), generation)
    await client.call("/v3/kv/txn", body, budget=1.0)


async def commit(
    client: Client, key: bytes, value: bytes, incumbent: Held, lease: int
) -> Held | api.KeyValue | None:
    """The succession's commit point: move the holder key from ``incumbent``'s reign to ours.

    :class:`Held` once it is ours (also when a retried commit finds it on our
    lease already); the key as it is when the incumbent's reign is over by
    other means (fenced, expired, another commit); ``None`` when nobody holds.
    """
    body = api.move(key, value, incumbent.token, incumbent.lease, lease)
    answer = api.txn(await client.call("/v3/kv/txn", body))
    if not answer.kvs:
        return None
    kv = answer.kvs[0]
    if answer.succeeded or kv.lease == lease:
        return Held(kv.mod_revision, lease, kv.value)
    return kv


async def holder(client: Client, key: bytes, budget: float | None = None) -> api.KeyValue | None:
    """The holder key now (a linearizable read), or ``None`` while nobody holds."""
    _, kvs = api.got(await client.call("/v3/kv/range", api.get(key), budget=budget))
    return kvs[0] if kvs else None


async def still_held(client: Client, key: bytes, held: Held, budget: float | None = None) -> bool:
    """Whether ``held`` is still the reign etcd records (linearizable: ``check_current()``).

    ``budget``: the time the lease bound leaves (an answer after it proves nothing).
    """
    kv = await holder(client, key, budget)
    return kv is not None and kv.mod_revision == held.token and kv.lease == held.lease
