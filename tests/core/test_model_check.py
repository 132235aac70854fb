"""Model-check the handover: every interleaving of one incumbent and one newcomer.

An explicit-state search (breadth first, with a visited set) over the
combined system of one incumbent ``I`` and one newcomer ``N`` in one
conversation, built from the real pure core: two real
:class:`~highlander._core.connection.Connection` objects (the bytes ``send``
returns are what travels; delivery is ``receive_data`` + ``next_event``),
and the real commit rules of :mod:`highlander._core.commit` for each side's
decision.  Nothing is sampled: every enabled action is taken from every
reachable state.

The model, per step one enabled action:

* ``I`` sends HELLO; on SAVE it saves (0 to :data:`MAX_PROGRESS` PROGRESS,
  then SAVED, which passes its lock and listener: from then on ``N`` holds
  copies); in AWAIT_ACK it reads ACK_SUCCESSION (the commit: it lets go of its
  copies, ends the stream, lingers in ``on_deposed``, exits), or N's
  REFUSED, or the end of stream, or its ACK deadline passes, and decides with
  ``incumbent_decides``; when it keeps, it sends REFUSED ``late`` if
  ``incumbent_tells`` says so (best effort), closes the stream and serves on.
* ``N`` reads HELLO, sends SAVE, reads PROGRESS* and SAVED, prepares its
  takeover (it may fail: then it sends REFUSED ``prepare`` and gives up),
  sends ACK_SUCCESSION (the send fails when I's end is closed), hears REFUSED,
  the end of stream or silence (its exit deadline), asks the kernel whether
  I is gone or let go of its copies (``released``) and decides with
  ``newcomer_decides``: COMMIT (listen, hold with the handoff), ABORT (close
  its copies, retry: it claims the project only if the lock is free), or
  END_INCUMBENT (the verified kill, then COMMIT).  Before SAVED, a missed
  HELLO or save deadline makes it kill the incumbent and claim the freed lock.
* Faults of either side at every step: a crash (its end of the stream
  closes, frames it already queued stay readable by the peer, as on a Unix
  socket; its copies are gone) and a stop (SIGSTOP; resuming is an action
  too; one stop per side per trace keeps the graph finite and acyclic).
  ``Model.drops`` adds one more for I, at most once: its conversation fails
  while the process lives on (an unexpected error in its shell, a bad frame),
  so it keeps the project without a word.  Only a drop lets N see the end of
  stream from a live holder (a deliberate keep always queues REFUSED before
  the close), so it is what makes N's kernel check matter.
* A state is terminal when neither side has a step left and neither is
  stopped; faults are not offered there (what befalls a holder later is
  another conversation), so every trace ends in a verdict.

Timing assumption.  The model has no clock: a deadline is an action.  A side
that is neither stopped nor dead answers before its peer's deadline, so a
side's deadline is enabled only while the peer is stopped and nothing is left
to read.  That is the watchdog's own premise (a save that keeps advancing is
never cut short, guarantee 6); without it every step would race every
deadline and "healthy" would mean nothing.  Two deadlines are exempt because
nothing bounds what they wait for:

* I's ACK deadline passes at *any* moment of AWAIT_ACK, including while the
  ACK_SUCCESSION is already queued unread (issue #10 case 1: the newcomer's
  prepare has no bound, and the holder's anyio wait is cancelled at an expired
  deadline without looking at the socket), so both orders are explored;
* N's exit deadline passes when I is stopped with its end of the stream open.
  A committed I ends the stream before its ``on_deposed`` runs, so a hook
  that lingers is no longer the handover's business: N commits on the end
  of stream and the kernel check, then sees to I's exit off the critical
  path (``highlander._shell.predecessor``).

``Model.atomic_kill`` (on by default) makes the newcomer's missed deadline,
its verdict and its kill one step: a stopped incumbent does not run again
before the kill lands (SIGTERM with its default action kills a stopped
process at once).  Off, a resume can fall between them, as it can in the real
shell when the application handles SIGTERM.

Invariants, in every reachable state: (1) never two holders (I alive and not
committed, N committed); (2) the state is with exactly one side (N commits
only with the handoff, never one the incumbent moved on from by telling
REFUSED or serving again; never a stale claim after I committed); (3) a
healthy holder (running, not committed) is never killed; (5) N never listens
before it committed.  In every terminal state: (4) nobody waits forever (each
live side is in a final step), exactly one side holds or none for a reason in
:data:`NOBODY_HOLDS`, and (2) a state I died with (after SAVED, undecided) or
committed is held by N unless N died or declined.

The real rules keep all of them under the default model.  The two knobs each
expose a hole, kept as strict xfails with their traces: a silent keep then a
crash (``drops``), and a resume before the kill lands (``atomic_kill``).  The
counts are in docs/protocol.md; ``pytest -s`` prints them.
"""

from __future__ import annotations

import collections
import copy
import enum
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import pytest

