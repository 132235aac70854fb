"""The newcomer's policy, branch by branch, on a fake clock: no process, no socket, no sleep.

Each test hands :meth:`Policy.settle` what an attempt found and what the
shell saw (:class:`Look`: the clock, the holder's record, the kernel's
sample of it) and checks the decision.  The process tests
(test_succession, test_watchdog, test_healthy_holder, test_starved_holder,
test_bounded, ...) check that the shell carries the decisions out.
"""

from __future__ import annotations

import pytest

from highlander._core.deadlines import QUEUED_EVIDENCE, STARVED_CAP, Sample
from highlander._core.findings import (
    Changed,
    Crowded,
    Fresh,
    Impostor,
    Leaving,
    Missed,
    Nobody,
    Starved,
    Transition,
    Unseen,
)
from highlander._core.patience import Look, Patience
from highlander._core.policy import (
    FIRST_DELAY,
    MAX_ATTEMPTS,
    MAX_DELAY,
    MAX_MISMATCHES,
    AwaitExit,
    Backoff,
    Claim,
    EndUnreachable,
    GiveUp,
    Policy,
    Relocate,
    RetryNow,
    Signal,
    Why,
)
from tests.support.core import CORE_TIMEOUTS, FakeClock

HOLDER = (4242, 7)
SUCCESSOR = (4343, 8)
ASLEEP = Sample("S", 0.5)
HELLO = CORE_TIMEOUTS.hello
CEILING = CORE_TIMEOUTS.ceiling
TRANSITION_GRACE = CORE_TIMEOUTS.exit_grace + CORE_TIMEOUTS.term_grace + CORE_TIMEOUTS.hello


@pytest.fixture
def policy() -> Policy:
    return Policy(CORE_TIMEOUTS)


def seen(
    clock: FakeClock,
    holder: tuple[int, int] | None = HOLDER,
    run: Sample | None = ASLEEP,
    **facts: str | bool | None,
) -> Look:
    """What the shell saw now: by default the holder's record, its process asleep."""
    return Look(clock.now(), holder, run, **facts)


def unreachable_past_hello(policy: Policy, clock: FakeClock, **facts: object) -> Look:
    """Nobody listens, for longer than ``hello`` under one holder; the look at that moment."""
    assert isinstance(policy.settle(Nobody(), seen(clock, **facts)), Backoff)
    clock.advance(HELLO + 0.5)
    return seen(clock, **facts)


# -- attempts ------------------------------------------------------------------------------


def test_attempts_are_bounded(policy: Policy) -> None:
    assert all(policy.next_attempt() == Claim() for _ in range(MAX_ATTEMPTS))
    assert policy.next_attempt() == GiveUp(Why.EXHAUSTED)


def test_back_off_doubles_up_to_a_cap(policy: Policy, clock: FakeClock) -> None:
    delays = [policy.settle(Changed(), seen(clock)) for _ in range(10)]
    expected = [min(FIRST_DELAY * 2**i, MAX_DELAY) for i in range(10)]
    assert delays == [Backoff(d) for d in expected]


def test_retry_at_once_does_not_grow_the_back_off(policy: Policy, clock: FakeClock) -> None:
    assert policy.settle(Impostor(1, "uid"), seen(clock)) == RetryNow()
    assert policy.settle(Changed(), seen(clock)) == Backoff(FIRST_DELAY)


# -- a holder that answered ----------------------------------------------------------------


def test_busy_waits_for_the_leaving_holder(policy: Policy, clock: FakeClock) -> None:
    assert policy.settle(Leaving(99), seen(clock)) == AwaitExit(99, CORE_TIMEOUTS.stall)


@pytest.mark.parametrize("halted", [False, True])
def test_a_missed_deadline_ends_the_holder(policy: Policy, clock: FakeClock, halted: bool) -> None:
    assert policy.settle(Missed("stall", halted), seen(clock)) == Signal("stall", halted)


# -- a silent holder -----------------------------------------------------------------------


def test_a_fresh_holder_gets_one_more_connection_per_generation(
    policy: Policy, clock: FakeClock
) -> None:
    assert policy.settle(Fresh(7), seen(clock)) == Backoff(FIRST_DELAY)
    assert policy.settle(Fresh(7), seen(clock)) == Signal("hello")
    assert isinstance(policy.settle(Fresh(8), seen(clock)), Backoff)


