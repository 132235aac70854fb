"""The newcomer's policy where mutation testing (`make mutate`, issue #19) found it unpinned.

The limits docs/defaults.md promises (how many attempts, how many failed
verifications, how long a pause) are read from its Limits table and checked
against what :class:`Policy` does, not against its constants: a test that
imports ``MAX_ATTEMPTS`` moves with it.  The rest pins defaults the shell acts
on (a ``Backoff``'s ``pause``, a ``Signal``'s ``halted``) and the restart of
the blocked-socket patience.
"""

from __future__ import annotations

import re

import pytest

from highlander._core.deadlines import Sample
from highlander._core.findings import (
    Changed,
    Fresh,
    Impostor,
    Nobody,
    Starved,
    Transition,
)
from highlander._core.patience import Look
from highlander._core.policy import (
    Backoff,
    Claim,
    GiveUp,
    Policy,
    RetryNow,
    Signal,
    Why,
)
from tests.support.core import CORE_TIMEOUTS, FakeClock
from tests.support.paths import DOCS

HOLDER = (4242, 7)
ASLEEP = Sample("S", 0.5)
HELLO = CORE_TIMEOUTS.hello
CEILING = CORE_TIMEOUTS.ceiling
BLOCKER = "a directory"


def _documented(name: str) -> str:
    """The value docs/defaults.md's Limits table gives the row ``name``."""
    text = (DOCS / "defaults.md").read_text(encoding="utf-8")
    section = re.search(r"^## Limits\n(.*?)(?=^#)", text, re.S | re.M)
    assert section, "no Limits section in docs/defaults.md"
    for line in section.group(1).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] == name:
            return cells[1]
    raise AssertionError(f"no Limits row {name!r} in docs/defaults.md")


def _number(pattern: str, name: str) -> float:
    match = re.search(pattern, _documented(name))
    assert match, (pattern, _documented(name))
    return float(match.group(1))


ATTEMPTS = int(
    _number(r"^(\d+), each bounded", "a newcomer's attempts to hold the project, per `acquire()`")
)
PAUSES = "a newcomer's pause between two attempts that found nothing to act on"
FIRST_PAUSE = _number(r"^(\d+) ms, doubling", PAUSES) / 1000
LONGEST_PAUSE = _number(r"up to (\d+) ms$", PAUSES) / 1000
MISMATCHES = int(
    _number(
        r"the (\d+)(?:st|nd|rd|th) failure gives up",
        "a process at the socket that fails verification, under one holder's record "
        "(a connection made during a handover sees the predecessor's credentials)",
    )
)


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


# -- the documented limits -----------------------------------------------------------------


def test_a_newcomer_makes_exactly_the_documented_number_of_attempts(policy: Policy) -> None:
    claims = 0
    while policy.next_attempt() == Claim():
        claims += 1
        assert claims <= ATTEMPTS, "more attempts than documented"
    assert claims == ATTEMPTS
    assert policy.next_attempt() == GiveUp(Why.EXHAUSTED)  # and it stays exhausted


def test_the_documented_failed_verification_gives_up_and_the_one_before_asks_again(
    policy: Policy, clock: FakeClock
) -> None:
    decisions = [policy.settle(Impostor(5, "uid"), seen(clock)) for _ in range(MISMATCHES)]
    assert decisions[:-1] == [RetryNow()] * (MISMATCHES - 1)
    assert decisions[-1] == GiveUp(Why.IMPOSTOR)


def test_pauses_double_from_the_documented_first_up_to_the_documented_longest(
    policy: Policy, clock: FakeClock
) -> None:
    decisions = [policy.settle(Changed(), seen(clock)) for _ in range(10)]
    expected = [min(FIRST_PAUSE * 2**i, LONGEST_PAUSE) for i in range(10)]
    assert all(isinstance(d, Backoff) for d in decisions), decisions
    assert [d.delay for d in decisions if isinstance(d, Backoff)] == pytest.approx(expected)
    assert expected[-1] == LONGEST_PAUSE  # ten pauses reach the cap


# -- the defaults the shell acts on --------------------------------------------------------


def test_a_backoff_for_anything_but_a_working_holder_has_no_pause(
    policy: Policy, clock: FakeClock
) -> None:
    # The shell sleeps `pause` whenever it is not 0: every other wait is the delay alone.
    setbacks = [
        policy.settle(Changed(), seen(clock)),
        policy.settle(Fresh(7), seen(clock)),
        policy.settle(Transition(5, 6), seen(clock)),
        policy.settle(Starved(), seen(clock, run=Sample("R", 0.0))),
        policy.settle(Nobody(), seen(clock, blocker=BLOCKER)),
        policy.settle(Nobody(), seen(clock)),
    ]
    assert all(isinstance(b, Backoff) and b.pause == 0.0 for b in setbacks), setbacks


def test_a_silent_holder_past_its_pardon_is_signalled_as_not_halted(
    policy: Policy, clock: FakeClock
) -> None:
    # halted=True would let the kill spare it as "resumed after a stop" though it never stopped.
    policy.settle(Fresh(7), seen(clock))
    assert policy.settle(Fresh(7), seen(clock)) == Signal("hello", halted=False)


def test_a_starved_holder_that_spun_past_the_ceiling_is_signalled_as_not_halted(
    policy: Policy, clock: FakeClock
) -> None:
    policy.settle(Starved(), seen(clock, run=Sample("R", 0.0)))
    clock.advance(CEILING + 1)
    spun = seen(clock, run=Sample("R", CEILING + 1))
    assert policy.settle(Starved(), spun) == Signal("hello", halted=False)


# -- a blocked socket path -----------------------------------------------------------------


def test_a_blocker_that_comes_back_gets_a_fresh_hello_window(
    policy: Policy, clock: FakeClock
) -> None:
    assert isinstance(policy.settle(Nobody(), seen(clock, blocker=BLOCKER)), Backoff)
    clock.advance(HELLO / 2)
    assert isinstance(policy.settle(Nobody(), seen(clock)), Backoff)  # it went away
    clock.advance(HELLO * 0.8)  # past hello since it first stood, not since it came back
    assert isinstance(policy.settle(Nobody(), seen(clock, blocker=BLOCKER)), Backoff)
    clock.advance(HELLO + 0.1)
    assert policy.settle(Nobody(), seen(clock, blocker=BLOCKER)) == GiveUp(Why.BLOCKED)
