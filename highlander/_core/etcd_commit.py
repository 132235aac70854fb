"""The one commit point of a handover over etcd, as pure rules (no I/O, no clock).

As on one machine (:mod:`highlander._core.commit`), the incumbent commits:
when it accepts a timely ACK_SUCCESSION it runs the *move*, the one
transaction that puts the holder key on the newcomer's lease while it is
still the incumbent's reign (``_etcd/claim.commit``: compare the key's
mod revision with I's token and its lease with I's lease).  The newcomer's
lease is the one its conversation key rides on.  I stops acting as holder
*before* it sends the move (and says so), and ends the stream only once
etcd has said the move applied.  The move also puts I's ``moved`` mark,
which N's watch delivers at the move's revision: N holds at once, since I
stopped before the move could apply (:func:`newcomer_decides` with CLOSED
and OURS, no read).

Who owns what at each step::

    step                              holder key      acts as holder   state
    HELLO .. SAVING                   I's lease       I                I
    SAVED sent (handoff in it)        I's lease       I                I, and N's handoff copy
    N sends ACK_SUCCESSION            I's lease       I                I (+ N's copy)
    -- I accepts the ACK in time: stops acting, runs the move --------------------
    the move in flight, or its        I's or N's      nobody           N's copy (I's is
      answer lost (I re-reads)        lease                            frozen, never served)
    the move applied: N sees the      N's lease       N                N (handoff)
      mark (or a read finds OURS)
    I learns it, ends the stream      N's lease       N                N
    I runs on_deposed, exits          N's lease       N                N

``I`` is the incumbent, ``N`` the newcomer.  "Acts as holder": running,
believing it holds, and within its lease bound (:mod:`highlander._core.lease`).

**The incumbent** (:func:`incumbent_decides`, :func:`incumbent_tells`):
only a timely ACK commits; on its ACK deadline it keeps and tells N so with
REFUSED ``late``.  The move's outcome (:func:`incumbent_learns`):

* SUCCEEDED, or an answer (or re-read) showing the key on N's lease: the
  move applied (DEPOSED: end the stream, run ``on_deposed``);
* NO_LEASE (etcd refused the put: N's lease does not exist): nothing was
  applied and no attempt ever can be, as a lease never comes back, so I's
  reign is intact and N cannot hold on that lease (KEEP: I acts again);
* DENIED (etcd refused the transaction outright: its database is full, or
  the user may not write): this attempt was not applied.  If no earlier
  attempt's answer was lost, nothing was, and I keeps (KEEP) rather than
  retry against a refusal that lasts until an operator acts (a retry stops
  I acting until its lease bound, then steps it down: the state would then
  live only in N's handoff, and a full etcd lets N claim nothing).  After a
  lost attempt the refusal says nothing of that one: as LOST below;
* the answer LOST: a linearizable re-read says where the key is *now*, but a
  key still on I's lease does not prove the lost attempt will not apply
  later (it may still be on its way through raft).  So I does not keep on
  it: it runs the same move again (RETRY), whose own answer settles it (it
  applies now, or its compare fails because an earlier one did).  While
  etcd cannot tell, I neither acts as holder nor ends the stream; when its
  lease bound allows no more tries it steps down (STEP_DOWN: stops renewing
  and leaves its stream to its lease, whose end ends it);
* FAILED, or a read, showing the key absent or a third party's: I's reign
  ended by other means (fenced, expired): STEP_DOWN.

**The newcomer** decides from what it heard and a linearizable read of the
holder key (:func:`newcomer_decides`, the analogue of the kernel check):
REFUSED: ABORT.  End of stream, or the ACK could not be sent: the key on
N's lease: COMMIT; still I's reign: ABORT; absent (I's lease ended before
any move: I died, or stepped down, or was stopped past its bound): CLAIM
(put-if-absent, with the handoff: nobody else has the state, unless the
claim's count shows reigns since I's: the shell then begins fresh), and a
claim that finds another holder ABORTs (:func:`after_claim`); a third
party's reign: ABORT.  Silent until its exit deadline: FENCE, i.e. run the move
itself (guarded by I's reign, onto a lease of N's that cannot end before
I's lease bound), revoke I's lease, wait :func:`fence_wait`, then read and
decide with :func:`after_fence`.  A revoke alone is no fence: it ends I's
lease in etcd, not I's belief in it, and the key it deletes is free for a
third claimer beside a stopped I resumed within its bound (the model
check's negative control).

The incumbent's conversation keys ride on its lease, so N sees the end of
I's stream only when I ended it after a known commit or a keep (REFUSED
first), or when I's lease ended, which takes the key with it unless it was
moved: "end of stream and the key still I's" can only mean I kept.
"""

from __future__ import annotations

import enum

# The same answers, endings and decision as on one machine.
from highlander._core.commit import Answer, Decision, Ending


class Key(enum.Enum):
    """Where a linearizable read (or a failed move's answer) finds the holder key."""

    #: On the newcomer's lease: the move applied (or the newcomer's claim did).
    OURS = enum.auto()
    #: Still the incumbent's reign: its token (mod revision) and its lease.
    THEIRS_INTACT = enum.auto()
    #: No holder key: the incumbent's lease ended (expired or revoked) before any move.
    ABSENT = enum.auto()
    #: Any other reign: a third party claimed, or the key changed under another lease.
    OTHER = enum.auto()


