"""The succession state machines, as data.

Theory of operation
===================

Two roles talk over one connection.  The INCUMBENT holds the project and
listens; a NEWCOMER connects.  Each side runs its own copy of this machine and
tracks only its own state; the peer's moves arrive as received messages.

A successful succession::

    NEWCOMER                                INCUMBENT
    AWAIT_HELLO   <------ HELLO -------     SEND_HELLO -> AWAIT_REQUEST
    READY         ------- SAVE  ------->    SAVING
    AWAIT_SAVED   <---- PROGRESS* -----     SAVING
    MUST_ACK      <------ SAVED -------     AWAIT_ACK
    AWAIT_EXIT    -- ACK_SUCCESSION -->     DEPOSED
    CLOSED        <------ (EOF) -------     (releases the project, leaves)

Other endings: the incumbent answers SAVE with BUSY (another succession is
running) or REFUSED; a STATUS query gets STATUS_REPLY (or REFUSED).  Both
end in DONE.

Sharing instead (:mod:`highlander._core.sharing`)::

    READY         ------ ATTACH ------->    ADMITTING
    RELAYING      <----- ATTACHED -----     RELAYING
                  (the client's JSON-RPC, unframed, both ways)

ATTACH answered with BUSY (a succession is running) or REFUSED ends in
DONE; RELAYING is an ending too: no frame may follow ATTACHED.

The handover commits exactly once, at the incumbent (see
:mod:`highlander._core.commit`).  After SAVED either side may still decline:

* the newcomer answers SAVED with REFUSED when it cannot prepare its
  takeover (no space for its record, say): both end in DONE and the
  incumbent keeps the project;
* the incumbent whose ACK deadline passed sends REFUSED (``late``) and keeps
  the project; an ACK_SUCCESSION that crossed it is void, and the newcomer
  in AWAIT_EXIT that receives it ends in DONE without holding.

End of stream moves any state to CLOSED; the ``expected`` flag of the
:class:`~highlander._core.connection.Closed` event says whether the conversation
had reached an ending.

The whole protocol is :data:`TRANSITIONS`: ``(role, state, move, message
type) -> next state``, where the :class:`Move` says whether this side SENT
or RECEIVED the message.  Anything not in the table is illegal: sending it is a
:class:`LocalProtocolError` (our bug), receiving it a
:class:`RemoteProtocolError` (the peer's), and either way the side goes to
ERROR for good.  :data:`WAITING` says which watchdog :class:`Phase` each
state waits in; states not listed wait for nothing from the peer.

Pure code, like h11's ``_state.py``: no I/O, no clock.
"""

from __future__ import annotations

import enum

from highlander._core.deadlines import Phase
from highlander._core.errors import LocalProtocolError, RemoteProtocolError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Final


class Role(enum.Enum):
    """Which side of the conversation this machine plays."""

    NEWCOMER = "newcomer"
    INCUMBENT = "incumbent"

    @property
    def peer(self) -> Role:
        """The other role."""
        return Role.INCUMBENT if self is Role.NEWCOMER else Role.NEWCOMER


class State(enum.Enum):
    """Conversation states of both roles (each role uses its own subset)."""

    # newcomer
    AWAIT_HELLO = "AWAIT_HELLO"
    READY = "READY"
    AWAIT_SAVED = "AWAIT_SAVED"
    AWAIT_STATUS = "AWAIT_STATUS"
    AWAIT_ATTACHED = "AWAIT_ATTACHED"
    MUST_ACK = "MUST_ACK"
    AWAIT_EXIT = "AWAIT_EXIT"
    # incumbent
    SEND_HELLO = "SEND_HELLO"
    AWAIT_REQUEST = "AWAIT_REQUEST"
    SAVING = "SAVING"
    REPLYING = "REPLYING"
    ADMITTING = "ADMITTING"
    AWAIT_ACK = "AWAIT_ACK"
    DEPOSED = "DEPOSED"
    # both
    RELAYING = "RELAYING"
    DONE = "DONE"
    CLOSED = "CLOSED"
    ERROR = "ERROR"


class Move(enum.Enum):
    """Whether this side sent or received the message."""

    SENT = "sent"
    RECEIVED = "received"


NEW, INC = Role.NEWCOMER, Role.INCUMBENT
SENT, RECEIVED = Move.SENT, Move.RECEIVED
S = State

INITIAL: Final[dict[Role, State]] = {NEW: S.AWAIT_HELLO, INC: S.SEND_HELLO}

