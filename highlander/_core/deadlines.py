"""Watchdog deadlines as data: when the peer's next move is due.

The state machine says which :class:`Phase` a state waits in; this module
turns phases and the times the I/O shell feeds in into absolute deadlines.
Times are plain floats on whatever monotonic clock the shell uses.  The rules:

* every waiting phase has its own timeout, counted from entering the state;
* in ``STALL`` (the save is running) a PROGRESS whose counter *advances*
  restarts the timeout; a repeated counter does not, so a stuck loop that
  keeps sending heartbeats cannot stretch the save forever;
* ``STALL`` is also capped by an absolute ``ceiling`` from the moment SAVE
  was sent, however well the save advances.

Pure code: no clock is read here.
"""

from __future__ import annotations

import enum

from highlander._core.errors import ConfigurationError
from highlander._core.values import Value

_INFINITY = float("inf")


class Phase(enum.Enum):
    """What a side is waiting for; each phase has one timeout in :class:`Timeouts`."""

    HELLO = "hello"  # newcomer: the incumbent's HELLO after connecting
    REPLY = "reply"  # newcomer: STATUS_REPLY after STATUS
    STALL = "stall"  # newcomer: the next advancing PROGRESS, or SAVED
    CEILING = "ceiling"  # newcomer: the absolute end of a save
    EXIT = "exit"  # newcomer: the incumbent leaving after ACK_SUCCESSION
    REQUEST = "request"  # incumbent: SAVE or STATUS after HELLO
    ACK = "ack"  # incumbent: ACK_SUCCESSION after SAVED


class Timeouts(Value):
    """Watchdog timeouts in seconds; docs/protocol.md has the table.

    ``hello``: the newcomer waits this long for HELLO (and for STATUS_REPLY).
    ``request``: the incumbent drops a peer that has not sent its request (or
    its ACK_SUCCESSION) in this time, so a slow peer cannot hold it.
    ``stall``: the longest a save may go without advancing its progress.
    ``ceiling``: the longest a save may take, however it advances.
    ``exit_grace``: how long the incumbent has to leave after ACK_SUCCESSION.
    ``term_grace``: how long a SIGTERMed incumbent has before SIGKILL.

    Checked (:meth:`checked`) by whatever uses them: ``Highlander(...)`` and
    every connection raise :class:`ConfigurationError` for a bad value.
    """

    hello: float = 2.0
    request: float = 5.0
    stall: float = 10.0
    ceiling: float = 300.0
    exit_grace: float = 5.0
    term_grace: float = 2.0

    def checked(self) -> Timeouts:
        """Return ``self``; raise :class:`ConfigurationError` naming a bad value."""
        for name, value in self._asdict().items():
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            # Not math.isfinite: loading math costs the claim path a millisecond.
            if not ok or not 0 < value < _INFINITY:
                raise ConfigurationError(
                    f"timeouts.{name} must be a positive number of seconds, got {value!r}"
                )
        if self.ceiling < self.stall:
            raise ConfigurationError(
                f"timeouts.ceiling ({self.ceiling}) must be >= timeouts.stall ({self.stall})"
            )
        return self

    def for_phase(self, phase: Phase) -> float:
        """Return the timeout that governs ``phase``."""
        return {
            Phase.HELLO: self.hello,
            Phase.REPLY: self.hello,
            Phase.STALL: self.stall,
            Phase.CEILING: self.ceiling,
            Phase.EXIT: self.exit_grace,
            Phase.REQUEST: self.request,
            Phase.ACK: self.request,
        }[phase]


class Deadline(Value):
    """The peer must make its next move in ``phase`` by time ``at``."""

    phase: Phase
    at: float

    def remaining(self, now: float) -> float:
        """Seconds left until the deadline (negative once it has passed)."""
        return self.at - now


class Watch:
    """Tracks one side's current deadline as the conversation moves."""

    def __init__(self, timeouts: Timeouts) -> None:
        self.timeouts = timeouts.checked()
        self._phase: Phase | None = None
        self._started = 0.0
        self._ceiling: float | None = None
        self._last_counter = -1

    def enter(self, phase: Phase | None, now: float) -> None:
        """Start waiting in ``phase`` (``None``: nothing is expected of the peer)."""
        if phase is Phase.STALL and self._phase is not Phase.STALL:
            self._ceiling = now + self.timeouts.ceiling
            self._last_counter = -1
        if phase is not self._phase:
            self._started = now
        self._phase = phase

    def progress(self, counter: int, now: float) -> bool:
        """Record a PROGRESS counter; return whether it advanced (and so extended)."""
        if counter <= self._last_counter:
            return False
        self._last_counter = counter
        self._started = now
        return True

    def spare(self, now: float) -> bool:
        """Restart a missed STALL or EXIT timer; return whether it did.

        For a peer the machine kept off the CPU (:func:`starved`): a saver
        could not advance, an incumbent could not leave.  The absolute
        ceiling still holds, so this cannot stretch a save past it.
        """
        if self._phase not in (Phase.STALL, Phase.EXIT):
            return False
        self._started = now
        return True

    @property
    def last_counter(self) -> int:
        """The highest PROGRESS counter seen in this save (-1 before the first)."""
        return self._last_counter

    @property
    def deadline(self) -> Deadline | None:
        """The peer's next deadline, or ``None`` when nothing is expected of it."""
        if self._phase is None:
            return None
        at = self._started + self.timeouts.for_phase(self._phase)
        if self._phase is Phase.STALL and self._ceiling is not None and self._ceiling <= at:
            return Deadline(Phase.CEILING, self._ceiling)
        return Deadline(self._phase, at)


