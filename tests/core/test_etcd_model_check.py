"""Model-check the handover over etcd: every interleaving of I, N, etcd and a claimer C.

An explicit-state search (breadth first, with a visited set) over one
incumbent ``I``, one newcomer ``N``, one etcd holder key, I's and N's leases
and a third process ``C`` that claims (put-if-absent on its own lease, at
most once) whenever the key is absent.  The decisions are the real rules of
:mod:`highlander._core.etcd_commit`; messages are abstract (their order and
the end of each stream is what matters; the sans-IO Connection is checked by
tests/core/test_model_check.py).  Nothing is sampled.

The model, per step one enabled action:

* ``I`` sends HELLO, reads SAVE, sends 0..:data:`MAX_PROGRESS` PROGRESS and
  SAVED (the handoff), then in AWAIT_ACK reads the ACK (runs the move), or
  N's end of stream, or its ACK deadline passes (at any moment, also with the
  ACK queued): it keeps, owes REFUSED ``late``, ends the stream.  The move is
  processed by etcd at any moment (the compares evaluated then), refused
  outright (DENIED: a full etcd; nothing applied) or never; its
  answer reaches I, or I's request times out (the attempt may still apply
  later: an *orphan*).  I then re-reads the key and retries, up to
  :data:`MAX_ATTEMPTS`, or its lease bound passes; it ends the stream only
  after a known commit.  I stops acting when it runs the move; a move of
  I's that applies (an orphan too) puts ``MOVED`` in I's stream.
* ``N`` reads HELLO, sends SAVE, reads PROGRESS* and SAVED, sends ACK (it
  fails when I's end is closed), hears REFUSED, MOVED (it holds at once, no
  read), the end of stream or nothing (its deadline), reads the key and
  decides; FENCE runs the move itself
  (guarded by I's reign and I's quiet stream, onto a lease that outlives
  I's bound), revokes I's lease, waits out I's bound, reads and decides;
  CLAIM is a put-if-absent of its own.  A keep's REFUSED is guarded by I's
  reign, so it fails after a fence and I learns it lost.
* etcd: a lease not kept ends at any moment, taking the holder key (if on it)
  and its owner's conversation keys (the end of that stream; frames already
  written stay readable) with it.  A running process keeps its lease; a dead
  one does not; a *stopped* one's keeper lets go at its lease bound before
  the lease can end, so "its bound passes" is an action of a stopped process
  (it no longer acts; resumed, it finds it lost the project).
* Faults at every step while the conversation is going: crash, and one
  stop/resume per side.

Timing: a side's deadline passes only while the peer does not answer
(stopped, dead with its lease alive, or waiting on etcd), except I's ACK
deadline, which nothing bounds.  Invariants, in every state: (a) never two
processes acting as holder (running, believing, within the lease bound);
(b) N holds a handoff only if I never served again after SAVED.  In
terminal states: (c) nobody waits, exactly one process acts and the key is
on its lease; (d) the holder has the state (I's own, or N's handoff) unless
:func:`loss_reason` names a documented case.  The counts are in
docs/etcd.md; ``pytest -s`` prints them.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from highlander._core import etcd_commit as rules
from highlander._core.commit import Answer, Decision, Ending
from highlander._core.etcd_commit import Key, Reply, Then, Verdict
from tests.support.model_checking import Report, count_traces, describe, trace_back

MAX_PROGRESS: Final = 1
MAX_ATTEMPTS: Final = 2


class _Enum(enum.Enum):
    """An enum hashed by identity: members are singletons, and states hash their fields often."""

    __hash__ = object.__hash__


class Proc(_Enum):
    """The process behind a side."""

    ALIVE = enum.auto()
    CRASHED = enum.auto()
    EXITED = enum.auto()


class Owner(_Enum):
    """Whose lease the holder key is on (NONE: there is no key)."""

    NONE = enum.auto()
    I = enum.auto()  # noqa: E741 - the incumbent, as everywhere in the docs
    N = enum.auto()
    C = enum.auto()


class IPc(_Enum):
    """Where the incumbent is."""

    HELLO = enum.auto()
    AWAIT_REQUEST = enum.auto()
    SAVING = enum.auto()
    AWAIT_ACK = enum.auto()
    KEEPING = enum.auto()  # decided to keep: may owe REFUSED, then ends the stream
    MOVING = enum.auto()  # ran the move, waits for its answer
    UNSURE = enum.auto()  # the answer was lost: re-reads the key next
    DEPOSING = enum.auto()  # the move is known applied: ends the stream next
    LEAVING = enum.auto()  # stream ended: on_deposed, then exit
    SERVING = enum.auto()  # final: kept the project
    STEPPED_DOWN = enum.auto()  # final: could not prove its reign, let its lease go
    LEFT = enum.auto()  # final: deposed and gone
    LOST = enum.auto()  # final: found its lease bound passed (stopped too long, fenced)


class NPc(_Enum):
    """Where the newcomer is."""

    AWAIT_HELLO = enum.auto()
    READY = enum.auto()
    AWAIT_SAVED = enum.auto()
    MUST_ACK = enum.auto()
    HEARING = enum.auto()
    DECIDING = enum.auto()  # reads the key, decides
    FENCED = enum.auto()  # revoked I's lease: waits out I's bound
    AFTER_FENCE = enum.auto()  # reads the key, decides
    CLAIMING = enum.auto()  # put-if-absent
    HOLDING = enum.auto()  # final
    ABORTED = enum.auto()  # final
    LOST = enum.auto()  # final: found its own lease bound passed


class Hold(_Enum):
    """What the newcomer holds."""

    NONE = enum.auto()
    HANDOFF = enum.auto()
    STALE = enum.auto()  # claimed with no handoff (before SAVED)


class Step(_Enum):
    """How far the conversation got: the coordinate of a fault."""

    BEFORE_HELLO = "before HELLO"
    AFTER_HELLO = "after HELLO"
    SAVING = "during SAVING"
    AFTER_SAVED = "after SAVED sent"
    AFTER_ACK_SENT = "after ACK sent"
    MOVE_SENT = "after the move was sent"
    AFTER_COMMIT = "after the move is known applied"


I_FINAL: Final = frozenset({IPc.SERVING, IPc.STEPPED_DOWN, IPc.LEFT, IPc.LOST})
N_FINAL: Final = frozenset({NPc.HOLDING, NPc.ABORTED, NPc.LOST})
#: I is running but does not answer N: it waits on etcd, or gave up without a word.
I_SILENT: Final = frozenset({IPc.MOVING, IPc.UNSURE, IPc.STEPPED_DOWN, IPc.LOST})
N_SILENT: Final = frozenset({NPc.DECIDING, NPc.FENCED, NPc.AFTER_FENCE, NPc.CLAIMING, NPc.LOST})
#: Where a process that finds its lease bound passed is past caring (it holds nothing).
I_UNBOUND: Final = frozenset({IPc.DEPOSING, IPc.LEAVING, IPc.LEFT, IPc.STEPPED_DOWN, IPc.LOST})


class Facts(NamedTuple):
    """One model state (a tuple: hashed and compared in C, the search does it often)."""

    i_proc: Proc = Proc.ALIVE
    i_pc: IPc = IPc.HELLO
    i_stopped: bool = False
    i_stop_used: bool = False
    i_believes: bool = True
    i_bound_passed: bool = False
    i_keeps: bool = True  # renews its lease
    i_lease: bool = True
    i_progress: int = 0
    i_tell: bool = False
    i_diverged: bool = False  # served again after SAVED: the handoff is stale
    i_attempts: int = 0
    i_waiting: bool = False  # the attempt I waits on is not processed yet
    i_reply: tuple[Reply, Key] | None = None
    orphans: int = 0  # attempts I gave up on, still in flight
    i_closed: bool = False  # I's stream ended (fin, or its lease ended)
    to_new: tuple[str, ...] = ()
    n_proc: Proc = Proc.ALIVE
    n_pc: NPc = NPc.AWAIT_HELLO
    n_stopped: bool = False
    n_stop_used: bool = False
    n_bound_passed: bool = False
    n_keeps: bool = True
    n_lease: bool = True
    n_handoff: bool = False
    n_answer: Answer = Answer.SILENT
    n_holds: Hold = Hold.NONE
    n_seen: Key | None = None  # what N's last read found
    n_fenced: bool = False
    n_closed: bool = False
    to_inc: tuple[str, ...] = ()
    key: Owner = Owner.I
    moved: bool = False  # a move applied
    c_claimed: bool = False
    saved_sent: bool = False
    step: Step = Step.BEFORE_HELLO


@dataclass(frozen=True, slots=True)
class Model:
    """The rules under test (the real ones unless a control breaks one) and two knobs."""

    incumbent_decides: Callable[[Ending], Decision] = rules.incumbent_decides
    incumbent_tells: Callable[[Ending], bool] = rules.incumbent_tells
    incumbent_learns: Callable[..., Then] = rules.incumbent_learns
    newcomer_decides: Callable[[Answer, Key | None], Verdict] = rules.newcomer_decides
    after_fence: Callable[[Key], Verdict] = rules.after_fence
    after_claim: Callable[[Key], Verdict] = rules.after_claim
    #: After its revoke N waits out I's bound (:func:`rules.fence_wait`).
    fence_waits: bool = True
    #: N's fence moves the key to its lease before it revokes I's (off: revoke alone).
    fence_moves: bool = True
    #: The fence moves the key onto a lease that cannot end before I's bound.
    fence_lease_outlives: bool = True
    #: A broken incumbent that ends the stream as committed when its answer is lost.
    closes_unsure: bool = False
    #: I stops acting when it runs the move (off: only once it knows the move applied).
    stops_at_move: bool = True


Move = tuple[str, Facts]


def replace(f: Facts, **changes: Any) -> Facts:
    """``f`` with ``changes``."""
    return f._replace(**changes)


def classify(f: Facts) -> Key:
    """The key as a linearizable read finds it (from the handover's side: OURS = N's)."""
    return {
        Owner.NONE: Key.ABSENT,
        Owner.N: Key.OURS,
        Owner.I: Key.THEIRS_INTACT,  # I's reign writes the key once: its lease, its token
        Owner.C: Key.OTHER,
    }[f.key]


def _later(f: Facts, step: Step) -> Step:
    order = list(Step)
    return step if order.index(step) > order.index(f.step) else f.step


# -- the incumbent ----------------------------------------------------------------------


def _i_answers(f: Facts) -> bool:
    return f.i_proc is Proc.ALIVE and not f.i_stopped and f.i_pc not in I_SILENT


def _n_answers(f: Facts) -> bool:
    return f.n_proc is Proc.ALIVE and not f.n_stopped and f.n_pc not in N_SILENT


def _i_serves_on(f: Facts, **changes: Any) -> Facts:
    return replace(f, i_pc=IPc.SERVING, i_closed=True, **changes)


def _i_send(f: Facts, message: str, **changes: Any) -> Facts:
    queued = f.to_new if f.n_closed else (*f.to_new, message)
    return replace(f, to_new=queued, **changes)


def _i_steps(f: Facts, model: Model) -> Iterator[Move]:
    if f.i_bound_passed and f.i_pc not in I_UNBOUND:
        yield "I finds its lease bound passed: it lost the project", _i_lost(f)
    elif not f.i_lease and f.i_pc not in I_UNBOUND:
        # Its next keepalive, or its next write (conversation keys ride on the lease).
        yield "I finds its lease gone: it lost the project", _i_lost(f)
    else:
        yield from _I_STEPS.get(f.i_pc, _nothing)(f, model)


def _nothing(f: Facts, model: Model) -> Iterator[Move]:
    return iter(())


def _i_hello(f: Facts, model: Model) -> Iterator[Move]:
    if f.n_closed:
        yield "I sends HELLO: EPIPE, serves on", _i_serves_on(f)
    else:
        hello = _i_send(f, "HELLO", i_pc=IPc.AWAIT_REQUEST, step=Step.AFTER_HELLO)
        yield "I sends HELLO", hello


def _i_await_request(f: Facts, model: Model) -> Iterator[Move]:
    if f.to_inc:
        yield "I reads SAVE", replace(f, to_inc=f.to_inc[1:], i_pc=IPc.SAVING, step=Step.SAVING)
    elif f.n_closed:
        yield "I reads EOF, serves on", _i_serves_on(f)
    elif not _n_answers(f):
        yield "I's request deadline passes, serves on", _i_serves_on(f)


def _i_saving(f: Facts, model: Model) -> Iterator[Move]:
    if f.i_progress < MAX_PROGRESS:
        yield "I sends PROGRESS", _i_send(f, "PROGRESS", i_progress=f.i_progress + 1)
    saved = _i_send(f, "SAVED", i_pc=IPc.AWAIT_ACK, saved_sent=True, step=Step.AFTER_SAVED)
    yield "I sends SAVED (the handoff)", saved


def _i_await_ack(f: Facts, model: Model) -> Iterator[Move]:
    if f.to_inc:
        read = replace(f, to_inc=f.to_inc[1:])
        yield "I reads ACK", _i_decides(read, model, Ending.ACK_IN_TIME)
    elif f.n_closed:
        yield "I reads EOF", _i_decides(f, model, Ending.PEER_CLOSED)
    # The deadline may pass with the ACK queued unread: nothing bounds N's answer.
    late = " (the ACK queued unread)" if f.to_inc else ""
    yield f"I's ACK deadline passes{late}", _i_decides(f, model, Ending.DEADLINE)


def _i_keeping(f: Facts, model: Model) -> Iterator[Move]:
    # A keep's writes are guarded by I's reign (the key's token): a fence that moved
    # the key first makes them fail, and I learns it lost before it serves on.
    if f.key is not Owner.I:
        yield "I's guarded write fails: it lost the project", _i_lost(f)
    elif f.i_tell and not f.n_closed:
        yield "I sends REFUSED late", _i_send(f, "REFUSED", i_tell=False, i_diverged=True)
    else:
        yield "I ends the stream, serves on", _i_serves_on(f, i_tell=False, i_diverged=True)


def _i_unsure(f: Facts, model: Model) -> Iterator[Move]:
    key = classify(f)
    then = model.incumbent_learns(Reply.LOST, key, can_retry=f.i_attempts < MAX_ATTEMPTS)
    yield f"I re-reads the key ({key.name}): {then.name}", _i_then(f, then)
    yield "I's lease bound passes (etcd silent): I steps down", _i_then(f, Then.STEP_DOWN)


def _i_deposing(f: Facts, model: Model) -> Iterator[Move]:
    ended = replace(f, i_closed=True, i_pc=IPc.LEAVING)
    yield "I ends the stream (the move is known applied)", ended


def _i_leaving(f: Facts, model: Model) -> Iterator[Move]:
    left = replace(f, i_proc=Proc.EXITED, i_pc=IPc.LEFT, i_keeps=False)
    yield "I runs on_deposed and exits", left


def _i_lost(f: Facts) -> Facts:
    return replace(f, i_pc=IPc.LOST, i_believes=False, i_keeps=False)


def _i_decides(f: Facts, model: Model, ending: Ending) -> Facts:
    if model.incumbent_decides(ending) is Decision.COMMIT:
        # From here I does not act as holder: the move may apply at any moment.
        believes = f.i_believes and not model.stops_at_move
        moving = replace(f, i_pc=IPc.MOVING, i_believes=believes, i_attempts=1, i_waiting=True)
        return replace(moving, step=_later(f, Step.MOVE_SENT))
    return replace(f, i_pc=IPc.KEEPING, i_tell=model.incumbent_tells(ending))


def _i_moving(f: Facts, model: Model) -> Iterator[Move]:
    if f.i_waiting:
        applied, reply = _apply(f, mark=True)
        processed = replace(applied, i_waiting=False, i_reply=reply)
        yield f"etcd processes I's move: {reply[0].name}", processed
        # A full etcd (or a user that may not write) refuses before any compare:
        # nothing applied, and I re-reads the key to know more.
        denied = replace(f, i_waiting=False, i_reply=(Reply.DENIED, classify(f)))
        yield "etcd refuses I's move outright (full): DENIED", denied
    if f.i_reply is not None:
        reply, key = f.i_reply
        # I retries only after a lost answer (LOST, or DENIED after one): a later
        # attempt is one that an earlier, lost one may still overtake.
        then = model.incumbent_learns(
            reply, key, can_retry=f.i_attempts < MAX_ATTEMPTS, unsure=f.i_attempts > 1
        )
        yield f"I gets the answer {reply.name} ({key.name}): {then.name}", _i_then(f, then)
    lost = replace(f, i_waiting=False, i_reply=None, orphans=f.orphans + f.i_waiting)
    if model.closes_unsure:
        yield "I's move times out: I takes it as applied", _i_then(lost, Then.DEPOSED)
    else:
        yield "I's move times out (the answer is lost)", replace(lost, i_pc=IPc.UNSURE)


_I_STEPS: Final[dict[IPc, Callable[[Facts, Model], Iterator[Move]]]] = {
    IPc.HELLO: _i_hello,
    IPc.AWAIT_REQUEST: _i_await_request,
    IPc.SAVING: _i_saving,
    IPc.AWAIT_ACK: _i_await_ack,
    IPc.KEEPING: _i_keeping,
    IPc.MOVING: _i_moving,
    IPc.UNSURE: _i_unsure,
    IPc.DEPOSING: _i_deposing,
    IPc.LEAVING: _i_leaving,
}


def _i_then(f: Facts, then: Then) -> Facts:
    if then is Then.DEPOSED:
        deposed = replace(f, i_pc=IPc.DEPOSING, i_believes=False, i_reply=None)
        return replace(deposed, step=Step.AFTER_COMMIT)
    if then is Then.RETRY:
        # Past MAX_ATTEMPTS the model's lease bound has passed: see violation().
        return replace(f, i_pc=IPc.MOVING, i_attempts=f.i_attempts + 1, i_waiting=True)
    if then is Then.KEEP:
        return replace(f, i_pc=IPc.KEEPING, i_believes=True, i_reply=None)
    # Stepping down leaves the stream to the lease: its end then says the key is gone too.
    return replace(f, i_pc=IPc.STEPPED_DOWN, i_believes=False, i_keeps=False, i_reply=None)


def _apply(f: Facts, *, mark: bool = False) -> tuple[Facts, tuple[Reply, Key]]:
    """etcd runs one attempt of the move now: compare I's token and lease, put on N's.

    ``mark``: I's move, which also puts ``moved`` in I's stream (N's fence does not).
    """
    if f.key is not Owner.I:
        return f, (Reply.FAILED, classify(f))
    if not f.n_lease:
        return f, (Reply.NO_LEASE, Key.THEIRS_INTACT)
    applied = replace(f, key=Owner.N, moved=True)
    if mark and not f.n_closed:
        applied = replace(applied, to_new=(*f.to_new, "MOVED"))
    return applied, (Reply.SUCCEEDED, Key.OURS)


# -- the newcomer -----------------------------------------------------------------------


def _n_steps(f: Facts, model: Model) -> Iterator[Move]:
    if f.n_bound_passed and f.n_pc not in {NPc.ABORTED, NPc.LOST}:
        lost = replace(f, n_pc=NPc.LOST, n_holds=Hold.NONE, n_keeps=False)
        yield "N finds its lease bound passed: it lost", lost
    else:
        yield from _N_STEPS.get(f.n_pc, _nothing)(f, model)


def _quiet(f: Facts) -> bool:
    """Nothing for N to read and I does not answer: N's deadline may pass."""
    return not f.to_new and not f.i_closed and not _i_answers(f)


def _n_awaiting(f: Facts, model: Model) -> Iterator[Move]:
    if f.to_new:
        frame, rest = f.to_new[0], replace(f, to_new=f.to_new[1:])
        if frame == "HELLO":
            yield "N reads HELLO", replace(rest, n_pc=NPc.READY)
        elif frame == "PROGRESS":
            yield "N reads PROGRESS", rest
        else:
            assert frame == "SAVED", frame
            yield "N reads SAVED", replace(rest, n_pc=NPc.MUST_ACK, n_handoff=True)
    elif f.i_closed:
        yield "N reads EOF", replace(f, n_pc=NPc.DECIDING, n_answer=Answer.CLOSED)
    if _quiet(f):
        yield "N's deadline passes: N fences I", _fence(f, model)


def _n_ready(f: Facts, model: Model) -> Iterator[Move]:
    if f.i_closed:
        yield "N sends SAVE: EPIPE", replace(f, n_pc=NPc.DECIDING, n_answer=Answer.SEND_FAILED)
    else:
        yield "N sends SAVE", replace(f, to_inc=(*f.to_inc, "SAVE"), n_pc=NPc.AWAIT_SAVED)


def _n_must_ack(f: Facts, model: Model) -> Iterator[Move]:
    if f.i_closed:
        yield "N sends ACK: EPIPE", replace(f, n_pc=NPc.HEARING, n_answer=Answer.SEND_FAILED)
    else:
        acked = replace(f, to_inc=(*f.to_inc, "ACK"), n_pc=NPc.HEARING)
        yield "N sends ACK", replace(acked, step=_later(f, Step.AFTER_ACK_SENT))


def _n_hearing(f: Facts, model: Model) -> Iterator[Move]:
    if f.to_new and f.to_new[0] == "MOVED":
        # The move's mark ends I's stream: the key is on N's lease, no read.
        verdict = model.newcomer_decides(Answer.CLOSED, Key.OURS)
        read = replace(f, to_new=f.to_new[1:], n_answer=Answer.CLOSED)
        yield f"N reads MOVED: {verdict.name}", _n_verdict(read, verdict, Key.OURS, model)
    elif f.to_new:
        assert f.to_new[0] == "REFUSED", f.to_new
        heard = replace(f, to_new=f.to_new[1:], n_pc=NPc.DECIDING, n_answer=Answer.REFUSED)
        yield "N hears REFUSED", heard
    elif f.i_closed:
        answer = Answer.CLOSED if f.n_answer is Answer.SILENT else f.n_answer
        yield f"N hears EOF ({answer.name})", replace(f, n_pc=NPc.DECIDING, n_answer=answer)
    if _quiet(f):
        yield "N's exit deadline passes: N fences I", _fence(f, model)


def _n_deciding(f: Facts, model: Model) -> Iterator[Move]:
    key = classify(f)
    verdict = model.newcomer_decides(f.n_answer, key)
    yield f"N reads the key ({key.name}): {verdict.name}", _n_verdict(f, verdict, key, model)


def _n_fenced(f: Facts, model: Model) -> Iterator[Move]:
    # One TTL after the revoke's answer: I's belief has ended, running or stopped.
    waited = replace(f, i_bound_passed=True, i_keeps=False) if f.i_proc is Proc.ALIVE else f
    yield "N waits out I's lease bound", replace(waited, n_pc=NPc.AFTER_FENCE)


def _n_after_fence(f: Facts, model: Model) -> Iterator[Move]:
    key = classify(f)
    verdict = model.after_fence(key)
    decided = _n_verdict(f, verdict, key, model)
    yield f"N reads the key after the fence ({key.name}): {verdict.name}", decided


def _n_claiming(f: Facts, model: Model) -> Iterator[Move]:
    claimed = replace(f, key=Owner.N) if f.key is Owner.NONE else f
    key = classify(claimed)
    verdict = model.after_claim(key)
    yield f"N claims ({key.name}): {verdict.name}", _n_verdict(claimed, verdict, key, model)


_N_STEPS: Final[dict[NPc, Callable[[Facts, Model], Iterator[Move]]]] = {
    NPc.AWAIT_HELLO: _n_awaiting,
    NPc.READY: _n_ready,
    NPc.AWAIT_SAVED: _n_awaiting,
    NPc.MUST_ACK: _n_must_ack,
    NPc.HEARING: _n_hearing,
    NPc.DECIDING: _n_deciding,
    NPc.FENCED: _n_fenced,
    NPc.AFTER_FENCE: _n_after_fence,
    NPc.CLAIMING: _n_claiming,
}


def _fence(f: Facts, model: Model) -> Facts:
    """N's fence: its own move, then the revoke of I's lease (ends I's keepalives).

    The move is guarded by I's reign and by I's stream being as N read it, so
    it lands only while I is silent (a keep's guarded REFUSED and a fence
    cannot both succeed); ``fence_moves`` off: the revoke alone.
    """
    if model.fence_moves:
        f, _ = _apply(f)
    revoked = replace(_lease_ends(f, Owner.I), n_fenced=True)
    return replace(revoked, n_pc=NPc.FENCED if model.fence_waits else NPc.AFTER_FENCE)


def _n_verdict(f: Facts, verdict: Verdict, key: Key, model: Model) -> Facts:
    f = replace(f, n_seen=key)
    if verdict is Verdict.COMMIT:
        held = Hold.HANDOFF if f.n_handoff else Hold.STALE
        return replace(f, n_pc=NPc.HOLDING, n_holds=held, n_closed=True, step=Step.AFTER_COMMIT)
    if verdict is Verdict.CLAIM:
        return replace(f, n_pc=NPc.CLAIMING)
    if verdict is Verdict.FENCE:
        return _fence(f, model)
    return replace(f, n_pc=NPc.ABORTED, n_closed=True, n_keeps=False)


# -- etcd, C, time and faults -----------------------------------------------------------


def _lease_ends(f: Facts, owner: Owner) -> Facts:
    """A lease ends (expiry or revoke): the holder key on it and its owner's stream go."""
    key = Owner.NONE if f.key is owner else f.key
    if owner is Owner.I:
        return replace(f, i_lease=False, i_closed=True, key=key)
    return replace(f, n_lease=False, n_closed=True, key=key)


def _i_may_believe(f: Facts) -> bool:
    """I could still act as holder once running (its bound has not passed)."""
    return f.i_proc is Proc.ALIVE and f.i_believes and not f.i_bound_passed


def _etcd(f: Facts, model: Model) -> Iterator[Move]:
    if f.orphans:
        applied, (reply, _) = _apply(f, mark=True)
        yield (
            f"etcd applies an orphaned move: {reply.name}",
            applied._replace(orphans=f.orphans - 1),
        )
    if f.i_lease and not f.i_keeps:
        yield "etcd ends I's lease", _lease_ends(f, Owner.I)
    # The key a fence moved is on a lease that outlives the fenced I's bound.
    outlives = model.fence_lease_outlives and f.n_fenced and _i_may_believe(f)
    if f.n_lease and not f.n_keeps and not outlives:
        yield "etcd ends N's lease", _lease_ends(f, Owner.N)
    if f.key is Owner.NONE and not f.c_claimed:
        yield "C claims the absent key", replace(f, key=Owner.C, c_claimed=True)


def _faults(f: Facts) -> Iterator[tuple[str, str, Move]]:
    # Faults at every step of the conversation: a side in a final step is past it.
    if f.i_proc is Proc.ALIVE and (f.i_pc not in I_FINAL or f.i_stopped):
        orphaned = f.orphans + f.i_waiting
        crashed = replace(f, i_proc=Proc.CRASHED, i_stopped=False, i_keeps=False)
        crashed = replace(crashed, i_waiting=False, i_reply=None, orphans=orphaned)
        yield "I", "crash", ("I crashes", crashed)
        if f.i_stopped:
            yield "I", "resume", ("I resumes", replace(f, i_stopped=False))
            if not f.i_bound_passed:
                passed = replace(f, i_bound_passed=True, i_keeps=False)
                yield "I", "bound", ("I's lease bound passes while it is stopped", passed)
        elif not f.i_stop_used:
            yield "I", "stop", ("I is stopped", replace(f, i_stopped=True, i_stop_used=True))
    if f.n_proc is Proc.ALIVE and (f.n_pc not in N_FINAL or f.n_stopped):
        crashed_n = replace(f, n_proc=Proc.CRASHED, n_stopped=False, n_keeps=False)
        yield "N", "crash", ("N crashes", replace(crashed_n, n_holds=Hold.NONE))
        if f.n_stopped:
            yield "N", "resume", ("N resumes", replace(f, n_stopped=False))
            if not f.n_bound_passed:
                passed = replace(f, n_bound_passed=True, n_keeps=False)
                yield "N", "bound", ("N's lease bound passes while it is stopped", passed)
        elif not f.n_stop_used:
            yield "N", "stop", ("N is stopped", replace(f, n_stopped=True, n_stop_used=True))


def moves(f: Facts, model: Model) -> Iterator[tuple[str, str, Move]]:
    """Every enabled action: (side, kind, (label, next state)); kind a fault or 'step'."""
    steps: list[tuple[str, str, Move]] = []
    if f.i_attempts > MAX_ATTEMPTS:
        return  # a violation: exploring on would never end
    if f.i_proc is Proc.ALIVE and not f.i_stopped:
        steps += [("I", "step", move) for move in _i_steps(f, model)]
    if f.n_proc is Proc.ALIVE and not f.n_stopped:
        steps += [("N", "step", move) for move in _n_steps(f, model)]
    steps += [("etcd", "step", move) for move in _etcd(f, model)]
    yield from steps
    # Once nothing is left to do the conversation is over: what befalls a holder
    # later is another conversation.
    if steps or f.i_stopped or f.n_stopped:
        yield from _faults(f)


# -- invariants -------------------------------------------------------------------------


def i_acts(f: Facts) -> bool:
    """I acts as holder: running, believing, within its lease bound."""
    return f.i_proc is Proc.ALIVE and not f.i_stopped and f.i_believes and not f.i_bound_passed


def n_acts(f: Facts) -> bool:
    """N acts as holder: running, holding, within its lease bound."""
    alive = f.n_proc is Proc.ALIVE and not f.n_stopped
    return alive and f.n_holds is not Hold.NONE and not f.n_bound_passed


def acting(f: Facts) -> list[Owner]:
    """Every process acting as holder in ``f`` (C acts from its claim on: it keeps its lease)."""
    found = [Owner.I] if i_acts(f) else []
    found += [Owner.N] if n_acts(f) else []
    return found + ([Owner.C] if f.c_claimed else [])


def violation(f: Facts) -> str | None:
    """The invariant ``f`` breaks in any state, or ``None``."""
    if len(acting(f)) > 1:
        return "(a) two acting holders"
    if f.n_holds is Hold.HANDOFF and f.i_diverged:
        return "(b) N holds a handoff I moved on from"
    if f.i_attempts > MAX_ATTEMPTS:
        return "(c) I retries past its lease bound"
    return None


#: Terminal states where the holder does not have the state, and why that is right.
LOSSES: Final = {
    "I lost its reign before SAVED": "no handoff reached N (I crashed, was stopped past its "
    "bound, or was fenced hung before N read SAVED)",
    "N crashed or lost its lease": "N died, or was stopped past its bound, with the state",
    "I kept, then lost its reign": "I served on after SAVED, then died or was stopped too long",
    "C claimed first": "I's reign ended with no move (I died, stepped down or was fenced) "
    "and C's put-if-absent landed before N's: a waiting successor reserves nothing",
}


def loss_reason(f: Facts) -> str | None:
    """Which :data:`LOSSES` case explains a terminal ``f`` whose holder lacks the state."""
    if not f.n_handoff:
        return "I lost its reign before SAVED"
    if f.n_proc is Proc.CRASHED or f.n_pc is NPc.LOST:
        return "N crashed or lost its lease"
    if f.i_diverged:
        return "I kept, then lost its reign"
    if f.n_pc is NPc.ABORTED and f.n_seen is Key.OTHER and not f.moved:
        return "C claimed first"
    return None


def terminal_violation(f: Facts) -> str | None:
    """The invariant a terminal ``f`` breaks ((c) and (d)), or ``None``."""
    if (f.i_proc is Proc.ALIVE and f.i_pc not in I_FINAL) or (
        f.n_proc is Proc.ALIVE and f.n_pc not in N_FINAL
    ):
        return "(c) a side waits forever"
    holders = acting(f)
    if len(holders) != 1:
        return "(c) nobody holds"
    if holders[0] is not f.key:
        return "(c) the holder key is not on the acting holder's lease"
    with_state = holders[0] is Owner.I or (holders[0] is Owner.N and f.n_holds is Hold.HANDOFF)
    if not with_state and loss_reason(f) is None:
        return "(d) the state was lost"
    return None


def outcome(f: Facts) -> str:
    """A terminal state's verdict, for the report."""
    holder = acting(f)[0].name
    if holder == "N":
        holder += f" ({f.n_holds.name.lower()})"
    reason = loss_reason(f)
    return f"{holder} holds" + (f", state lost: {reason}" if holder != "I" and reason else "")


# -- the search -------------------------------------------------------------------------


def search(model: Model | None = None, *, first: bool = False) -> Report:
    """Explore every state reachable from ``Facts()`` (the real rules by default).

    Breadth first, so the trace kept for each kind of violation is a shortest
    one; ``first``: stop at the first violation (the negative controls).
    States are numbered as found, so the graph is kept as lists of numbers.
    """
    model = model or Model()
    report = Report()
    states: list[Facts] = [Facts()]
    ids: dict[Facts, int] = {states[0]: 0}
    parents: list[tuple[int, str] | None] = [None]
    edges: list[list[int]] = []
    for here, f in enumerate(states):  # grows as it goes: a FIFO queue
        out: list[int] = []
        edges.append(out)
        for side, kind, (label, after) in moves(f, model):
            if kind != "step":
                report.faults.add((side, kind, f.step))
            there = ids.get(after)
            if there is None:
                there = ids[after] = len(states)
                states.append(after)
                parents.append((here, label))
                broken = violation(after)
                if broken and broken not in report.violations:
                    report.violations[broken] = trace_back(dict(enumerate(parents)), there)
            out.append(there)
        if not out:
            report.terminal += 1
            broken = terminal_violation(f)
            if broken is None:
                report.outcomes[outcome(f)] += 1
            elif broken not in report.violations:
                report.violations[broken] = trace_back(dict(enumerate(parents)), here)
        if first and report.violations:
            return report
    report.states = len(states)
    report.transitions = sum(len(out) for out in edges)
    report.traces = count_traces(0, dict(enumerate(edges)))
    return report


# -- the tests --------------------------------------------------------------------------

#: Measured on the model as written (see docs/etcd.md); a refactor that collapses the
#: search falls below these.  (62,044 states since the newcomer holds at the move's
#: mark, 2026-12-07: the interleavings after it, with N still waiting, are gone.)
MIN_STATES: Final = 60_000
MIN_TRANSITIONS: Final = 180_000
MIN_TRACES: Final = 1_400_000_000


@functools.cache
def real_search() -> Report:
    """The search under the real rules, once for the tests that read it."""
    return search()


def test_the_real_rules_keep_every_invariant() -> None:
    report = real_search()
    assert report.violations == {}, describe(report)


def test_the_search_is_as_large_as_measured() -> None:
    report = real_search()
    print(f"\nmodel check of the handover over etcd:\n{describe(report)}")
    assert report.states >= MIN_STATES
    assert report.transitions >= MIN_TRANSITIONS
    assert report.traces >= MIN_TRACES


def test_the_search_covers_every_step_and_fault() -> None:
    wanted = {(side, fault, step) for side in "IN" for fault in ("crash", "stop") for step in Step}
    left = wanted - real_search().faults
    missing = sorted(f"{fault} of {side} {step.value}" for side, fault, step in left)
    assert not missing, missing


def test_every_ending_is_reached() -> None:
    # Each way a conversation ends occurs, each documented loss too: nothing is vacuous.
    endings = {"I holds", "N (handoff) holds", "N (stale) holds, state lost: " + _BEFORE}
    endings |= {f"C holds, state lost: {why}" for why in LOSSES}
    assert set(real_search().outcomes) == endings


_BEFORE: Final = "I lost its reign before SAVED"


# -- negative controls: the checker can fail ---------------------------------------------


def _found(model: Model, wanted: str) -> list[str]:
    report = search(model, first=True)
    assert wanted in report.violations, describe(report)
    return report.violations[wanted]


def _commits_at_end_of_stream(answer: Answer, key: Key | None) -> Verdict:
    """A newcomer that takes the end of stream for the commit, without the read."""
    if answer in {Answer.CLOSED, Answer.SEND_FAILED}:
        return Verdict.COMMIT
    return rules.newcomer_decides(answer, key)


def _keeps_on_an_intact_read(reply: Reply, key: Key | None = None, **kw: bool) -> Then:
    """An incumbent that takes a re-read finding its reign intact for "not applied"."""
    if reply is Reply.LOST and key is Key.THEIRS_INTACT:
        return Then.KEEP
    return rules.incumbent_learns(reply, key, **kw)


def _keeps_on_any_denial(reply: Reply, key: Key | None = None, **kw: bool) -> Then:
    """An incumbent that takes a refused attempt for "nothing applied", after a lost one too."""
    if reply is Reply.DENIED:
        return Then.KEEP
    return rules.incumbent_learns(reply, key, **kw)


def test_a_newcomer_without_the_read_makes_two_holders() -> None:
    trace = _found(Model(newcomer_decides=_commits_at_end_of_stream), "(a) two acting holders")
    assert any("COMMIT" in step and "ABSENT" in step for step in trace), trace


def test_an_incumbent_that_ends_the_stream_unsure_loses_the_state() -> None:
    trace = _found(Model(closes_unsure=True), "(d) the state was lost")
    assert "I's move times out: I takes it as applied" in trace


def test_an_incumbent_that_keeps_on_an_intact_read_makes_two_holders() -> None:
    # The lost move was still on its way: it applies after the read.
    trace = _found(Model(incumbent_learns=_keeps_on_an_intact_read), "(a) two acting holders")
    assert "I re-reads the key (THEIRS_INTACT): KEEP" in trace
    assert "etcd applies an orphaned move: SUCCEEDED" in trace


def test_an_incumbent_that_keeps_on_a_denial_after_a_lost_attempt_makes_two_holders() -> None:
    # The refusal covers its own attempt only: the lost one before it applies later.
    trace = _found(Model(incumbent_learns=_keeps_on_any_denial), "(a) two acting holders")
    assert "etcd refuses I's move outright (full): DENIED" in trace
    assert "etcd applies an orphaned move: SUCCEEDED" in trace


def test_an_incumbent_that_acts_until_its_move_is_answered_makes_two_holders() -> None:
    # N holds at the move's mark: I must have stopped when it sent the move.
    trace = _found(Model(stops_at_move=False), "(a) two acting holders")
    assert trace[-1] == "N reads MOVED: COMMIT", trace


def test_a_newcomer_that_acts_right_after_its_fence_makes_two_holders() -> None:
    trace = _found(Model(fence_waits=False), "(a) two acting holders")
    assert trace[-1] == "I resumes", trace


def test_a_fence_by_revoke_alone_lets_a_claimer_in_beside_the_fenced_holder() -> None:
    # The revoke empties the key at once, while a stopped I still believes in its lease.
    trace = _found(Model(fence_moves=False), "(a) two acting holders")
    assert trace[-2:] == ["C claims the absent key", "I resumes"], trace


def test_a_fence_on_an_ordinary_lease_dies_with_the_fencer() -> None:
    # N dies during its wait: its lease ends before I's bound, C claims beside I.
    trace = _found(Model(fence_lease_outlives=False), "(a) two acting holders")
    assert "N crashes" in trace and "C claims the absent key" in trace