TRANSITIONS: Final[dict[tuple[Role, State, Move, str], State]] = {
    # newcomer
    (NEW, S.AWAIT_HELLO, RECEIVED, "HELLO"): S.READY,
    (NEW, S.READY, SENT, "SAVE"): S.AWAIT_SAVED,
    (NEW, S.READY, SENT, "STATUS"): S.AWAIT_STATUS,
    (NEW, S.READY, SENT, "ATTACH"): S.AWAIT_ATTACHED,
    (NEW, S.AWAIT_ATTACHED, RECEIVED, "ATTACHED"): S.RELAYING,
    (NEW, S.AWAIT_ATTACHED, RECEIVED, "BUSY"): S.DONE,
    (NEW, S.AWAIT_ATTACHED, RECEIVED, "REFUSED"): S.DONE,
    (NEW, S.AWAIT_SAVED, RECEIVED, "PROGRESS"): S.AWAIT_SAVED,
    (NEW, S.AWAIT_SAVED, RECEIVED, "SAVED"): S.MUST_ACK,
    (NEW, S.AWAIT_SAVED, RECEIVED, "BUSY"): S.DONE,
    (NEW, S.AWAIT_SAVED, RECEIVED, "REFUSED"): S.DONE,
    (NEW, S.MUST_ACK, SENT, "ACK_SUCCESSION"): S.AWAIT_EXIT,
    (NEW, S.MUST_ACK, SENT, "REFUSED"): S.DONE,
    (NEW, S.AWAIT_EXIT, RECEIVED, "REFUSED"): S.DONE,
    (NEW, S.AWAIT_STATUS, RECEIVED, "STATUS_REPLY"): S.DONE,
    (NEW, S.AWAIT_STATUS, RECEIVED, "REFUSED"): S.DONE,
    # incumbent
    (INC, S.SEND_HELLO, SENT, "HELLO"): S.AWAIT_REQUEST,
    (INC, S.AWAIT_REQUEST, RECEIVED, "SAVE"): S.SAVING,
    (INC, S.AWAIT_REQUEST, RECEIVED, "STATUS"): S.REPLYING,
    (INC, S.AWAIT_REQUEST, RECEIVED, "ATTACH"): S.ADMITTING,
    (INC, S.ADMITTING, SENT, "ATTACHED"): S.RELAYING,
    (INC, S.ADMITTING, SENT, "BUSY"): S.DONE,
    (INC, S.ADMITTING, SENT, "REFUSED"): S.DONE,
    (INC, S.SAVING, SENT, "PROGRESS"): S.SAVING,
    (INC, S.SAVING, SENT, "SAVED"): S.AWAIT_ACK,
    (INC, S.SAVING, SENT, "BUSY"): S.DONE,
    (INC, S.SAVING, SENT, "REFUSED"): S.DONE,
    (INC, S.REPLYING, SENT, "STATUS_REPLY"): S.DONE,
    (INC, S.REPLYING, SENT, "REFUSED"): S.DONE,
    (INC, S.AWAIT_ACK, RECEIVED, "ACK_SUCCESSION"): S.DEPOSED,
    (INC, S.AWAIT_ACK, RECEIVED, "REFUSED"): S.DONE,
    (INC, S.AWAIT_ACK, SENT, "REFUSED"): S.DONE,
}

#: States where the conversation has reached an ending; end of stream is expected.
ENDINGS: Final[frozenset[State]] = frozenset({S.DONE, S.DEPOSED, S.AWAIT_EXIT, S.RELAYING})

WAITING: Final[dict[tuple[Role, State], Phase]] = {
    (NEW, S.AWAIT_HELLO): Phase.HELLO,
    (NEW, S.AWAIT_SAVED): Phase.STALL,
    (NEW, S.AWAIT_STATUS): Phase.REPLY,
    (NEW, S.AWAIT_ATTACHED): Phase.REPLY,
    (NEW, S.AWAIT_EXIT): Phase.EXIT,
    (INC, S.AWAIT_REQUEST): Phase.REQUEST,
    (INC, S.AWAIT_ACK): Phase.ACK,
}


class StateMachine:
    """One side's position in the conversation; moves only through :data:`TRANSITIONS`."""

    def __init__(self, role: Role) -> None:
        self.role = role
        self.state = INITIAL[role]

    def next_state(self, move: Move, message_type: str) -> State:
        """Return where ``move`` of ``message_type`` would lead, or raise if illegal.

        Raising puts the machine in ERROR.
        """
        target = TRANSITIONS.get((self.role, self.state, move, message_type))
        if target is not None:
            return target
        was = self.state
        self.state = State.ERROR
        if was is State.ERROR:
            raise LocalProtocolError(
                "this connection already failed; open a new one instead of reusing it"
            )
        if move is Move.SENT:
            raise LocalProtocolError(
                f"{self.role.value} cannot send {message_type} in state {was.value}"
            )
        raise RemoteProtocolError(
            f"{self.role.peer.value} sent {message_type}, which is illegal "
            f"while the {self.role.value} is in state {was.value}"
        )

    def move(self, state: State) -> None:
        """Enter ``state`` (one returned by :meth:`next_state`, or CLOSED/ERROR)."""
        self.state = state

    @property
    def waiting_for(self) -> Phase | None:
        """The watchdog phase of the current state, if the peer owes a move."""
        return WAITING.get((self.role, self.state))
