"""The lease bound: a holder lets go before etcd could expire its lease (``_core/lease``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from highlander._core import lease
from highlander._core.lease import LeaseClock


def test_the_bound_counts_from_when_the_grant_was_sent() -> None:
    clock = LeaseClock(ttl=5, granted_sent=100.0)
    assert clock.earliest_end == 105.0
    assert clock.valid_until == 104.5
    assert clock.holds(104.49)
    assert not clock.holds(104.5)


def test_an_answered_keepalive_moves_the_bound_to_its_send_time() -> None:
    clock = LeaseClock(ttl=5, granted_sent=0.0)
    clock.renewed(sent=3.0, ttl=5)
    assert clock.earliest_end == 8.0
    assert clock.holds(7.4)
    assert not clock.holds(7.5)


def test_an_old_answer_arriving_late_does_not_move_the_bound_back() -> None:
    clock = LeaseClock(ttl=5, granted_sent=0.0)
    clock.renewed(sent=3.0, ttl=5)
    clock.renewed(sent=1.0, ttl=5)  # a retried request's answer, overtaken
    assert clock.earliest_end == 8.0


def test_a_lease_etcd_says_is_gone_holds_nothing_whatever_the_clock() -> None:
    clock = LeaseClock(ttl=5, granted_sent=0.0)
    clock.renewed(sent=1.0, ttl=0)
    assert clock.gone
    assert not clock.holds(1.0)
    clock.renewed(sent=2.0, ttl=5)  # nothing revives it
    assert not clock.holds(2.0)


def test_a_renewal_counts_the_ttl_etcd_answered() -> None:
    clock = LeaseClock(ttl=5, granted_sent=0.0)
    clock.renewed(sent=1.0, ttl=7)
    assert clock.earliest_end == 8.0
    clock.renewed(sent=9.0, ttl=1)  # a lease about to end is still a lease
    assert not clock.gone
    assert clock.earliest_end == 10.0


def test_a_clock_starts_from_its_own_grant() -> None:
    clock = LeaseClock(ttl=5, granted_sent=-3.0)  # a clock may read below zero
    assert clock.earliest_end == 2.0


def test_keepalives_come_four_times_a_ttl() -> None:
    clock = LeaseClock(ttl=8, granted_sent=0.0)
    assert clock.next_keepalive(last_sent=10.0) == 12.0


@pytest.mark.parametrize(("ttl", "margin"), [(5, 0.5), (2, 0.5), (10, 1.0), (60, 6.0)])
def test_the_margin_is_half_a_second_or_a_tenth_of_the_ttl(ttl: int, margin: float) -> None:
    assert lease.margin_for(ttl) == pytest.approx(margin)


@pytest.mark.parametrize(("ttl", "timeout"), [(5, 0.625), (8, 1.0), (60, 1.0)])
def test_a_keepalive_gives_up_in_an_eighth_of_the_ttl_at_most_a_second(
    ttl: int, timeout: float
) -> None:
    assert lease.request_timeout_for(ttl) == pytest.approx(timeout)


def test_the_shortest_lease_is_five_seconds() -> None:
    assert lease.MIN_TTL == 5
    # Three keepalives may fail, each given up after its timeout, before the holder lets go.
    clock = LeaseClock(ttl=lease.MIN_TTL, granted_sent=0.0)
    tries = 0
    sent = 0.0
    while clock.holds(sent + lease.request_timeout_for(clock.ttl)):
        sent = clock.next_keepalive(sent)
        tries += 1
    assert tries == 4


@given(
    ttl=st.integers(lease.MIN_TTL, 120),
    sends=st.lists(st.tuples(st.floats(0, 1000), st.booleans()), max_size=20),
    now=st.floats(0, 2000),
)
def test_never_holds_past_any_moment_etcd_could_expire_the_lease(
    ttl: int, sends: list[tuple[float, bool]], now: float
) -> None:
    # etcd renews at some moment at or after each answered send; the least
    # such moment is the send itself, so the lease may die at max(answered sends) + ttl.
    clock = LeaseClock(ttl=ttl, granted_sent=0.0)
    answered = [0.0]
    for sent, answer in sends:
        if answer:
            clock.renewed(sent, ttl)
            answered.append(sent)
    if clock.holds(now):
        assert now < max(answered) + ttl - lease.MIN_MARGIN