from highlander._core import commit as _commit
from highlander._core.codec import NEED_DATA
from highlander._core.commit import Answer, Decision, Ending, Verdict
from highlander._core.connection import Closed, Connection
from highlander._core.errors import Reason
from highlander._core.messages import AckSuccession, Message, ProgressReport, Refused, Saved
from highlander._core.state import Role, State
from tests.support.core import CORE_KEY, CORE_TIMEOUTS, build_hello, build_save
from tests.support.model_checking import Report, count_traces, describe, trace_back

#: The model has no clock: every Connection call happens at this instant.
NOW: Final = 0.0
#: PROGRESS frames a save may send before SAVED (0, 1 or 2 are explored).
MAX_PROGRESS: Final = 2
I_NONCE: Final = bytes.fromhex("22" * 16)
N_NONCE: Final = bytes.fromhex("11" * 16)
HANDOFF: Final = {"cursor": 42}


class Proc(enum.Enum):
    """The process behind a side."""

    ALIVE = "alive"
    CRASHED = "crashed"
    KILLED = "killed"  # by the newcomer's verified kill
    EXITED = "exited"  # left by itself (deposed, or gave up)


class IPc(enum.Enum):
    """Where the incumbent's shell is."""

    HELLO = "hello"
    AWAIT_REQUEST = "await_request"
    SAVING = "saving"
    AWAIT_ACK = "await_ack"
    KEEPING = "keeping"  # decided to keep; may owe REFUSED, then closes
    COMMITTED = "committed"  # accepted the ACK, still has its copies
    RELEASED = "released"  # let go of its copies; its end of the stream still open
    LINGERING = "lingering"  # stream closed; in on_deposed
    LEAVING = "leaving"  # on_deposed returned; the process exits next
    SERVING = "serving"  # final: kept the project, conversation over
    LEFT = "left"  # final: deposed and gone


class NPc(enum.Enum):
    """Where the newcomer's shell is."""

    AWAIT_HELLO = "await_hello"
    READY = "ready"
    AWAIT_SAVED = "await_saved"
    PREPARE = "prepare"
    DECLINING = "declining"  # sent REFUSED prepare; gives up next
    MUST_ACK = "must_ack"
    HEARING = "hearing"
    DECIDING = "deciding"
    KILL_THEN_RETRY = "kill_then_retry"
    KILL_THEN_COMMIT = "kill_then_commit"
    COMMITTING = "committing"
    HOLDING = "holding"  # final
    RETRY = "retry"  # final unless the lock is free: the next attempt claims it
    GAVE_UP = "gave_up"  # final: TakeoverError


class Hold(enum.Enum):
    """What the newcomer holds."""

    NONE = "none"
    HANDOFF = "handoff"  # committed a handover, with the handoff from SAVED
    STALE = "stale"  # claimed a free project (nobody handed anything over)


class Step(enum.Enum):
    """How far the conversation got: the coordinate of a fault."""

    BEFORE_HELLO = "before HELLO"
    AFTER_HELLO = "after HELLO"
    SAVING = "during SAVING"
    AFTER_SAVED = "after SAVED sent"
    AFTER_ACK_SENT = "after ACK sent"
    AFTER_ACK_RECEIVED = "after ACK received"
    AFTER_COMMIT = "after commit"


FAULTS: Final = ("crash", "stop")
I_FINAL: Final = frozenset({IPc.SERVING, IPc.LEFT})
N_FINAL: Final = frozenset({NPc.HOLDING, NPc.RETRY, NPc.GAVE_UP})
#: Terminal states where nobody holds, and why that is right.
NOBODY_HOLDS: Final = {
    "both crashed": "each side died while it held, or before it could",
    "N crashed after the commit": "the state was the newcomer's; it died with it",
    "N declined, then I crashed": "the newcomer could not prepare, the holder died after",
}


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything of a model state but the two Connections (hashable)."""

    i_proc: Proc = Proc.ALIVE
    i_pc: IPc = IPc.HELLO
    i_stopped: bool = False
    i_stop_used: bool = False
    i_drop_used: bool = False
    i_progress: int = 0
    i_copies: bool = True  # the incumbent's lock and listener
    i_committed: bool = False
    i_tell: bool = False  # owes REFUSED late
    #: I acted on keeping after SAVED (told REFUSED, or went back to serving):
    #: from here its state moves on and the handoff is stale.
    i_diverged: bool = False
    n_proc: Proc = Proc.ALIVE
    n_pc: NPc = NPc.AWAIT_HELLO
    n_stopped: bool = False
    n_stop_used: bool = False
    n_copies: bool = False
    n_handoff: bool = False
    n_answer: Answer = Answer.SILENT
    n_holds: Hold = Hold.NONE
    n_listened: bool = False
    killed_healthy: bool = False
    to_new: tuple[bytes, ...] = ()  # frames I sent that N has not read
    i_closed: bool = False  # I's end of the stream is closed
    to_inc: tuple[bytes, ...] = ()
    n_closed: bool = False
    step: Step = Step.BEFORE_HELLO


@dataclass(frozen=True, slots=True)
class World:
    """One model state: the facts and both sides' real Connections (never mutated)."""

    facts: Facts
    inc: Connection
    new: Connection

    def key(self) -> tuple[object, ...]:
        """The abstract state: sequence numbers and nonces follow from the facts."""
        return (self.facts, self.inc.state, self.new.state, self.new.last_progress)


