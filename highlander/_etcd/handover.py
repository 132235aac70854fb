"""The commit of a handover over etcd, carried out: :mod:`highlander._core.etcd_commit`'s rules.

The rules decide; this module runs the transactions and reads they decide
from.  The incumbent's side runs the move after a timely ACK and learns
whether it applied, retrying a lost answer (a read cannot tell "not yet"
from "never") until its lease bound says stop.  The newcomer's side reads
where the holder key is, and fences a silent incumbent: the move itself,
guarded by the incumbent's reign and by its stream not having moved on,
onto a lease of the newcomer's that outlives the incumbent's bound; then the
revoke of the incumbent's lease; then a wait of one TTL before it acts.
"""

from __future__ import annotations

from collections.abc import Callable

from highlander._core import etcd_commit as rules
from highlander._core.errors import EtcdError, EtcdUnavailableError
from highlander._core.etcd_commit import Key, Reply, Then
from highlander._etcd import api
from highlander._etcd.claim import Held, holder
from highlander._etcd.client import Client

#: Between two attempts of a move etcd refused outright (after a lost one): the
#: refusal lasts until an operator acts, and the lease bound ends the tries.
DENIED_PAUSE = 0.25


async def where(client: Client, key: bytes, newcomer_lease: int, incumbent: Held) -> Key:
    """Where the holder key is now (a linearizable read), as the rules name it."""
    kv = await holder(client, key)
    return _classify(kv, newcomer_lease, incumbent)


def _classify(kv: api.KeyValue | None, newcomer_lease: int, incumbent: Held) -> Key:
    return rules.classify(
        None if kv is None else kv.lease,
        0 if kv is None else kv.mod_revision,
        newcomer_lease=newcomer_lease,
        incumbent_lease=incumbent.lease,
        incumbent_token=incumbent.token,
    )


async def _move_once(
    client: Client,
    key: bytes,
    value: bytes,
    incumbent: Held,
    to_lease: int,
    absent: tuple[bytes, ...] = (),
    also: tuple[tuple[bytes, bytes], ...] = (),
    mark: tuple[bytes, int] | None = None,
) -> tuple[Reply, Key | None]:
    body = api.move(key, value, incumbent.token, incumbent.lease, to_lease, absent, also, mark)
    unknown = Reply.LOST
    try:
        answer = api.txn(await client.call("/v3/kv/txn", body))
    except EtcdUnavailableError:
        pass  # lost: it may apply, now or later
    except EtcdError as refused:
        if refused.code == api.NOT_FOUND:
            return Reply.NO_LEASE, None  # the compares held; the put's lease is gone
        if refused.code in api.DENIED:
            unknown = Reply.DENIED  # not applied; where the key is, the read says
    else:
        if answer.succeeded:
            return Reply.SUCCEEDED, Key.OURS
        kv = answer.kvs[0] if answer.kvs else None
        return Reply.FAILED, _classify(kv, to_lease, incumbent)
    try:
        return unknown, await where(client, key, to_lease, incumbent)
    except EtcdError:
        return unknown, Key.THEIRS_INTACT  # nothing known: only another attempt tells


async def incumbent_moves(
    client: Client,
    key: bytes,
    value: bytes,
    incumbent: Held,
    newcomer_lease: int,
    may_retry: Callable[[], bool],
    also: tuple[tuple[bytes, bytes], ...] = (),
    mark: bytes | None = None,
) -> Then:
    """Run the move after a timely ACK until the rules settle it: DEPOSED, KEEP or STEP_DOWN.

    ``may_retry``: whether the incumbent's lease bound still allows another
    attempt (asked after each unsettled one).  ``also``: keys put with the
    move (the reign counter).  ``mark``: the conversation's ``moved`` key,
    put with the move on the incumbent's lease (its stream's: it goes when
    the stream ends), holding the key's new value.
    """
    marked = None if mark is None else (mark, incumbent.lease)
    unsure = False  # an attempt's answer was lost: it may still apply
    while True:
        reply, found = await _move_once(
            client, key, value, incumbent, newcomer_lease, (), also, marked
        )
        then = rules.incumbent_learns(reply, found, can_retry=may_retry(), unsure=unsure)
        if then is not Then.RETRY:
            return then
        unsure = unsure or reply is Reply.LOST
        if reply is Reply.DENIED:  # answered at once, and again until an operator acts
            await client.runtime.sleep(DENIED_PAUSE)


async def fence(
    client: Client,
    key: bytes,
    value: bytes,
    incumbent: Held,
    fence_lease: int,
    ttl: float,
    unread: tuple[bytes, ...],
    also: tuple[tuple[bytes, bytes], ...] = (),
) -> Key:
    """Fence a silent incumbent out, then say where the key is (for ``rules.after_fence``).

    :func:`fence_out`, the wait of :func:`~highlander._core.etcd_commit.fence_wait`,
    and a read; a caller with a clock of its own runs the three itself.
    """
    found = await fence_out(client, key, value, incumbent, fence_lease, unread, also)
    if found is not Key.OURS:
        return found
    await client.runtime.sleep(rules.fence_wait(ttl))
    return await where(client, key, fence_lease, incumbent)


async def fence_out(
    client: Client,
    key: bytes,
    value: bytes,
    incumbent: Held,
    fence_lease: int,
    unread: tuple[bytes, ...],
    also: tuple[tuple[bytes, bytes], ...] = (),
) -> Key:
    """The fence's move and revoke; OURS once both applied, else where the key is.

    ``fence_lease`` must outlive the incumbent's lease bound (a TTL of at
    least two of the incumbent's); ``unread``: the incumbent's stream keys
    that must not exist (its next chunk, its ``fin``), so a fence never lands
    on an incumbent that answered after all.  After OURS the caller waits
    :func:`~highlander._core.etcd_commit.fence_wait` before it acts: every
    keepalive the incumbent had answered was sent before the revoke applied,
    so before its answer, and its belief lasts one TTL from such a send.
    """
    reply, found = await _move_once(client, key, value, incumbent, fence_lease, unread, also)
    if reply is Reply.LOST and found is Key.THEIRS_INTACT:
        raise EtcdUnavailableError("etcd did not settle the fence: try again", api.UNAVAILABLE)
    if found is not Key.OURS:
        return Key.THEIRS_INTACT if found is None else found
    try:
        await client.call("/v3/lease/revoke", api.revoke(incumbent.lease))
    except EtcdError as refused:
        if refused.code != api.NOT_FOUND:
            raise  # unsettled: the caller tries again (the move is ours already)
    return Key.OURS
