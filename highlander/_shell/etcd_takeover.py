"""The newcomer's side of the commit over etcd: from a verified SAVED to holding, or not.

The rules are :mod:`highlander._core.etcd_commit`'s (pure); this module
carries them out:

1. send ACK_SUCCESSION and hear how the incumbent answered: REFUSED, the
   end of its stream, or nothing within the exit deadline
   (:func:`~highlander._shell.handover.hear`, the same as on one machine);
2. the incumbent's ``moved`` key, written by its move and seen by our
   watch, ends its stream for us: the key is on our lease (COMMIT), no
   request, no wait for the incumbent to hear etcd's answer; it stopped
   acting, and said ``relinquished``, before it sent the move.  After an end
   of stream without one, a linearizable read: on our lease, the move
   applied (COMMIT); still the incumbent's reign, it kept (ABORT); absent,
   its lease ended before any move (CLAIM, with the handoff: nobody else has
   the state);
3. silent past the deadline, the key already on our lease: its move applied
   but our watch did not show it; hold at once, for the same reason;
4. silent past the deadline otherwise: :func:`fence` it, i.e. move the key off its
   reign onto a lease of ours that outlives its lease bound, revoke its
   lease, wait one of its TTLs, read again.  Never a signal: the incumbent
   may run on another host.
"""

from __future__ import annotations

import contextlib
import time

from highlander._core import etcd_commit as rules
from highlander._core.commit import Answer
from highlander._core.errors import EtcdError
from highlander._core.etcd_commit import Key, Verdict
from highlander._core.messages import AckSuccession, Saved
from highlander._core.settling import settles_ms
from highlander._etcd import api
from highlander._etcd.claim import Held, commit, holder
from highlander._etcd.handover import fence_out
from highlander._etcd.keeper import Keeper, grant
from highlander._etcd.session import HolderValue
from highlander._host.claim import Reign
from highlander._host.event_log import Event, Outcome
from highlander._host.waiting import Waiter
from highlander._shell.client import Greeting
from highlander._shell.etcd_backend import EtcdBackend
from highlander._shell.etcd_opened import Opened
from highlander._shell.handover import hear
from highlander._shell.wire import send_message

# typing.TYPE_CHECKING without importing typing (3 ms on the newcomer's path).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: The ways a conversation breaks when the incumbent's end is gone or not reading.
_BROKEN = (BrokenPipeError, ConnectionResetError, TimeoutError)


async def conclude(
    backend: EtcdBackend, greeting: Greeting, saved: Saved, opened: Opened
) -> Reign | None:
    """Hold after ``saved`` (the incumbent's move applied, or its lease ended), or ``None``."""
    settings = backend.settings
    answer = Answer.SILENT
    acked = greeting.waiter.now()
    try:
        await send_message(greeting.sock, greeting.conn, AckSuccession(), greeting.waiter)
    except _BROKEN:
        answer = Answer.SEND_FAILED
    answer = await hear(settings, greeting, answer)
    if answer is Answer.SILENT:
        settings.events.emit(Event.HUNG, peer_pid=greeting.peer.pid, phase="exit")
        committed = _committed(backend, opened)
        if committed is None:
            return await fence(backend, opened, greeting.waiter, saved.handoff, saved=True)
        # It moved the key to us (the commit), and stopped acting before it did.
        return _hold(backend, committed, saved.handoff)
    if answer is Answer.REFUSED:
        return None
    # The mark shows the key as the move left it.  Nobody may fence the reign
    # it began before `exit_grace` (and more) has passed since our ACK; later
    # (this process was stopped, say), only a read says where the key is.
    fresh = greeting.waiter.now() - acked < settings.timeouts.exit_grace
    held = _moved(backend, opened) if fresh else None
    if held is not None:
        key = Key.OURS
    else:
        key, kv = _read(backend, opened, _kept(backend, opened))
        held = None if kv is None else Held(kv.mod_revision, kv.lease, kv.value)
    verdict = rules.newcomer_decides(answer, key)
    if verdict is Verdict.COMMIT:
        assert held is not None
        # The end we heard may be our side's (a watch that failed), not its lease's.
        return _hold(backend, held, saved.handoff)
    if verdict is Verdict.CLAIM:
        return _claim(backend, saved.handoff, opened.holder, opened.holder.generation)
    settings.events.emit(Event.HANDOVER_ABORTED, peer_pid=greeting.peer.pid, reason=key.name)
    return None


