"""The newcomer's policy: after a failed attempt, wait, retry, signal, or give up.

Pure, like the protocol core: :mod:`highlander._shell.newcomer` makes an attempt,
names what it found (a :class:`~highlander._core.findings.Setback`), samples the clock, the holder's
record and the kernel once (:class:`~highlander._core.patience.Look`), and asks
:meth:`Policy.settle`, which returns one :class:`Action`.  The shell only
executes actions; every branch here is unit-tested with a fake clock
(``tests/core/test_policy.py``).  :mod:`highlander._shell.retrying` runs it.
"""

from __future__ import annotations

import enum

from highlander._core.deadlines import Phase, Timeouts
from highlander._core.findings import (
    Crowded,
    Fresh,
    Impostor,
    Leaving,
    Missed,
    Nobody,
    Setback,
    Starved,
    Transition,
    Unseen,
)
from highlander._core.patience import Look, Patience
from highlander._core.values import Value

#: Upper bound on acquisition attempts (each one is itself bounded by deadlines).
MAX_ATTEMPTS = 200
#: Identity mismatches tolerated (a handover in flight) before the holder is called foreign.
MAX_MISMATCHES = 3
#: The first and the longest pause between two attempts that found nothing to act on.
FIRST_DELAY, MAX_DELAY = 0.001, 0.05


class Action(Value):
    """What the shell does next."""


class Claim(Action):
    """Make the next attempt: claim a free project, or talk to its holder."""


class RetryNow(Action):
    """Make the next attempt at once."""


class Backoff(Action):
    """Pause ``pause`` (a busy holder: look again soon), then ``delay``, then try again."""

    delay: float
    pause: float = 0.0


class AwaitExit(Action):
    """Wait up to ``within`` for ``pid`` to exit (a pidfd, no polling), then try again at once."""

    pid: int
    within: float


class Signal(Action):
    """End the verified holder the setback names (it missed ``phase``), then try again at once."""

    phase: str
    halted: bool = False


class EndUnreachable(Action):
    """End the holder nobody can reach, if it is still the one ``seen`` (pid, generation)."""

    queue_full: bool
    seen: tuple[int, int] | None


class Relocate(Action):
    """Ask whether the runtime directory moved the socket; settle again with ``Look.moved``."""


class Why(enum.Enum):
    """Why the newcomer gives up."""

    IMPOSTOR = "impostor"  # a mismatch that persists under one holder is not a handover
    SILENT = "silent"  # a listener nobody's record names stays silent past every grace
    BLOCKED = "blocked"  # something nobody can publish over stands at the socket path
    EXHAUSTED = "exhausted"  # MAX_ATTEMPTS bounded attempts, none conclusive


class GiveUp(Action):
    """Stop trying: raise the error ``why`` names."""

    why: Why


class Policy:
    """The newcomer's patience with one project's holders, across its attempts."""

    def __init__(self, timeouts: Timeouts) -> None:
        self.timeouts = timeouts
        self.attempts = 0
        self.delay = FIRST_DELAY
        self.socketless = Patience()
        self.transition = Patience()
        self.mismatches = Patience()
        #: Generations whose holder got a second chance to answer (see Fresh).
        self.pardoned: set[int] = set()
        self.queue_full = Patience()
        self.busy = Patience()
        #: How long something nobody can publish over has stood at the socket path.
        self.blocked = Patience()

    def next_attempt(self) -> Claim | GiveUp:
        """Whether another attempt may start (each one is bounded; their number is too)."""
        if self.attempts >= MAX_ATTEMPTS:
            return GiveUp(Why.EXHAUSTED)
        self.attempts += 1
        return Claim()

    def settle(self, found: Setback, look: Look) -> Action:
        """What to do about the failed attempt that found ``found``, seeing ``look``."""
        decision = self._decide(found, look)
        if isinstance(decision, Backoff):
            self.delay = min(self.delay * 2, MAX_DELAY)
        return decision

    def _decide(self, found: Setback, look: Look) -> Action:
        if isinstance(found, Fresh | Unseen | Starved):
            return self._pardon(found, look)
        if isinstance(found, Impostor | Transition):
            return self._suspect(found, look)
        if isinstance(found, Nobody | Crowded):
            return self._unreachable(queue_full=isinstance(found, Crowded), look=look)
        if isinstance(found, Leaving):
            return AwaitExit(found.pid, self.timeouts.stall)
        if isinstance(found, Missed):
            return Signal(found.phase, found.halted)
        return Backoff(self.delay)

    def _suspect(self, found: Impostor | Transition, look: Look) -> Action:
        """A listener that is not (or not yet) the holder: patience, bounded, never a signal."""
        if isinstance(found, Impostor):
            if self.mismatches.tally(look) >= MAX_MISMATCHES:
                return GiveUp(Why.IMPOSTOR)
            return RetryNow()
        timeouts = self.timeouts
        if self.transition.exceeded(
            timeouts.exit_grace + timeouts.term_grace + timeouts.hello, look
        ):
            return GiveUp(Why.SILENT)
        return Backoff(self.delay)

    def _unreachable(self, *, queue_full: bool, look: Look) -> Action:
        """The lock is held and nobody listens (or accepts: the queue stays full).

        Until that has lasted ``hello`` under one holder: a holder between
        taking the lock and renaming its socket into place, or a storm's queue
        draining; back off, try again.  Past it, a holder the kernel shows
        working (a loaded machine, a serving side still starting) gets up to
        ``ceiling`` of CPU time more (see Starved); then it is ended.
        """
        timeouts = self.timeouts
        patience = self.queue_full if queue_full else self.socketless
        if not queue_full and look.blocker is not None:
            # Nobody can publish a socket over it: while it stands there the
            # holder is not to blame, so its time does not count against it.
            patience.reset()
            blocked_too_long = self.blocked.exceeded(timeouts.hello, look)
            return GiveUp(Why.BLOCKED) if blocked_too_long else Backoff(self.delay)
        self.blocked.reset()
        if not patience.exceeded(timeouts.hello, look):
            return Backoff(self.delay)
        if not queue_full and look.moved is not False:
            # The directory may have been wiped and renamed its socket: look there.
            return RetryNow() if look.moved else Relocate()
        if patience.busy(look) and self.busy.spares(timeouts.ceiling, look):
            return Backoff(self.delay, pause=min(0.1, timeouts.hello))  # it is working
        seen = patience.seen
        patience.reset()
        return EndUnreachable(queue_full, seen)

    def _pardon(self, silent: Fresh | Unseen | Starved, look: Look) -> Signal | Backoff:
        """A silent holder that may be fine gets another chance (bounded): try again soon."""
        if isinstance(silent, Starved):
            if not self.busy.spares(self.timeouts.ceiling, look):
                return Signal(Phase.HELLO.value)
            return Backoff(self.delay)
        if silent.generation in self.pardoned:
            return Signal(Phase.HELLO.value)
        self.pardoned.add(silent.generation)
        return Backoff(self.delay)
