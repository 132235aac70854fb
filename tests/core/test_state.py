"""The state machine is exactly its table: everything else is an error, for good."""

from __future__ import annotations

import itertools

import pytest

from highlander._core.deadlines import Phase
from highlander._core.errors import LocalProtocolError, RemoteProtocolError
from highlander._core.messages import MESSAGE_TYPES
from highlander._core.state import (
    ENDINGS,
    INITIAL,
    TRANSITIONS,
    WAITING,
    Move,
    Role,
    State,
    StateMachine,
)

NEWCOMER_STATES = frozenset(
    {
        State.AWAIT_HELLO,
        State.READY,
        State.AWAIT_SAVED,
        State.AWAIT_STATUS,
        State.AWAIT_ATTACHED,
        State.MUST_ACK,
        State.AWAIT_EXIT,
    }
)
INCUMBENT_STATES = frozenset(
    {
        State.SEND_HELLO,
        State.AWAIT_REQUEST,
        State.SAVING,
        State.REPLYING,
        State.ADMITTING,
        State.AWAIT_ACK,
        State.DEPOSED,
    }
)
SHARED_STATES = frozenset({State.RELAYING, State.DONE, State.CLOSED, State.ERROR})
ROLE_STATES = {
    Role.NEWCOMER: NEWCOMER_STATES | SHARED_STATES,
    Role.INCUMBENT: INCUMBENT_STATES | SHARED_STATES,
}

ALL_COMBINATIONS = list(itertools.product(Role, State, Move, sorted(MESSAGE_TYPES)))
LIVE_COMBINATIONS = [c for c in ALL_COMBINATIONS if c[1] is not State.ERROR]
LEGAL = [c for c in LIVE_COMBINATIONS if c in TRANSITIONS]
ILLEGAL = [c for c in LIVE_COMBINATIONS if c not in TRANSITIONS]


def _id(combo: tuple[Role, State, Move, str]) -> str:
    role, state, event, kind = combo
    return f"{role.value}-{state.value}-{event.value}-{kind}"


def _machine(role: Role, state: State) -> StateMachine:
    machine = StateMachine(role)
    machine.move(state)
    assert machine.state is state
    return machine


def test_state_sets_partition_the_enum() -> None:
    assert set(State) == NEWCOMER_STATES | INCUMBENT_STATES | SHARED_STATES
    assert not NEWCOMER_STATES & INCUMBENT_STATES


def test_enumeration_is_complete() -> None:
    assert len(ALL_COMBINATIONS) == 2 * len(State) * 2 * 11
    assert len(LEGAL) == len(TRANSITIONS) == 32
    assert len(LEGAL) + len(ILLEGAL) == len(ALL_COMBINATIONS) - 2 * 2 * 11


def test_initial_states() -> None:
    assert INITIAL == {Role.NEWCOMER: State.AWAIT_HELLO, Role.INCUMBENT: State.SEND_HELLO}
    assert StateMachine(Role.NEWCOMER).state is State.AWAIT_HELLO
    assert StateMachine(Role.INCUMBENT).state is State.SEND_HELLO


def test_transitions_table_is_well_formed() -> None:
    for (role, state, _, kind), target in TRANSITIONS.items():
        assert kind in MESSAGE_TYPES
        assert state in ROLE_STATES[role] - SHARED_STATES
        assert target in ROLE_STATES[role] - {State.CLOSED, State.ERROR}


def test_each_role_sends_what_the_other_receives() -> None:
    for role in Role:
        sent = {k for (r, _, e, k) in TRANSITIONS if r is role and e is Move.SENT}
        received_by_peer = {
            k for (r, _, e, k) in TRANSITIONS if r is role.peer and e is Move.RECEIVED
        }
        assert sent == received_by_peer


@pytest.mark.parametrize("combo", LEGAL, ids=_id)
def test_legal_transition_returns_table_target(combo: tuple[Role, State, Move, str]) -> None:
    role, state, event, kind = combo
    machine = _machine(role, state)
    assert machine.next_state(event, kind) is TRANSITIONS[combo]
    # next_state only computes; the caller moves.
    assert machine.state is state