def test_a_holder_nobody_can_look_at_gets_the_same_one_pardon_per_generation(
    policy: Policy, clock: FakeClock
) -> None:
    # On another host: one more connection, then it counts as hung (a fence).
    assert policy.settle(Unseen(7), seen(clock)) == Backoff(FIRST_DELAY)
    assert policy.settle(Unseen(7), seen(clock)) == Signal("hello")
    # The pardon is the generation's, however it was earned.
    assert isinstance(policy.settle(Fresh(8), seen(clock)), Backoff)
    assert policy.settle(Unseen(8), seen(clock)) == Signal("hello")
    assert isinstance(policy.settle(Unseen(9), seen(clock)), Backoff)


def test_a_starved_holder_is_spared_while_it_uses_little_cpu(
    policy: Policy, clock: FakeClock
) -> None:
    assert isinstance(policy.settle(Starved(), seen(clock, run=Sample("R", 0.0))), Backoff)
    clock.advance(CEILING * STARVED_CAP - 1)  # seconds of wall time, almost no CPU
    assert isinstance(policy.settle(Starved(), seen(clock, run=Sample("R", 0.1))), Backoff)


def test_a_starved_holder_that_spins_past_the_ceiling_is_ended(
    policy: Policy, clock: FakeClock
) -> None:
    policy.settle(Starved(), seen(clock, run=Sample("R", 0.0)))
    clock.advance(CEILING + 1)
    spun = Sample("R", CEILING + 1)
    assert policy.settle(Starved(), seen(clock, run=spun)) == Signal("hello")


def test_a_starved_holder_is_spared_a_bounded_wall_time(policy: Policy, clock: FakeClock) -> None:
    policy.settle(Starved(), seen(clock, run=Sample("R", 0.0)))
    clock.advance(CEILING * STARVED_CAP + 1)
    assert policy.settle(Starved(), seen(clock, run=Sample("R", 0.0))) == Signal("hello")


def test_a_new_holder_restarts_the_starved_clock(policy: Policy, clock: FakeClock) -> None:
    policy.settle(Starved(), seen(clock, run=Sample("R", 0.0)))
    clock.advance(CEILING * STARVED_CAP + 1)
    assert isinstance(policy.settle(Starved(), seen(clock, SUCCESSOR, Sample("R", 0.0))), Backoff)


# -- a listener that is not (yet) the holder -----------------------------------------------


def test_a_persistent_mismatch_under_one_holder_is_foreign(
    policy: Policy, clock: FakeClock
) -> None:
    decisions = [policy.settle(Impostor(5, "uid"), seen(clock)) for _ in range(MAX_MISMATCHES)]
    assert decisions == [RetryNow()] * (MAX_MISMATCHES - 1) + [GiveUp(Why.IMPOSTOR)]


def test_mismatches_under_different_holders_do_not_add_up(policy: Policy, clock: FakeClock) -> None:
    for holder in [(1, 1), (2, 2), (3, 3), (4, 4)]:
        assert policy.settle(Impostor(5, "uid"), seen(clock, holder)) == RetryNow()


def test_a_handover_in_flight_is_waited_for_then_named(policy: Policy, clock: FakeClock) -> None:
    assert policy.settle(Transition(5, 6), seen(clock)) == Backoff(FIRST_DELAY)
    clock.advance(TRANSITION_GRACE)
    assert isinstance(policy.settle(Transition(5, 6), seen(clock)), Backoff)
    clock.advance(0.01)
    assert policy.settle(Transition(5, 6), seen(clock)) == GiveUp(Why.SILENT)


def test_a_new_record_restarts_the_transition_grace(policy: Policy, clock: FakeClock) -> None:
    policy.settle(Transition(5, 6), seen(clock))
    clock.advance(TRANSITION_GRACE + 1)
    assert isinstance(policy.settle(Transition(5, 6), seen(clock, SUCCESSOR)), Backoff)


# -- nobody listens, or nobody accepts -----------------------------------------------------


def test_no_socket_is_waited_for_up_to_hello(policy: Policy, clock: FakeClock) -> None:
    assert isinstance(policy.settle(Nobody(), seen(clock)), Backoff)
    clock.advance(HELLO)
    assert isinstance(policy.settle(Nobody(), seen(clock)), Backoff)


def test_past_hello_the_policy_first_asks_whether_the_socket_moved(
    policy: Policy, clock: FakeClock
) -> None:
    look = unreachable_past_hello(policy, clock)
    assert policy.settle(Nobody(), look) == Relocate()
    assert policy.settle(Nobody(), look._replace(moved=True)) == RetryNow()