#: Scheduler states of a process that cannot answer whatever we wait: stopped
#: (SIGSTOP, a debugger), a zombie, dead.
_HALTED = frozenset("TtZXx")

#: Seconds of waiting for a CPU during a missed deadline that show the
#: machine, not the peer, was slow: a tick's worth.  A hung process asleep
#: in a syscall queues for nothing; one the scheduler keeps off a CPU queues
#: for most of the wait, whenever it wakes.
QUEUED_EVIDENCE = 0.01


class Sample(Value):
    """A process as the kernel showed it at one instant: enough to tell starved from stuck.

    ``state``: its scheduler letter (``R`` or ``D`` if any thread is
    running, runnable or waiting for the disk); ``cpu``: CPU seconds it has
    used; ``queued``: seconds its threads have spent runnable but waiting
    for a CPU (0 where the kernel does not tell).  Only the differences
    between two samples mean anything.
    """

    state: str
    cpu: float
    queued: float = 0.0


def looks_busy(before: Sample | None, after: Sample | None) -> bool:
    """Whether a process that missed a deadline was working, not hung, by the kernel's account.

    ``before`` and ``after``: samples from when the wait began and when the
    deadline passed.  A machine under load can starve a holder past a
    deadline; such a holder is running, waiting for the disk or for a CPU,
    or gaining CPU time.  A stopped process, or one that sat asleep without
    gaining CPU time or waiting for a CPU for the whole wait, is hung.

    One instant's state is not enough: a starved saver that sleeps between
    steps, or whose threads hand the GIL over through a futex, may show
    every thread asleep at the instant of a look (chaos seed 4 killed such a
    holder); the time it spent queued for a CPU meanwhile does not lie.
    """
    if before is None or after is None:
        return False
    if after.state in _HALTED or before.state in _HALTED:
        return False
    # R: running or waiting for a CPU; D: waiting for the disk (a storm of
    # starts pages in the interpreter for every one of them): neither is a hang.
    return (
        after.state in "RD"
        or after.cpu > before.cpu
        or after.queued - before.queued >= QUEUED_EVIDENCE
    )


#: However starved a busy holder was, it is spared at most this many times
#: ``ceiling`` of wall time: a machine that never recovers cannot shelter a
#: holder that spins without answering for ever.
STARVED_CAP = 4


def spared_busy(elapsed: float, cpu: float, ceiling: float) -> bool:
    """Whether a busy holder that keeps missing its deadlines is still spared.

    ``elapsed``: wall seconds since it first missed one under this record;
    ``cpu``: CPU seconds it used meanwhile.  A holder that spins without
    answering uses the CPU and is ended once it has used ``ceiling``; one
    that a loaded machine keeps off the CPU (a storm on two cores can starve
    a healthy serving thread for seconds) uses almost none and is spared,
    though never past :data:`STARVED_CAP` times ``ceiling`` of wall time.
    """
    return cpu <= ceiling and elapsed <= STARVED_CAP * ceiling


def starved(before: Sample | None, after: Sample | None, limit: float) -> bool:
    """Whether a peer that missed a STALL or EXIT deadline was starved, not stuck.

    ``before``/``after``: samples from when the timer started and when it
    ran out; ``limit``: the timeout.  Starved: the kernel shows it working
    (:func:`looks_busy`) and it used less than ``limit`` of CPU meanwhile.
    A save hook that sleeps without advancing is not busy; one that spins
    uses the CPU: both are stuck.
    """
    if not looks_busy(before, after) or before is None or after is None:
        return False
    return after.cpu - before.cpu < limit


def grace_again(before: Sample | None, after: Sample | None, elapsed: float, limit: float) -> bool:
    """Whether a peer that missed its EXIT grace ``limit`` gets it once more.

    ``elapsed``: wall time since its first grace began.  Yes while it was
    :func:`starved` and less than :data:`STARVED_CAP` graces have passed:
    the newcomer waiting for an answer to its ACK, and the successor
    waiting for its deposed predecessor to exit, use this one rule.
    """
    return elapsed < STARVED_CAP * limit and starved(before, after, limit)