@pytest.mark.parametrize("combo", ILLEGAL, ids=_id)
def test_illegal_transition_raises_and_errors(combo: tuple[Role, State, Move, str]) -> None:
    role, state, event, kind = combo
    machine = _machine(role, state)
    with pytest.raises(LocalProtocolError if event is Move.SENT else RemoteProtocolError) as info:
        machine.next_state(event, kind)
    if event is Move.RECEIVED:
        assert not isinstance(info.value, LocalProtocolError)
        assert str(info.value) == (
            f"{role.peer.value} sent {kind}, which is illegal while the "
            f"{role.value} is in state {state.value}"
        )
    else:
        assert str(info.value) == f"{role.value} cannot send {kind} in state {state.value}"
    assert machine.state is State.ERROR


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_error_is_final(role: Role) -> None:
    machine = StateMachine(role)
    with pytest.raises(RemoteProtocolError):
        machine.next_state(Move.RECEIVED, "ACK_SUCCESSION" if role is Role.NEWCOMER else "HELLO")
    assert machine.state is State.ERROR
    for event, kind in itertools.product(Move, sorted(MESSAGE_TYPES)):
        with pytest.raises(LocalProtocolError, match="already failed"):
            machine.next_state(event, kind)
        assert machine.state is State.ERROR


@pytest.mark.parametrize(
    "combo",
    [c for c in ALL_COMBINATIONS if c[1] is State.ERROR],
    ids=_id,
)
def test_anything_in_error_is_a_local_error(combo: tuple[Role, State, Move, str]) -> None:
    role, state, event, kind = combo
    machine = _machine(role, state)
    with pytest.raises(LocalProtocolError) as info:
        machine.next_state(event, kind)
    assert "already failed; open a new one" in str(info.value)
    assert machine.state is State.ERROR


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
@pytest.mark.parametrize("state", [State.DONE, State.CLOSED], ids=lambda s: s.value)
def test_terminal_states_accept_nothing(role: Role, state: State) -> None:
    for event, kind in itertools.product(Move, sorted(MESSAGE_TYPES)):
        assert (role, state, event, kind) not in TRANSITIONS


def test_waiting_maps_only_states_of_the_right_role() -> None:
    for (role, state), phase in WAITING.items():
        own = NEWCOMER_STATES if role is Role.NEWCOMER else INCUMBENT_STATES
        assert state in own, (role, state)
        assert isinstance(phase, Phase)


def test_waiting_phases_exactly() -> None:
    assert WAITING == {
        (Role.NEWCOMER, State.AWAIT_HELLO): Phase.HELLO,
        (Role.NEWCOMER, State.AWAIT_SAVED): Phase.STALL,
        (Role.NEWCOMER, State.AWAIT_STATUS): Phase.REPLY,
        (Role.NEWCOMER, State.AWAIT_ATTACHED): Phase.REPLY,
        (Role.NEWCOMER, State.AWAIT_EXIT): Phase.EXIT,
        (Role.INCUMBENT, State.AWAIT_REQUEST): Phase.REQUEST,
        (Role.INCUMBENT, State.AWAIT_ACK): Phase.ACK,
    }


def test_every_state_that_can_receive_waits_for_the_peer() -> None:
    # A state in which the peer owes a move must have a watchdog phase.
    for role, state, event, _ in TRANSITIONS:
        sends = any(r is role and s is state and e is Move.SENT for r, s, e, _ in TRANSITIONS)
        if event is Move.RECEIVED and not sends:
            assert (role, state) in WAITING, (role, state)


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
@pytest.mark.parametrize("state", list(State), ids=lambda s: s.value)
def test_waiting_for_matches_table(role: Role, state: State) -> None:
    assert _machine(role, state).waiting_for is WAITING.get((role, state))


def test_endings() -> None:
    assert frozenset({State.DONE, State.DEPOSED, State.AWAIT_EXIT, State.RELAYING}) == ENDINGS


def test_role_peer() -> None:
    assert Role.NEWCOMER.peer is Role.INCUMBENT
    assert Role.INCUMBENT.peer is Role.NEWCOMER


def _walk(role: Role, steps: list[tuple[Move, str]]) -> StateMachine:
    machine = StateMachine(role)
    for event, kind in steps:
        machine.move(machine.next_state(event, kind))
    return machine


def test_full_succession_walk() -> None:
    newcomer = _walk(
        Role.NEWCOMER,
        [
            (Move.RECEIVED, "HELLO"),
            (Move.SENT, "SAVE"),
            (Move.RECEIVED, "PROGRESS"),
            (Move.RECEIVED, "PROGRESS"),
            (Move.RECEIVED, "SAVED"),
            (Move.SENT, "ACK_SUCCESSION"),
        ],
    )
    assert newcomer.state is State.AWAIT_EXIT
    incumbent = _walk(
        Role.INCUMBENT,
        [
            (Move.SENT, "HELLO"),
            (Move.RECEIVED, "SAVE"),
            (Move.SENT, "PROGRESS"),
            (Move.SENT, "SAVED"),
            (Move.RECEIVED, "ACK_SUCCESSION"),
        ],
    )
    assert incumbent.state is State.DEPOSED
