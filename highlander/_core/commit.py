"""The one commit point of a handover, as pure rules (no I/O, no clock).

A handover commits exactly once, and the incumbent commits it: the moment
it accepts a timely ACK_SUCCESSION.  Everything before is reversible, and
everything after is the newcomer's.

Who owns what at each step::

    step                          lock           listener      record        state
    HELLO .. SAVING               I              I             I's           I
    SAVED sent (fds passed)       I (+ N copy)   I (+ N copy)  I's           I, and N's handoff copy
    N prepares its takeover       I (+ N copy)   I (+ N copy)  I's (+ N's staged)
    N sends ACK_SUCCESSION        I (+ N copy)   I (+ N copy)  I's (+ N's staged)
    -- I accepts the ACK in time: COMMIT ------------------------------------------
    I closes its copies           N              N             I's           N (handoff)
    I ends the stream             N              N             I's           N
    N sees the end of stream,     N              N: listen()   N's           N
      checks the kernel, installs
    I runs on_deposed, exits      N              N             N's           N

``I`` is the incumbent, ``N`` the newcomer.  Until the commit, N never uses
its copies: it does not ``listen()`` on the listener (which would put its
credentials on the socket) and does not touch the record, so an aborted
handover leaves the incumbent exactly as it was.

**The incumbent** ends AWAIT_ACK in one of two ways (:func:`incumbent_decides`):
a timely ACK commits; anything else (its deadline, the newcomer's REFUSED,
end of stream, a bad frame) keeps the project, and after its deadline it
tells the newcomer so with REFUSED ``late`` (best effort).

**The newcomer** cannot learn the decision from a message alone: the
incumbent may die or stop at any point.  It decides from what it received
and from the kernel (:func:`newcomer_decides`):

* REFUSED: the incumbent kept the project (ABORT);
* end of stream, or the ACK could not be sent: the incumbent committed or
  died.  The kernel tells which: if that process (pid and start time) is
  gone, or no longer has the lock file open, the project is ours (COMMIT,
  with the handoff: nobody else has the state).  Otherwise it is alive and
  kept its copies, so it did not commit (ABORT);
* nothing within the exit deadline: the incumbent is hung (or stopped),
  before its decision or after it but before it ended the stream.  Either
  way it is ended by the verified kill (END_INCUMBENT), after which the
  project is ours.  A committed incumbent ends the stream before its
  ``on_deposed`` runs; the successor then sees to its exit within
  ``exit_grace`` off the critical path (:mod:`highlander._shell.predecessor`).

A committed incumbent always closes its copies of the lock and listener
*before* the newcomer can see the end of stream, so "alive and still has
the lock file open" after the end of stream can only mean it did not commit.
"""

from __future__ import annotations

import enum


class Answer(enum.Enum):
    """What the newcomer heard after sending (or trying to send) ACK_SUCCESSION."""

    #: The incumbent sent REFUSED (its ACK deadline had passed).
    REFUSED = "refused"
    #: End of stream (or a reset) without REFUSED.
    CLOSED = "closed"
    #: The ACK could not be sent: the incumbent's end was already closed.
    SEND_FAILED = "send_failed"
    #: Nothing at all within the exit deadline.
    SILENT = "silent"


class Verdict(enum.Enum):
    """What the newcomer does next."""

    #: The project is ours, with the handoff.
    COMMIT = "commit"
    #: The incumbent keeps the project: close our copies, change nothing.
    ABORT = "abort"
    #: The incumbent is hung holding the project: end it (verified), then COMMIT.
    END_INCUMBENT = "end_incumbent"


class Ending(enum.Enum):
    """How the incumbent's wait for ACK_SUCCESSION ended."""

    ACK_IN_TIME = "ack_in_time"
    DEADLINE = "deadline"
    PEER_REFUSED = "peer_refused"
    PEER_CLOSED = "peer_closed"
    BAD_FRAME = "bad_frame"


class Decision(enum.Enum):
    """The incumbent's decision: the commit, or keeping the project."""

    COMMIT = "commit"
    KEEP = "keep"


def incumbent_decides(ending: Ending) -> Decision:
    """Only a timely ACK_SUCCESSION commits; the incumbent keeps the project otherwise."""
    return Decision.COMMIT if ending is Ending.ACK_IN_TIME else Decision.KEEP


def incumbent_tells(ending: Ending) -> bool:
    """Whether the incumbent sends REFUSED ``late`` (only after its own deadline).

    After the newcomer's REFUSED, its end of stream or a bad frame there is
    nobody to tell, or nothing the newcomer would believe.
    """
    return ending is Ending.DEADLINE


def newcomer_decides(answer: Answer, released: bool) -> Verdict:
    """The newcomer's verdict from what it heard and what the kernel says.

    ``released``: the incumbent is gone, or no longer has the lock file open.
    """
    if answer is Answer.REFUSED:
        return Verdict.ABORT
    if answer is Answer.SILENT:
        return Verdict.END_INCUMBENT
    return Verdict.COMMIT if released else Verdict.ABORT
