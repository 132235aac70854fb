"""How long, and how often, a newcomer has seen a condition under one holder.

A storm hands the project over again and again; what happened under an
earlier holder is no evidence against the current one, so every count and
timer here restarts when the holder's record changes.  Used by
:mod:`highlander._newcomer` to bound its patience with a silent, socketless
or mismatched holder, and to ask the kernel whether that holder was working
meanwhile (busy is not hung).
"""

from __future__ import annotations

import time

from highlander._deadlines import Sample, looks_busy, spared_busy
from highlander._identity import run_state
from highlander._record import read_record
from highlander._settings import Settings


class Patience:
    """How long (and how often) a condition has held, restarted when the holder's record changes.

    A storm hands the project over again and again; what happened under an
    earlier holder is no evidence against the current one.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.since: float | None = None
        self.seen: tuple[int, int] | None = None
        self.count = 0
        #: The recorded holder as the kernel showed it at the last look.
        self.first_run: Sample | None = None
        #: Its CPU seconds when the condition began (see :meth:`spares`).
        self.cpu = 0.0

    def _look(self) -> float:
        record = read_record(self.settings.paths.state)
        seen = (record.pid, record.generation) if record else None
        now = time.monotonic()
        if self.since is None or seen != self.seen:
            self.since, self.seen, self.count = now, seen, 0
            self.first_run = run_state(record.pid) if record else None
            self.cpu = self.first_run.cpu if self.first_run else 0.0
        return now

    def busy(self) -> bool:
        """Whether the recorded holder has been working since the last look (kernel view).

        Compared with the previous sample, not the first: a holder that was
        busy starting up and has gone quiet since is not busy any more.
        """
        if self.seen is None:
            return False
        now = run_state(self.seen[0])
        working = looks_busy(self.first_run, now)
        self.first_run = now
        return working

    def exceeded(self, limit: float) -> bool:
        """Whether the condition has lasted ``limit`` seconds under one record."""
        now = self._look()
        assert self.since is not None
        return now - self.since > limit

    def spares(self, ceiling: float) -> bool:
        """Whether a busy holder is still within ``ceiling`` under one record.

        ``ceiling`` of CPU time it used meanwhile, not of wall time: a storm
        on two cores can keep a healthy holder's serving thread off the CPU
        for seconds (:func:`~highlander._deadlines.spared_busy`).
        """
        now = self._look()
        assert self.since is not None
        state = run_state(self.seen[0]) if self.seen else None
        cpu = state.cpu - self.cpu if state else 0.0
        return spared_busy(now - self.since, cpu, ceiling)

    def tally(self) -> int:
        """Count one more occurrence; return how many there were under this record."""
        self._look()
        self.count += 1
        return self.count

    def reset(self) -> None:
        """Forget the condition."""
        self.since = None
