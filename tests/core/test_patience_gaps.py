"""How a newcomer charges a silent holder, where `make mutate` (issue #19) found it unpinned.

:meth:`Patience.spares` charges a busy holder the CPU time it used since the
condition began under its record (docs/defaults.md: "until it has used
`ceiling` of CPU time under one record"), not the CPU time it used in its
life, and nothing for a sample the kernel could not give.  Hand-built
:class:`Look` and :class:`Sample` values on a fake clock.
"""

from __future__ import annotations

from highlander._core.deadlines import STARVED_CAP, Sample
from highlander._core.patience import Look, Patience
from tests.support.core import CORE_TIMEOUTS, FakeClock

HOLDER = (4242, 7)
CEILING = CORE_TIMEOUTS.ceiling
#: A holder that has been up for a while: far more CPU behind it than one ceiling.
LIFETIME_CPU = CEILING * 5


def test_a_long_lived_holder_is_charged_only_the_cpu_used_since_the_condition_began(
    clock: FakeClock,
) -> None:
    patience = Patience()
    assert patience.spares(CEILING, Look(clock.now(), HOLDER, Sample("R", LIFETIME_CPU)))
    clock.advance(CEILING)
    within = Look(clock.now(), HOLDER, Sample("R", LIFETIME_CPU + CEILING - 0.5))
    assert patience.spares(CEILING, within)
    beyond = Look(clock.now(), HOLDER, Sample("R", LIFETIME_CPU + CEILING + 0.5))
    assert not patience.spares(CEILING, beyond)


def test_a_holder_first_seen_without_a_sample_is_charged_all_the_cpu_a_later_one_shows(
    clock: FakeClock,
) -> None:
    # No first sample, no baseline: nothing it may have used meanwhile is forgiven.
    patience = Patience()
    assert patience.spares(CEILING, Look(clock.now(), HOLDER, None))
    clock.advance(1.0)
    assert patience.spares(CEILING, Look(clock.now(), HOLDER, Sample("R", CEILING)))
    assert not patience.spares(CEILING, Look(clock.now(), HOLDER, Sample("R", CEILING + 0.5)))


def test_a_holder_the_kernel_shows_no_sample_of_is_charged_no_cpu(clock: FakeClock) -> None:
    # Then only the wall-time cap decides, however short the ceiling.
    ceiling = 0.25
    patience = Patience()
    assert patience.spares(ceiling, Look(clock.now(), HOLDER, None))
    clock.advance(STARVED_CAP * ceiling)
    assert patience.spares(ceiling, Look(clock.now(), HOLDER, None))
    clock.advance(0.01)
    assert not patience.spares(ceiling, Look(clock.now(), HOLDER, None))


def test_without_a_record_no_cpu_is_charged(clock: FakeClock) -> None:
    ceiling = 0.25
    patience = Patience()
    assert patience.spares(ceiling, Look(clock.now(), None, None))
    clock.advance(STARVED_CAP * ceiling + 0.01)
    assert not patience.spares(ceiling, Look(clock.now(), None, None))


def test_busy_is_false_not_merely_falsy_without_a_record(clock: FakeClock) -> None:
    # Declared a bool: None passes every truth test here, and fails any caller that compares.
    patience = Patience()
    assert patience.busy(Look(clock.now(), HOLDER, Sample("R", 1.0))) is False  # never looked
    patience.exceeded(CORE_TIMEOUTS.hello, Look(clock.now(), None, None))
    assert patience.busy(Look(clock.now(), None, Sample("R", 2.0))) is False
