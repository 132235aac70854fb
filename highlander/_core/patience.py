"""How long, and how often, a newcomer has seen a condition under one holder.

A storm hands the project over again and again; what happened under an
earlier holder is no evidence against the current one, so every count and
timer here restarts when the holder's record changes.  Used by
:mod:`highlander._core.policy` to bound its patience with a silent, socketless
or mismatched holder, and to judge from the kernel's samples whether that
holder was working meanwhile (busy is not hung).

Pure: the shell samples the clock, the record and the kernel once per
failed attempt (:class:`Look`) and every method here decides from that.
"""

from __future__ import annotations

from highlander._core.deadlines import Sample, looks_busy, spared_busy
from highlander._core.values import Value


class Look(Value):
    """What the newcomer saw when an attempt failed: everything the policy decides from.

    ``now``: the waiter's monotonic clock.  ``holder``: the record's (pid,
    generation), ``None`` without a record.  ``run``: that pid as the
    kernel showed it (:class:`~highlander._core.deadlines.Sample`), ``None`` if
    gone.  ``blocker``: what stands at the socket path that a rename cannot
    replace.  ``moved``: whether the runtime directory's socket name
    changed, ``None`` until the policy asked
    (:class:`~highlander._core.policy.Relocate`).
    """

    now: float
    holder: tuple[int, int] | None = None
    run: Sample | None = None
    blocker: str | None = None
    moved: bool | None = None


class Patience:
    """How long (and how often) a condition has held, restarted when the holder's record changes."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.seen: tuple[int, int] | None = None
        self.count = 0
        #: The recorded holder as the kernel showed it at the last look.
        self.first_run: Sample | None = None
        #: Its CPU seconds when the condition began (see :meth:`spares`).
        self.cpu = 0.0

    def _look(self, look: Look) -> float:
        if self.since is None or look.holder != self.seen:
            self.since, self.seen, self.count = look.now, look.holder, 0
            self.first_run = look.run if look.holder else None
            self.cpu = self.first_run.cpu if self.first_run else 0.0
        return look.now

    def busy(self, look: Look) -> bool:
        """Whether the recorded holder has been working since the last look (kernel view).

        Compared with the previous sample, not the first: a holder that was
        busy starting up and has gone quiet since is not busy any more.
        """
        if self.seen is None:
            return False
        working = looks_busy(self.first_run, look.run)
        self.first_run = look.run
        return working

    def exceeded(self, limit: float, look: Look) -> bool:
        """Whether the condition has lasted ``limit`` seconds under one record."""
        now = self._look(look)
        assert self.since is not None
        return now - self.since > limit

    def spares(self, ceiling: float, look: Look) -> bool:
        """Whether a busy holder is still within ``ceiling`` under one record.

        ``ceiling`` of CPU time it used meanwhile, not of wall time: a storm
        on two cores can keep a healthy holder's serving thread off the CPU
        for seconds (:func:`~highlander._core.deadlines.spared_busy`).
        """
        now = self._look(look)
        assert self.since is not None
        state = look.run if self.seen else None
        cpu = state.cpu - self.cpu if state else 0.0
        return spared_busy(now - self.since, cpu, ceiling)

    def tally(self, look: Look) -> int:
        """Count one more occurrence; return how many there were under this record."""
        self._look(look)
        self.count += 1
        return self.count

    def reset(self) -> None:
        """Forget the condition."""
        self.since = None