@dataclass(frozen=True, slots=True)
class Model:
    """The rules under test (the real ones unless a control breaks one) and two knobs."""

    incumbent_decides: Callable[[Ending], Decision] = _commit.incumbent_decides
    incumbent_tells: Callable[[Ending], bool] = _commit.incumbent_tells
    newcomer_decides: Callable[[Answer, bool], Verdict] = _commit.newcomer_decides
    #: The newcomer's silence (or missed deadline), verdict and kill are one step.
    atomic_kill: bool = True
    #: I's conversation may fail while it lives on (once per trace).
    drops: bool = False


Move = tuple[str, World]


# -- the Connections: copied before every change, so states share nothing mutable ----


def _sent(conn: Connection, message: Message) -> tuple[Connection, bytes]:
    conn = copy.deepcopy(conn)
    return conn, conn.send(message, NOW)


def _read(conn: Connection, frame: bytes) -> tuple[Connection, Message | Closed]:
    """Deliver one frame (``b""``: the end of stream) and take the event it makes."""
    conn = copy.deepcopy(conn)
    conn.receive_data(frame)
    event = conn.next_event(NOW)
    assert event is not NEED_DATA, "the model delivers whole frames"
    assert isinstance(event, Message | Closed)
    return conn, event


def _pending(queue: tuple[bytes, ...], closed: bool) -> bytes | None:
    """The next thing a reader gets: a frame, ``b""`` at end of stream, ``None``: wait."""
    if queue:
        return queue[0]
    return b"" if closed else None


def initial_world() -> World:
    """Both sides at the start of a conversation; I holds the project."""
    inc = Connection(Role.INCUMBENT, key=CORE_KEY, nonce=I_NONCE, now=NOW, timeouts=CORE_TIMEOUTS)
    new = Connection(Role.NEWCOMER, key=CORE_KEY, nonce=N_NONCE, now=NOW, timeouts=CORE_TIMEOUTS)
    return World(Facts(), inc, new)


# -- the incumbent ----------------------------------------------------------------------


def _i_to(w: World, f: Facts, inc: Connection | None = None) -> World:
    return World(f, inc if inc is not None else w.inc, w.new)


def _i_send(w: World, message: Message, **changes: Any) -> World:
    """I sends ``message``; it is queued for N unless N's end is closed (EPIPE)."""
    inc, data = _sent(w.inc, message)
    f = w.facts
    queued = f.to_new if f.n_closed else (*f.to_new, data)
    return _i_to(w, replace(f, to_new=queued, **changes), inc)


def _i_ends_conversation(f: Facts) -> Facts:
    """I closes the stream and serves on, holding the project."""
    # Before SAVED there is no handoff to go stale; after it, this is where they part.
    return replace(f, i_pc=IPc.SERVING, i_closed=True, i_diverged=True)


def _i_hello(w: World, model: Model) -> Iterator[Move]:
    if w.facts.n_closed:
        yield "I sends HELLO: EPIPE, I serves on", _i_to(w, _i_ends_conversation(w.facts))
        return
    hello = build_hello(I_NONCE)
    yield "I sends HELLO", _i_send(w, hello, i_pc=IPc.AWAIT_REQUEST, step=Step.AFTER_HELLO)