def test_asking_again_with_the_answer_changes_no_count(policy: Policy, clock: FakeClock) -> None:
    look = unreachable_past_hello(policy, clock)
    assert policy.settle(Nobody(), look) == Relocate()
    decision = policy.settle(Nobody(), look._replace(moved=False))
    assert decision == EndUnreachable(queue_full=False, seen=HOLDER)


def test_an_idle_socketless_holder_is_ended_then_given_patience_again(
    policy: Policy, clock: FakeClock
) -> None:
    look = unreachable_past_hello(policy, clock, moved=False)
    assert policy.settle(Nobody(), look) == EndUnreachable(False, HOLDER)
    assert isinstance(policy.settle(Nobody(), look), Backoff)  # its patience starts afresh


def test_a_socketless_holder_without_a_record_is_not_called_busy(
    policy: Policy, clock: FakeClock
) -> None:
    look = unreachable_past_hello(policy, clock, holder=None, run=None, moved=False)
    assert policy.settle(Nobody(), look) == EndUnreachable(False, None)


def test_a_working_socketless_holder_gets_cpu_time(policy: Policy, clock: FakeClock) -> None:
    look = unreachable_past_hello(policy, clock, run=Sample("R", 0.0), moved=False)
    expected = Backoff(FIRST_DELAY * 2, pause=min(0.1, HELLO))
    assert policy.settle(Nobody(), look) == expected


def test_a_socketless_holder_that_spins_is_ended(policy: Policy, clock: FakeClock) -> None:
    look = unreachable_past_hello(policy, clock, run=Sample("R", 0.0), moved=False)
    policy.settle(Nobody(), look)  # busy: spared, its CPU counted from here
    clock.advance(CEILING)
    spun = seen(clock, run=Sample("R", CEILING + 1), moved=False)
    assert policy.settle(Nobody(), spun) == EndUnreachable(False, HOLDER)


def test_busy_compares_with_the_last_sample_not_the_first(clock: FakeClock) -> None:
    patience = Patience()
    patience.exceeded(HELLO, seen(clock, run=Sample("S", 0.0)))
    assert patience.busy(seen(clock, run=Sample("S", 0.05)))  # gained CPU time since the first look
    assert not patience.busy(seen(clock, run=Sample("S", 0.05)))  # and none since the last


def test_busy_counts_time_queued_for_a_cpu(clock: FakeClock) -> None:
    """Asleep at both looks, no CPU gained, but kept waiting for a CPU meanwhile: starved."""
    patience = Patience()
    patience.exceeded(HELLO, seen(clock, run=Sample("S", 0.0, 0.0)))
    assert patience.busy(seen(clock, run=Sample("S", 0.0, QUEUED_EVIDENCE)))
    assert not patience.busy(seen(clock, run=Sample("S", 0.0, QUEUED_EVIDENCE * 1.5)))


def test_a_directory_at_the_socket_path_is_named_not_blamed(
    policy: Policy, clock: FakeClock
) -> None:
    blocked = seen(clock, blocker="a directory")
    assert isinstance(policy.settle(Nobody(), blocked), Backoff)
    clock.advance(HELLO + 0.5)
    assert policy.settle(Nobody(), seen(clock, blocker="a directory")) == GiveUp(Why.BLOCKED)


def test_time_blocked_does_not_count_against_the_holder(policy: Policy, clock: FakeClock) -> None:
    policy.settle(Nobody(), seen(clock))
    clock.advance(HELLO - 0.1)
    policy.settle(Nobody(), seen(clock, blocker="a directory"))  # restarts the holder's patience
    clock.advance(0.5)
    assert isinstance(policy.settle(Nobody(), seen(clock)), Backoff)


def test_a_full_queue_is_waited_for_then_its_holder_ended(policy: Policy, clock: FakeClock) -> None:
    assert isinstance(policy.settle(Crowded(), seen(clock)), Backoff)
    clock.advance(HELLO + 0.5)
    # Neither a blocker nor a moved socket matters: something accepts at the path.
    full = seen(clock, blocker="a directory")
    assert policy.settle(Crowded(), full) == EndUnreachable(queue_full=True, seen=HOLDER)


def test_a_new_holder_restarts_the_socketless_patience(policy: Policy, clock: FakeClock) -> None:
    policy.settle(Nobody(), seen(clock))
    clock.advance(HELLO + 0.5)
    assert isinstance(policy.settle(Nobody(), seen(clock, SUCCESSOR)), Backoff)