def _kept(backend: EtcdBackend, opened: Opened) -> int:
    """The lease our conversation rides on, while this session still keeps it (else -1).

    The incumbent's move puts the key on that lease; a lease this session gave
    up meanwhile (past its bound: replaced) will end, and the key with it.
    """
    keeper = backend.session.keeper
    lease = opened.channel.lease
    return lease if keeper is not None and keeper.lease == lease and keeper.holds() else -1


def _moved(backend: EtcdBackend, opened: Opened) -> Held | None:
    """The key as the incumbent's ``moved`` shows it, if its watch delivered one (no read).

    The move put it in the same transaction as the holder key (so at the
    same mod revision: the reign's token), and the holder key on the lease
    our conversation rides on: OURS is what a read after it finds, while
    this session keeps that lease and the new reign has not begun: nobody
    fences a reign before its ``settles_ms`` (``exit_grace`` + ``hello`` +
    a TTL from when it is first seen), and the lease is ours to lose.
    """
    moved, lease = opened.channel.moved, _kept(backend, opened)
    if moved is None or lease != opened.channel.lease:
        return None
    return Held(moved.mod_revision, lease, moved.value)


def _committed(backend: EtcdBackend, opened: Opened) -> Held | None:
    """The key as we would hold it, if the incumbent's move put it on our kept lease."""
    try:
        key, kv = _read(backend, opened, _kept(backend, opened))
    except EtcdError:
        return None  # unsettled: the fence's own reads decide
    if key is not Key.OURS or kv is None:
        return None
    return Held(kv.mod_revision, kv.lease, kv.value)


def moved_to_us(backend: EtcdBackend, held: Held, since_ms: int, saver: int) -> bool:
    """Whether the key a claim found on our lease is the move of reign ``saver``.

    It saved for us, and its move landed after we gave up on its stream (a
    conversation that ended unsettled), so its handoff is the state.  Not a
    put of our own: that could follow a silent keep, whose state moved on.
    """
    value = HolderValue.decode(held.value)
    if value is None:
        return False
    ours = held.value == backend.ours.value(value.generation, since_ms).encode()
    return not ours and value.generation == saver + 1


def _read(backend: EtcdBackend, opened: Opened, lease: int) -> tuple[Key, api.KeyValue | None]:
    """Where the holder key is now (linearizable), as the rules name it, and the key."""
    session, incumbent = backend.session, opened.incumbent
    kv: api.KeyValue | None = session.call(holder, session.client, backend.key)
    key = rules.classify(
        None if kv is None else kv.lease,
        0 if kv is None else kv.mod_revision,
        newcomer_lease=lease,
        incumbent_lease=incumbent.lease,
        incumbent_token=incumbent.token,
    )
    return key, kv


def _hold(
    backend: EtcdBackend, held: Held, handoff: dict[str, Any] | None, *, fenced: bool = False
) -> Reign:
    backend.session.held = held
    # After SAVED a succession, whatever the save returned; a fenced holder gave nothing.
    outcome = Outcome.CLAIMED_STALE if fenced else Outcome.SUCCEEDED
    return backend.reign(held, outcome, handoff)


#: ``handover_aborted``'s reason when the handoff a claim would carry is older than a reign.
STALE = "reigns began after the one that saved the handoff: it is not the state any more"


def _claim(
    backend: EtcdBackend,
    handoff: dict[str, Any] | None,
    saver: HolderValue,
    after: int,
    *,
    fenced: bool = False,
) -> Reign | None:
    """Claim the key if it is still absent, with the handoff ``saver`` saved.

    Fresh if reigns began after ``after`` (``saver``'s, or ours, lost before
    it acted): a newcomer stopped after SAVED may resume 97 reigns later.
    """
    since = int(time.time() * 1000)
    result = backend.session.claim_reign(backend.key, backend.ours.value_for(since))
    if not isinstance(result, Held):
        return None  # a third claimer was first: it holds, without the handoff
    claimed = HolderValue.decode(result.value)
    if handoff is not None and (claimed is None or claimed.generation != after + 1):
        backend.settings.events.emit(Event.HANDOVER_ABORTED, peer_pid=saver.pid, reason=STALE)
        return _hold(backend, result, None, fenced=True)
    return _hold(backend, result, handoff, fenced=fenced)