def _i_await_request(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    frame = _pending(f.to_inc, f.n_closed)
    if frame is not None:
        inc, event = _read(w.inc, frame)
        if isinstance(event, Closed):
            yield "I reads EOF, serves on", _i_to(w, _i_ends_conversation(f), inc)
        else:
            assert event.TYPE == "SAVE", event
            rest = f.to_inc[1:]
            yield (
                "I reads SAVE",
                _i_to(w, replace(f, to_inc=rest, i_pc=IPc.SAVING, step=Step.SAVING), inc),
            )
    if frame is None and f.n_stopped:
        yield "I's request deadline passes, I serves on", _i_to(w, _i_ends_conversation(f))


def _i_saving(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    if f.n_closed:
        yield "I's save: EPIPE, I serves on", _i_to(w, _i_ends_conversation(f))
        return
    if f.i_progress < MAX_PROGRESS:
        report = ProgressReport(counter=f.i_progress)
        yield f"I sends PROGRESS {f.i_progress}", _i_send(w, report, i_progress=f.i_progress + 1)
    saved = Saved(handoff=HANDOFF, generation=7)
    # The lock and listener travel with SAVED: in flight or read, they are N's copies.
    yield (
        "I sends SAVED (+ lock, listener)",
        _i_send(w, saved, i_pc=IPc.AWAIT_ACK, n_copies=True, step=Step.AFTER_SAVED),
    )


def _i_decides(w: World, model: Model, ending: Ending, inc: Connection, f: Facts) -> World:
    if model.incumbent_decides(ending) is Decision.COMMIT:
        step = Step.AFTER_ACK_RECEIVED if ending is Ending.ACK_IN_TIME else f.step
        return _i_to(w, replace(f, i_pc=IPc.COMMITTED, i_committed=True, step=step), inc)
    tell = model.incumbent_tells(ending)
    return _i_to(w, replace(f, i_pc=IPc.KEEPING, i_tell=tell), inc)


_ENDINGS: Final = {"ACK_SUCCESSION": Ending.ACK_IN_TIME, "REFUSED": Ending.PEER_REFUSED}


def _i_await_ack(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    frame = _pending(f.to_inc, f.n_closed)
    if frame is not None:
        inc, event = _read(w.inc, frame)
        if isinstance(event, Closed):
            ending, what = Ending.PEER_CLOSED, "EOF"
        else:
            ending, what = _ENDINGS[event.TYPE], event.TYPE
        yield f"I reads {what}", _i_decides(w, model, ending, inc, replace(f, to_inc=f.to_inc[1:]))
    # The race of issue #10 case 1: the deadline may pass with N's answer queued unread.
    late = " (N's answer queued unread)" if f.to_inc else ""
    yield f"I's ACK deadline passes{late}", _i_decides(w, model, Ending.DEADLINE, w.inc, f)


def _i_keeping(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    # Telling needs a conversation still in AWAIT_ACK (after N's REFUSED it is DONE:
    # a broken rule that tells then would be the core's LocalProtocolError).
    if f.i_tell and w.inc.state is State.AWAIT_ACK:
        refused = Refused(Reason.LATE, "the ACK came after the deadline")
        yield "I sends REFUSED late", _i_send(w, refused, i_tell=False, i_diverged=True)
        return
    yield "I closes the stream, serves on", _i_to(w, _i_ends_conversation(replace(f, i_tell=False)))


def _i_committed(w: World, model: Model) -> Iterator[Move]:
    f = replace(w.facts, i_copies=False, i_pc=IPc.RELEASED, step=Step.AFTER_COMMIT)
    yield "I lets go of its lock and listener", _i_to(w, f)


def _i_released(w: World, model: Model) -> Iterator[Move]:
    # The end of the stream goes out before on_deposed runs: with the kernel
    # showing the lock file closed, it is the commit's answer to N.
    f = replace(w.facts, i_closed=True, i_pc=IPc.LINGERING)
    yield "I ends the stream", _i_to(w, f)


def _i_lingering(w: World, model: Model) -> Iterator[Move]:
    yield "I's on_deposed returns", _i_to(w, replace(w.facts, i_pc=IPc.LEAVING))


def _i_leaving(w: World, model: Model) -> Iterator[Move]:
    yield "I exits", _i_to(w, replace(w.facts, i_proc=Proc.EXITED, i_pc=IPc.LEFT))


def _nothing(w: World, model: Model) -> Iterator[Move]:
    return iter(())


_I_STEPS: Final[dict[IPc, Callable[[World, Model], Iterator[Move]]]] = {
    IPc.HELLO: _i_hello,
    IPc.AWAIT_REQUEST: _i_await_request,
    IPc.SAVING: _i_saving,
    IPc.AWAIT_ACK: _i_await_ack,
    IPc.KEEPING: _i_keeping,
    IPc.COMMITTED: _i_committed,
    IPc.RELEASED: _i_released,
    IPc.LINGERING: _i_lingering,
    IPc.LEAVING: _i_leaving,
    IPc.SERVING: _nothing,
    IPc.LEFT: _nothing,
}


# -- the newcomer -----------------------------------------------------------------------


def _n_to(w: World, f: Facts, new: Connection | None = None) -> World:
    return World(f, w.inc, new if new is not None else w.new)


def _n_send(w: World, message: Message, **changes: Any) -> tuple[World, bool]:
    """N sends ``message``; return the world and whether it was queued (not EPIPE)."""
    new, data = _sent(w.new, message)
    f = w.facts
    queued = not f.i_closed
    frames = (*f.to_inc, data) if queued else f.to_inc
    return _n_to(w, replace(f, to_inc=frames, **changes), new), queued


def _n_leaves(f: Facts) -> Facts:
    """N ends this conversation without holding: closes its copies and the stream."""
    return replace(f, n_pc=NPc.RETRY, n_copies=False, n_closed=True)


def _kill_incumbent(f: Facts) -> Facts:
    """The verified kill; a healthy holder (running, not committed) must never get it."""
    if f.i_proc is not Proc.ALIVE:
        return f  # it died meanwhile: the pidfd says so, nothing is signalled
    healthy = not f.i_stopped and not f.i_committed
    return replace(
        f,
        i_proc=Proc.KILLED,
        i_stopped=False,
        i_copies=False,
        i_closed=True,
        killed_healthy=f.killed_healthy or healthy,
    )


def _watchdog_fires(w: World) -> bool:
    """A pre-SAVED deadline of N: only a stopped incumbent misses it (timing assumption)."""
    f = w.facts
    return f.i_proc is Proc.ALIVE and f.i_stopped and not f.to_new and not f.i_closed


def _n_hung(w: World, model: Model, phase: str) -> Move:
    f = w.facts
    if model.atomic_kill:
        return f"N's {phase} deadline passes: N kills I", _n_to(w, _n_leaves(_kill_incumbent(f)))
    return f"N's {phase} deadline passes", _n_to(w, replace(f, n_pc=NPc.KILL_THEN_RETRY))


def _n_await_hello(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    frame = _pending(f.to_new, f.i_closed)
    if frame is not None:
        new, event = _read(w.new, frame)
        if isinstance(event, Closed):
            yield "N reads EOF, retries", _n_to(w, _n_leaves(f), new)
        else:
            assert event.TYPE == "HELLO", event
            yield "N reads HELLO", _n_to(w, replace(f, to_new=f.to_new[1:], n_pc=NPc.READY), new)
    if _watchdog_fires(w):
        yield _n_hung(w, model, "HELLO")


def _n_ready(w: World, model: Model) -> Iterator[Move]:
    if w.facts.i_closed:
        yield "N sends SAVE: EPIPE, retries", _n_to(w, _n_leaves(w.facts))
        return
    world, _ = _n_send(w, build_save(N_NONCE, I_NONCE), n_pc=NPc.AWAIT_SAVED)
    yield "N sends SAVE", world


def _n_await_saved(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    frame = _pending(f.to_new, f.i_closed)
    if frame is not None:
        new, event = _read(w.new, frame)
        rest = replace(f, to_new=f.to_new[1:])
        if isinstance(event, Closed):
            yield "N reads EOF, retries", _n_to(w, _n_leaves(f), new)
        elif isinstance(event, ProgressReport):
            yield f"N reads PROGRESS {event.counter}", _n_to(w, rest, new)
        else:
            assert isinstance(event, Saved), event
            after = replace(rest, n_pc=NPc.PREPARE, n_handoff=True)
            yield "N reads SAVED (adopts the copies, does not listen)", _n_to(w, after, new)
    if _watchdog_fires(w):
        yield _n_hung(w, model, "save")


def _n_prepare(w: World, model: Model) -> Iterator[Move]:
    yield "N prepares its takeover", _n_to(w, replace(w.facts, n_pc=NPc.MUST_ACK))
    refused = Refused(Reason.PREPARE, "no space for the record")
    world, _ = _n_send(w, refused, n_pc=NPc.DECLINING)
    yield "N cannot prepare: sends REFUSED prepare", world


def _n_declining(w: World, model: Model) -> Iterator[Move]:
    f = replace(_n_leaves(w.facts), n_pc=NPc.GAVE_UP, n_proc=Proc.EXITED)
    yield "N gives up (TakeoverError)", _n_to(w, f)


def _n_must_ack(w: World, model: Model) -> Iterator[Move]:
    world, queued = _n_send(w, AckSuccession(), n_pc=NPc.HEARING)
    if queued:
        f = replace(
            world.facts, n_answer=Answer.SILENT, step=max_step(w.facts, Step.AFTER_ACK_SENT)
        )
        yield "N sends ACK_SUCCESSION", _n_to(world, f)
    else:
        f = replace(world.facts, n_answer=Answer.SEND_FAILED)
        yield "N sends ACK_SUCCESSION: EPIPE", _n_to(world, f)


def _exit_deadline_fires(w: World) -> bool:
    """N's exit deadline: I is stopped with nothing queued for N (timing assumption)."""
    f = w.facts
    if f.i_proc is not Proc.ALIVE or f.to_new or f.i_closed:
        return False
    return f.i_stopped


def _n_hearing(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    frame = _pending(f.to_new, f.i_closed)
    if frame is not None:
        new, event = _read(w.new, frame)
        if isinstance(event, Closed):
            answer = Answer.CLOSED if f.n_answer is Answer.SILENT else f.n_answer
            heard = replace(f, n_answer=answer, n_pc=NPc.DECIDING)
            yield f"N hears EOF ({answer.value})", _n_to(w, heard, new)
        else:
            assert isinstance(event, Refused), event
            heard = replace(f, to_new=f.to_new[1:], n_answer=Answer.REFUSED, n_pc=NPc.DECIDING)
            yield "N hears REFUSED", _n_to(w, heard, new)
    if _exit_deadline_fires(w):
        silent = replace(f, n_answer=Answer.SILENT, n_pc=NPc.DECIDING)
        if model.atomic_kill:
            label, world = _n_verdict(_n_to(w, silent), model)
            yield f"N's exit deadline passes; {label}", world
        else:
            yield "N's exit deadline passes", _n_to(w, silent)


def _n_verdict(w: World, model: Model) -> Move:
    f = w.facts
    released = f.i_proc is not Proc.ALIVE or not f.i_copies
    verdict = model.newcomer_decides(f.n_answer, released)
    said = f"N decides {verdict.value} (released={released})"
    if verdict is Verdict.COMMIT:
        return said, _n_to(w, _n_commits(f))
    if verdict is Verdict.ABORT:
        return said, _n_to(w, _n_leaves(f))
    if model.atomic_kill:
        return f"{said}: kills I", _n_to(w, replace(_kill_incumbent(f), n_pc=NPc.COMMITTING))
    return said, _n_to(w, replace(f, n_pc=NPc.KILL_THEN_COMMIT))


def _n_commits(f: Facts) -> Facts:
    return replace(
        f, n_pc=NPc.HOLDING, n_holds=Hold.HANDOFF, n_listened=True, step=Step.AFTER_COMMIT
    )


def _n_deciding(w: World, model: Model) -> Iterator[Move]:
    yield _n_verdict(w, model)


def _n_kill_then_retry(w: World, model: Model) -> Iterator[Move]:
    yield "N's kill lands", _n_to(w, _n_leaves(_kill_incumbent(w.facts)))


def _n_kill_then_commit(w: World, model: Model) -> Iterator[Move]:
    f = replace(_kill_incumbent(w.facts), n_pc=NPc.COMMITTING)
    yield "N's kill lands", _n_to(w, f)


def _n_committing(w: World, model: Model) -> Iterator[Move]:
    yield "N commits (listens, installs its record)", _n_to(w, _n_commits(w.facts))


def _lock_free(f: Facts) -> bool:
    i_has = f.i_proc is Proc.ALIVE and f.i_copies
    return not i_has and not f.n_copies


def _n_retry(w: World, model: Model) -> Iterator[Move]:
    f = w.facts
    if f.n_holds is Hold.NONE and _lock_free(f):
        held = replace(f, n_pc=NPc.HOLDING, n_holds=Hold.STALE, n_listened=True)
        yield "N claims the free project (no handoff)", _n_to(w, held)


_N_STEPS: Final[dict[NPc, Callable[[World, Model], Iterator[Move]]]] = {
    NPc.AWAIT_HELLO: _n_await_hello,
    NPc.READY: _n_ready,
    NPc.AWAIT_SAVED: _n_await_saved,
    NPc.PREPARE: _n_prepare,
    NPc.DECLINING: _n_declining,
    NPc.MUST_ACK: _n_must_ack,
    NPc.HEARING: _n_hearing,
    NPc.DECIDING: _n_deciding,
    NPc.KILL_THEN_RETRY: _n_kill_then_retry,
    NPc.KILL_THEN_COMMIT: _n_kill_then_commit,
    NPc.COMMITTING: _n_committing,
    NPc.HOLDING: _nothing,
    NPc.RETRY: _n_retry,
    NPc.GAVE_UP: _nothing,
}


def max_step(f: Facts, step: Step) -> Step:
    """The later of the conversation's step so far and ``step``."""
    order = list(Step)
    return step if order.index(step) > order.index(f.step) else f.step


# -- faults -----------------------------------------------------------------------------


def _faults(w: World, model: Model) -> Iterator[tuple[str, str, Move]]:
    """(side, fault, move) for every fault enabled in ``w``."""
    f = w.facts
    if f.i_proc is Proc.ALIVE:
        crashed = replace(f, i_proc=Proc.CRASHED, i_stopped=False, i_copies=False, i_closed=True)
        yield "I", "crash", ("I crashes", _i_to(w, crashed))
        if f.i_stopped:
            yield "I", "resume", ("I resumes", _i_to(w, replace(f, i_stopped=False)))
        elif not f.i_stop_used:
            stopped = replace(f, i_stopped=True, i_stop_used=True)
            yield "I", "stop", ("I is stopped", _i_to(w, stopped))
        if model.drops and not f.i_stopped and not f.i_drop_used and f.i_pc in _DROPPABLE:
            yield "I", "drop", ("I's conversation fails (it lives on)", _i_drop(w, model))
    if f.n_proc is Proc.ALIVE:
        crashed = replace(f, n_proc=Proc.CRASHED, n_stopped=False, n_copies=False, n_closed=True)
        yield "N", "crash", ("N crashes", _n_to(w, crashed))
        if f.n_stopped:
            yield "N", "resume", ("N resumes", _n_to(w, replace(f, n_stopped=False)))
        elif not f.n_stop_used:
            stopped = replace(f, n_stopped=True, n_stop_used=True)
            yield "N", "stop", ("N is stopped", _n_to(w, stopped))


_DROPPABLE: Final = frozenset({IPc.HELLO, IPc.AWAIT_REQUEST, IPc.SAVING, IPc.AWAIT_ACK})


def _i_drop(w: World, model: Model) -> World:
    """I's conversation fails: no word to N; in AWAIT_ACK that is a BAD_FRAME ending."""
    f = replace(w.facts, i_drop_used=True)
    if f.i_pc is IPc.AWAIT_ACK and model.incumbent_decides(Ending.BAD_FRAME) is Decision.COMMIT:
        return _i_to(w, replace(f, i_pc=IPc.COMMITTED, i_committed=True))
    return _i_to(w, _i_ends_conversation(f))


def moves(w: World, model: Model) -> Iterator[tuple[str, str, Move]]:
    """Every enabled action of ``w``: (side, kind, (label, next world)), kind a fault or 'step'.

    Faults come last, so a breadth-first trace prefers the protocol's own steps.
    """
    f = w.facts
    steps: list[tuple[str, str, Move]] = []
    if f.i_proc is Proc.ALIVE and not f.i_stopped:
        steps += [("I", "step", move) for move in _I_STEPS[f.i_pc](w, model)]
    if f.n_proc is Proc.ALIVE and not f.n_stopped:
        steps += [("N", "step", move) for move in _N_STEPS[f.n_pc](w, model)]
    yield from steps
    # Once neither side has anything left to do the conversation is over: a state
    # is terminal then, and what befalls a holder later is another conversation.
    if steps or f.i_stopped or f.n_stopped:
        yield from _faults(w, model)


# -- invariants -------------------------------------------------------------------------


def _i_holds(f: Facts) -> bool:
    return f.i_proc is Proc.ALIVE and not f.i_committed


def _n_holds(f: Facts) -> bool:
    return f.n_proc is Proc.ALIVE and f.n_holds is not Hold.NONE


def violation(f: Facts) -> str | None:
    """The invariant ``f`` breaks in any state, or ``None``."""
    if _i_holds(f) and _n_holds(f):
        return "(1) two holders"
    if f.n_holds is Hold.HANDOFF and (not f.n_handoff or f.i_diverged):
        return "(2) N holds a handoff the incumbent moved on from"
    if f.n_holds is Hold.STALE and f.i_committed:
        return "(2) I handed the state over, N claimed without it"
    if f.killed_healthy:
        return "(3) a healthy holder was killed"
    if f.n_listened and f.n_holds is Hold.NONE:
        return "(5) N listened before it committed"
    return None


def terminal_violation(f: Facts) -> str | None:
    """The invariant a terminal ``f`` breaks (4, and 2 at the end), or ``None``."""
    if (f.i_proc is Proc.ALIVE and f.i_pc not in I_FINAL) or (
        f.n_proc is Proc.ALIVE and f.n_pc not in N_FINAL
    ):
        return "(4) a side waits forever"
    n_available = f.n_proc is Proc.ALIVE
    undecided = f.i_pc in {IPc.AWAIT_ACK, IPc.KEEPING} and not f.i_diverged
    i_died_with_it = f.i_proc in {Proc.CRASHED, Proc.KILLED} and undecided
    if (i_died_with_it or f.i_committed) and n_available and f.n_holds is not Hold.HANDOFF:
        return "(2) the state died with the incumbent"
    if not _i_holds(f) and not _n_holds(f) and nobody_reason(f) is None:
        return "(4) nobody holds"
    return None


def nobody_reason(f: Facts) -> str | None:
    """Which :data:`NOBODY_HOLDS` reason explains a terminal ``f`` with no holder."""
    i_dead = f.i_proc in {Proc.CRASHED, Proc.KILLED}
    if f.n_proc is Proc.CRASHED and f.i_committed:
        return "N crashed after the commit"
    if f.n_proc is Proc.CRASHED and i_dead:
        return "both crashed"
    if f.n_pc is NPc.GAVE_UP and f.i_proc is Proc.CRASHED:
        return "N declined, then I crashed"
    return None


def outcome(f: Facts) -> str:
    """A terminal state's verdict, for the report."""
    if _i_holds(f):
        return "I holds"
    if _n_holds(f):
        return f"N holds ({f.n_holds.value})"
    return f"nobody: {nobody_reason(f)}"


# -- the search -------------------------------------------------------------------------


def search(model: Model | None = None) -> Report:
    """Explore every state reachable from :func:`initial_world` (the real rules by default).

    Breadth first, so the trace kept for each kind of violation is a shortest one.
    """
    model = model or Model()
    report = Report()
    start = initial_world()
    root = start.key()
    parents: dict[object, tuple[object, str] | None] = {root: None}
    edges: dict[object, list[object]] = {}
    frontier = collections.deque([start])
    while frontier:
        world = frontier.popleft()
        here = world.key()
        out = edges[here] = []
        for side, kind, (label, after) in moves(world, model):
            if kind != "step":
                report.faults.add((side, kind, world.facts.step))
            there = after.key()
            out.append(there)
            if there in parents:
                continue
            parents[there] = (here, label)
            frontier.append(after)
            broken = violation(after.facts)
            if broken and broken not in report.violations:
                report.violations[broken] = trace_back(parents, there)
        if not out:
            report.terminal += 1
            report.outcomes[outcome(world.facts)] += 1
            broken = terminal_violation(world.facts)
            if broken and broken not in report.violations:
                report.violations[broken] = trace_back(parents, here)
    report.states = len(parents)
    report.transitions = sum(len(out) for out in edges.values())
    report.traces = count_traces(root, edges)
    return report


# -- the tests --------------------------------------------------------------------------

#: Measured on the model as written: 5,009 states, 10,470 transitions, 11,484,264
#: complete traces.  A refactor that collapses the search falls below these.
MIN_STATES: Final = 4_500
MIN_TRANSITIONS: Final = 9_000
MIN_TRACES: Final = 10_000_000


@functools.cache
def real_search() -> Report:
    """The search under the real rules, once for the tests that read it."""
    return search()


def print_counts(report: Report) -> None:
    """Write the counts to stdout (pytest shows them under ``-s``)."""
    print(f"\nmodel check of the handover (tests/core/test_model_check.py):\n{describe(report)}")


def test_the_real_rules_keep_every_invariant() -> None:
    report = real_search()
    assert report.violations == {}, describe(report)


def test_the_search_is_as_large_as_measured() -> None:
    report = real_search()
    print_counts(report)
    assert report.states >= MIN_STATES
    assert report.transitions >= MIN_TRANSITIONS
    assert report.traces >= MIN_TRACES


def test_the_search_covers_every_step_and_fault() -> None:
    report = real_search()
    wanted = {(side, fault, step) for side in "IN" for fault in FAULTS for step in Step}
    missing = sorted(
        f"{fault} of {side} {step.value}" for side, fault, step in wanted - report.faults
    )
    assert not missing, missing


def test_every_ending_is_reached() -> None:
    # Each way a conversation can end occurs: the invariants are not vacuous.
    endings = {"I holds", "N holds (handoff)", "N holds (stale)"}
    endings |= {f"nobody: {why}" for why in NOBODY_HOLDS}
    assert set(real_search().outcomes) == endings


# -- negative controls: the checker can fail ---------------------------------------------


def _commits_at_end_of_stream(answer: Answer, released: bool) -> Verdict:
    """A newcomer that takes the end of stream for the commit, without asking the kernel."""
    if answer in {Answer.CLOSED, Answer.SEND_FAILED}:
        return Verdict.COMMIT
    return _commit.newcomer_decides(answer, released)


def _never_tells(ending: Ending) -> bool:
    return False


def test_a_newcomer_without_the_kernel_check_makes_two_holders() -> None:
    # Only a silent keep (the drop) lets N see the end of stream from a live holder:
    # a deliberate keep always queues REFUSED before the close.
    report = search(Model(newcomer_decides=_commits_at_end_of_stream, drops=True))
    trace = report.violations.get("(1) two holders")
    assert trace is not None, describe(report)
    assert "I's conversation fails (it lives on)" in trace
    assert trace[-1] == "N decides commit (released=False)"


def test_the_old_silent_keep_at_the_ack_deadline_makes_two_holders() -> None:
    # The behaviour issue #10 case 1 observed: I keeps silently at its ACK deadline
    # and N takes the end of stream (its EPIPE) for the commit.
    model = Model(incumbent_tells=_never_tells, newcomer_decides=_commits_at_end_of_stream)
    report = search(model)
    trace = report.violations.get("(1) two holders")
    assert trace is not None, describe(report)
    assert "I's ACK deadline passes" in trace
    assert trace[-1] == "N decides commit (released=False)"


# -- holes outside the guarantee, found by the model --------------------------------------


class KnownHole(Exception):  # noqa: N818 - a finding, not an error
    """The search found the hole a test documents, and nothing else."""


def _only(report: Report, known: set[str]) -> None:
    found = set(report.violations)
    assert found <= known, describe(report)  # anything new is a plain failure
    if found:
        raise KnownHole(describe(report))


@pytest.mark.xfail(
    raises=KnownHole,
    strict=True,
    reason="CLOSED + released cannot tell 'I committed' from 'I kept silently, then died': "
    "I drops the conversation in AWAIT_ACK (keeps, no REFUSED), closes, serves on; "
    "N hears EOF; I crashes before N's kernel check; N commits with the SAVED handoff",
)
def test_a_silent_keep_then_a_crash_hands_over_no_stale_state() -> None:
    _only(search(Model(drops=True)), {"(2) N holds a handoff the incumbent moved on from"})


@pytest.mark.xfail(
    raises=KnownHole,
    strict=True,
    reason="the kill re-checks that a stopped incumbent is still stopped right before the "
    "signal (terminate(halted=True)), but no kernel call makes check-and-signal atomic: "
    "I stopped, N's deadline passes, I resumes after the re-check, the kill lands",
)
def test_a_resume_before_the_kill_lands_kills_no_healthy_holder() -> None:
    known = {
        "(3) a healthy holder was killed",
        "(2) the state died with the incumbent",
        "(2) N holds a handoff the incumbent moved on from",
    }
    _only(search(Model(atomic_kill=False)), known)
