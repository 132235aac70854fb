"""The etcd backend's claim, and a newcomer's first, which opens its conversation when held.

A claim is put-if-absent of the holder key on our lease, counting the reign
(:func:`highlander._etcd.claim.claim_reign`).  The first claim of a newcomer
that may talk to the holder (AUTO) does more: what that request does is
:mod:`highlander._etcd.opening`'s; this module carries it out.  The
conversation's inbound watch is opened on the session's loop while the
lease is granted (a watch must exist before the holder can answer), then
the claim goes out with our queue place and our ``here`` on its failure
branch.  Its answer leaves one of three things:

* we hold (a free project): the watch is closed, and whatever a lost
  attempt of the claim may have written besides is deleted, in the background;
* the project is held and nobody was queued before us: we joined the queue
  and spoke, so the conversation is open, and the newcomer's first attempt
  talks at once (:meth:`EtcdBackend.opened_early`, the seam's early dial);
* the project is held and others are queued: we joined the queue and wait
  our turn as before (the unused conversation is dropped).

If the watch does not open within the client's budget, the claim goes out
plain and the newcomer queues and opens as it did before.
"""

from __future__ import annotations

import contextlib
import time

from highlander._core.errors import EtcdError
from highlander._etcd import api
from highlander._etcd.channel import Channel, newcomer_side
from highlander._etcd.claim import Held
from highlander._etcd.opening import Opening
from highlander._host.event_log import Outcome
from highlander._host.modes import Mode
from highlander._shell.etcd_preload import Preload

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from highlander._etcd.loop_thread import Spawned
    from highlander._host.claim import Reign
    from highlander._host.settings import Settings
    from highlander._shell.etcd_backend import EtcdBackend


def claim(backend: EtcdBackend, settings: Settings) -> Reign | None:
    """See :meth:`Backend.claim`: the reign we now hold, or ``None`` (the holder key is kept)."""
    unused = backend.opened_early()
    if unused is not None:
        unused[0].close()  # a caller that claims again did not talk over it: it ends
    if backend.fenced is not None:
        reign, backend.fenced = backend.fenced, None
        return reign
    since = int(time.time() * 1000)

    def value_for(generation: int) -> bytes:
        return backend.value(generation, since).encode()

    try:
        if backend.first and settings.mode is Mode.AUTO:
            backend.first = False
            result = first_claim(backend, value_for)
        else:
            result = backend.session.claim_reign(backend.key, value_for)
    except EtcdError as refused:
        if refused.code != api.NOT_FOUND:
            raise
        backend.session.lease_kept(renew=True)  # our lease is gone (etcd says): a new one
        result = backend.session.claim_reign(backend.key, value_for)
    backend.first = False  # OBSERVE and WARN too: a later claim is a plain one
    if isinstance(result, Held):
        stale, backend.stale = backend.stale or result.stale, False
        saved, backend.saved = backend.saved, None
        if saved is not None:
            from highlander._shell.etcd_takeover import moved_to_us  # noqa: PLC0415

            if moved_to_us(backend, result, since, saved[0]):
                return backend.reign(result, Outcome.SUCCEEDED, saved[1])
        outcome = Outcome.CLAIMED_STALE if stale else Outcome.CLAIMED_FREE
        return backend.reign(result, outcome, None)
    backend.found(result)
    return None


def first_claim(backend: EtcdBackend, value_for: Callable[[int], bytes]) -> Held | api.KeyValue:
    """The claim (see the module docstring); an opened conversation is left on ``backend``."""
    session = backend.session
    channel = newcomer_side(session.client, backend.root, 0, None)
    listening = session.spawn(channel.listen, 0)
    session.meanwhile(Preload(backend.channel_key))
    try:
        return _first_claim(backend, value_for, channel, listening)
    finally:
        session.meanwhile(None)


def _first_claim(
    backend: EtcdBackend,
    value_for: Callable[[int], bytes],
    channel: Channel,
    listening: Spawned,
) -> Held | api.KeyValue:
    session = backend.session
    try:
        keeper = session.lease_kept()
    except BaseException:
        listening.cancel()
        session.spawn(channel.close)
        raise
    try:
        listening.result(timeout=session.client.budget)
    except Exception:  # no watch (etcd is slow, or refused it): claim plainly
        listening.cancel()
        session.spawn(channel.close)
        return session.claim_reign(backend.key, value_for)
    channel.lease = keeper.lease
    turn = backend.turn()
    opening = Opening(
        backend.root,
        backend.key,
        (turn.key, turn.value),
        (channel.here_key(), backend.me.encode()),
        keeper.lease,
    )
    connected_ms = int(time.time() * 1000)
    try:
        result = session.claim_reign(backend.key, value_for, opening)
    except BaseException:
        session.spawn(_drop, channel, turn.key)
        raise
    if isinstance(result, Held):
        session.spawn(_drop, channel, turn.key)
        return result
    if opening.queued:
        turn.joined(opening.revision, opening.found)
    if not opening.spoke:
        session.spawn(_drop, channel)
        return result
    channel.announced(opening.revision)
    try:
        backend.converse_early(result, channel, connected_ms)
    except BaseException:
        session.spawn(_drop, channel)
        raise
    return result


async def _drop(channel: Channel, *also: bytes) -> None:
    """Close a conversation we will not hold: its watch, its keys, and ``also``."""
    await channel.close()
    with contextlib.suppress(Exception):  # they ride on our lease otherwise
        await channel.forget(*also)