async def fence(
    backend: EtcdBackend,
    opened: Opened,
    waiter: Waiter,
    handoff: dict[str, Any] | None,
    *,
    saved: bool = False,
    ceiling: bool = False,
) -> Reign | None:
    """Fence the reign ``opened`` spoke to out; the reign we then hold, or ``None``.

    ``saved``: after its SAVED (``handoff`` is its state): a succession still.
    ``ceiling``: its save outran the ceiling: the fence lands even if its
    stream moved on (more PROGRESS); only the end of its stream spares it.
    """
    stale = not saved
    session, settings = backend.session, backend.settings
    incumbent = opened.holder
    ttl = max(session.ttl, incumbent.ttl)
    # The key's new lease must outlive the incumbent's bound while we wait it out.
    lease, clock = session.call(grant, session.client, 2 * ttl)
    keeper = Keeper(session.client, lease, clock)
    now = int(time.time() * 1000)
    generation = incumbent.generation + 1
    history = tuple(settings.thrash.recent([*incumbent.successions_ms], now))
    # Its reign begins once the wait is over: a newcomer that meets the key
    # meanwhile waits for it (``EtcdBackend.silent``) instead of fencing the fencer.
    begins = now + int(rules.fence_wait(ttl) * 1000)
    settles = settles_ms(rules.fence_wait(ttl), settings.timeouts.hello, session.ttl)
    mine = backend.ours.value(generation, begins, history)
    value = mine._replace(settles_ms=settles).encode()
    also = ((backend.counter, str(generation).encode()),)
    fenced_at = incumbent.generation  # the last reign counted: ours, once the fence moved
    try:
        found = session.call(
            fence_out, session.client, backend.key, value, opened.incumbent, lease,
            opened.channel.unread(chunks=not ceiling), also,
        )  # fmt: skip
        if found is Key.OURS:
            fenced_at = generation
            settings.events.emit(Event.FENCED, peer_pid=incumbent.pid, generation=generation)
            await waiter.sleep(rules.fence_wait(ttl))
            found, kv = _read(backend, opened, lease)
    except EtcdError:
        found, kv = Key.THEIRS_INTACT, None  # unsettled: the next attempt looks again
    else:
        if found is not Key.OURS:
            kv = None
    if found is Key.OTHER or (saved and found is Key.THEIRS_INTACT):
        # "Someone else's" to the fence's lease; but the incumbent's own move puts
        # the key on our conversation's lease: it committed just now.  Then the
        # handoff is the state, and the key is ours.  After SAVED, a fence etcd
        # did not settle (a member slow to answer) may hide that move as well:
        # look now, not at the next attempt (a third newcomer may fence us).
        committed = _committed(backend, opened)
        if committed is not None:
            with contextlib.suppress(EtcdError):
                session.call(keeper.revoke)
            return _hold(backend, committed, handoff)
    verdict = rules.after_fence(found)
    if verdict is Verdict.COMMIT and kv is not None:
        held = Held(kv.mod_revision, lease, kv.value)
        return _settle(backend, held, keeper, handoff, stale=stale)
    with contextlib.suppress(EtcdError):  # unused: it ends by its TTL otherwise
        session.call(keeper.revoke)
    if verdict is Verdict.CLAIM:
        return _claim(backend, handoff, incumbent, fenced_at, fenced=stale)
    return None


def _settle(
    backend: EtcdBackend,
    fenced: Held,
    keeper: Keeper,
    handoff: dict[str, Any] | None,
    *,
    stale: bool,
) -> Reign:
    """Hold what the fence won, on our own lease again if etcd lets us move it there.

    The fence's long lease was needed only while the fenced holder's belief
    could last; on it, this reign's own death would take two TTLs to notice.
    The move is the reign's token-giving write (nobody knows the token yet).
    """
    session = backend.session
    named = HolderValue.decode(fenced.value)
    assert named is not None  # ours
    value = named._replace(since_ms=int(time.time() * 1000)).encode()
    try:
        moved = session.call(
            commit, session.client, backend.key, value, fenced, session.lease_kept().lease
        )
    except EtcdError:
        moved = None
    if isinstance(moved, Held):
        with contextlib.suppress(EtcdError):
            session.call(keeper.revoke)
        return _hold(backend, moved, handoff, fenced=stale)
    session.adopt(fenced, keeper)  # it stays on the long lease: kept alive from now on
    return _hold(backend, fenced, handoff, fenced=stale)