class Reply(enum.Enum):
    """What the incumbent heard from etcd about its move transaction."""

    #: The compares held and the key is on the newcomer's lease now.
    SUCCEEDED = enum.auto()
    #: A compare failed: the answer carries the key as it is.
    FAILED = enum.auto()
    #: etcd refused the put: the newcomer's lease does not exist.  Nothing was applied.
    NO_LEASE = enum.auto()
    #: etcd refused the transaction outright (full, or not permitted): this attempt
    #: was not applied, and the refusal says nothing of where the key is.
    DENIED = enum.auto()
    #: No answer in time (or an error that does not say): the move may apply, now or later.
    LOST = enum.auto()


class Then(enum.Enum):
    """The incumbent's next step once it ran the move."""

    #: The move applied: end the stream, run ``on_deposed``, exit.
    DEPOSED = enum.auto()
    #: Run the same move again (it is idempotent): its answer settles what a read cannot.
    RETRY = enum.auto()
    #: Nothing applied and nothing can: act as holder again, tell N, serve on.
    KEEP = enum.auto()
    #: The reign cannot be proved (or ended by other means): stop acting, let the lease go.
    STEP_DOWN = enum.auto()


class Verdict(enum.Enum):
    """What the newcomer does next."""

    #: The key is on our lease: hold, with the handoff.
    COMMIT = enum.auto()
    #: Someone else holds (the incumbent kept, or a third party): change nothing.
    ABORT = enum.auto()
    #: Nobody holds: put the key on our lease if it is still absent, with the handoff.
    CLAIM = enum.auto()
    #: The incumbent is silent: revoke its lease, wait out its bound, read again.
    FENCE = enum.auto()


def classify(
    lease: int | None,
    token: int,
    *,
    newcomer_lease: int,
    incumbent_lease: int,
    incumbent_token: int,
) -> Key:
    """Classify the holder key read from etcd (``lease`` ``None``: there is none).

    ``token`` is the key's mod revision.  The incumbent's reign wrote the key
    once, so its lease *and* its token must both match for it to be intact.
    """
    if lease is None:
        return Key.ABSENT
    if lease == newcomer_lease:
        return Key.OURS
    if lease == incumbent_lease and token == incumbent_token:
        return Key.THEIRS_INTACT
    return Key.OTHER


def incumbent_decides(ending: Ending) -> Decision:
    """Only a timely ACK_SUCCESSION commits (runs the move); the incumbent keeps otherwise."""
    return Decision.COMMIT if ending is Ending.ACK_IN_TIME else Decision.KEEP


def incumbent_tells(ending: Ending) -> bool:
    """Whether a keeping incumbent sends REFUSED ``late``: only after its own deadline.

    The write is guarded by its reign, so a keep never lands after a fence.
    """
    return ending is Ending.DEADLINE


#: Where the key is after a failed or lost move, and what that means for the incumbent.
_SETTLED = {
    Key.OURS: Then.DEPOSED,  # an earlier attempt applied
    Key.THEIRS_INTACT: Then.RETRY,  # not applied *yet*: only another attempt's answer tells
    Key.ABSENT: Then.STEP_DOWN,  # our lease ended: fenced or expired, the reign is over
    Key.OTHER: Then.STEP_DOWN,
}


def incumbent_learns(
    reply: Reply, key: Key | None = None, *, can_retry: bool = True, unsure: bool = False
) -> Then:
    """The incumbent's next step from its move's ``reply`` and the key as it is.

    ``key``: for FAILED the key the answer carries, for LOST and DENIED what
    a re-read found (ignored otherwise).  ``can_retry``: the lease bound
    still allows another attempt; without it a holder that cannot prove its
    claim steps down.  ``unsure``: an earlier attempt's answer was lost (it
    may still apply).
    """
    if reply is Reply.SUCCEEDED:
        return Then.DEPOSED
    if reply is Reply.NO_LEASE or (reply is Reply.DENIED and not unsure):
        return Then.KEEP
    assert key is not None, "a failed, lost or denied move is settled by where the key is"
    then = _SETTLED[key]
    if then is Then.RETRY and not can_retry:
        return Then.STEP_DOWN
    return then


#: The newcomer's verdict from a read of the key (after an end of stream, a fence, a claim).
_BY_KEY = {
    Key.OURS: Verdict.COMMIT,
    Key.THEIRS_INTACT: Verdict.ABORT,  # the incumbent kept: it ended the stream alive
    Key.ABSENT: Verdict.CLAIM,  # its lease ended before any move: the handoff is the state
    Key.OTHER: Verdict.ABORT,
}


def newcomer_decides(answer: Answer, key: Key | None = None) -> Verdict:
    """The newcomer's verdict from what it heard and (after an end of stream) the key.

    ``key``: a linearizable read made after hearing ``answer`` (needed only
    for CLOSED and SEND_FAILED).
    """
    if answer is Answer.REFUSED:
        return Verdict.ABORT
    if answer is Answer.SILENT:
        return Verdict.FENCE
    assert key is not None, "an end of stream is read together with the key"
    return _BY_KEY[key]


def after_fence(key: Key) -> Verdict:
    """The newcomer's verdict from a read after its fence (move, revoke, wait).

    The key on our lease: I committed before the fence.  Absent: CLAIM.  Still
    I's reign: the revoke did not land; a third party's: it claimed first (ABORT).
    """
    return _BY_KEY[key]


def after_claim(key: Key) -> Verdict:
    """A put-if-absent's outcome: the key on our lease is ours; anyone else's, ABORT."""
    return Verdict.COMMIT if key is Key.OURS else Verdict.ABORT


def fence_wait(ttl: float) -> float:
    """How long the newcomer waits after its revoke was answered before it acts.

    A fenced incumbent believes in its lease until its last *answered*
    keepalive's send plus ``ttl`` (less a margin).  Every answered keepalive
    was sent before the revoke applied, so before its answer reached us: one
    ``ttl`` from then covers the longest belief.
    """
    return ttl
