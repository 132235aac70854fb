"""How a reign ends: the checks that say whether it has, their words, the default ``on_deposed``.

:class:`ReignApi` (``is_holder``, ``fencing``, ``check_current()``, a mixin of
:class:`~highlander.Highlander`) is the one owner of "may this process act as
holder now?"; it lives here, with the words it answers in, rather than in a
module of its own that ``from highlander import Highlander`` would load too.
"""

from __future__ import annotations

import contextlib
import os
import sys

from highlander._core.errors import Deposed
from highlander._host.bounds import report_all_suppressed
from highlander._host.event_log import Outcome
from highlander._host.log import flush

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from typing import Any

    from highlander._host.claim import Reign
    from highlander._host.settings import Settings
    from highlander._host.waiting import Runtime
    from highlander._shell.incumbent import Incumbent
    from highlander._shell.seam import Backend

_HELD = "another process holds it now"
#: What ``check_current()`` says while the reign's commit to a successor is in flight.
COMMITTING = (
    "its successor may hold from any moment now (if the commit does not apply, "
    "this process holds again and is_holder says so)"
)
#: What ``check_current()`` says once a reign ended other than by a successor.
_ENDINGS = {
    Outcome.STOPPED: "it was stopped (`highlander stop`)",
    Outcome.ORPHANED: "the client that started this process is gone",
    Outcome.STEPPED_DOWN: "this process could not serve it any more and stepped down",
    Outcome.LOST_RENDEZVOUS: "its lock file or runtime directory was deleted or replaced",
    Outcome.LEASE_LOST: "its etcd lease could not be renewed in time (or it was fenced out)",
}


def ending(outcome: Outcome | None) -> str:
    """How a reign that ended as ``outcome`` (``None``: released or deposed) ended, in words."""
    return _ENDINGS.get(outcome, _HELD) if outcome is not None else _HELD


async def run_deposed_hook(runtime: Runtime, hook: Callable[[], Any] | None) -> None:
    """Run the application's ``on_deposed`` (by :mod:`highlander._shell.hooks`), or leave."""
    from highlander._shell.hooks import call_hook  # noqa: PLC0415 - off the claim path

    if hook is None:
        leave_process()
    else:
        await call_hook(runtime, hook)


def leave_process() -> None:
    """The default ``on_deposed``: the state is saved and handed over; leave now.

    ``os._exit`` because a thread blocked reading stdin (the usual stdio
    server) would otherwise keep the process alive.
    """
    report_all_suppressed()  # os._exit skips atexit: say what the rate limit held back
    flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


class ReignApi:
    """The holder's view of its own reign, failing closed."""

    settings: Settings | None
    generation: int
    outcome: Outcome | None
    _backend: Backend | None
    _reign: Reign | None
    _incumbent: Incumbent | None
    _deposed: threading.Event
    _ended_as: Outcome | None
    _released: bool

    @property
    def is_holder(self) -> bool:
        """Whether this process holds the project right now (never in a forked child)."""
        reign, incumbent = self._reign, self._incumbent
        ended = self._deposed.is_set() or self._released
        going = incumbent is not None and incumbent.letting_go  # its commit is on the way
        return reign is not None and reign.lock.held and not (ended or going)

    @property
    def fencing(self) -> tuple[str | None, int]:
        """``(key, token)`` that fence this reign's own writes; ``(None, 0)`` when not holding.

        On etcd: the holder key's name and its mod revision; guard a write
        with ``compare mod_revision(key) == token`` (docs/etcd.md).  On one
        machine: ``(None, generation)``, for your own records.
        """
        if self._reign is None or self._backend is None:
            return None, 0
        return self._backend.fencing(self._reign)

    def check_current(self) -> None:
        """Raise :class:`Deposed` unless this process can prove it still holds the project.

        Call it before a critical write.  It fails closed: it passes only if
        this process (not a fork of it) still has the locked descriptor, the
        lock file at the rendezvous path is that same file (not deleted, not
        replaced, its directory not wiped), and the record on disk is
        readable and names this pid and generation (fencing); over etcd, if
        etcd still records this reign.  Never while a handover this holder
        accepted commits (from its ``relinquished`` event on).
        """
        reign = self._reign
        if reign is None:
            raise Deposed(
                "this process never held the project: it runs as a duplicate "
                f"({self.outcome.value if self.outcome else 'not acquired'})"
            )
        # The serving side sets its outcome before it lets go of the lock, and
        # calls on_deposed after: between the two, the outcome says why.
        self._raise_if_ended()
        assert self.settings is not None and self._backend is not None
        why = self._backend.unproven(reign, self.settings, self.generation)
        if why is not None:
            self._raise_if_ended()  # the reign ended during the check: say how
            raise Deposed(why)

    def _raise_if_ended(self) -> None:
        incumbent = self._incumbent
        stepped = incumbent.outcome if incumbent is not None else None
        if self._deposed.is_set() or self._released or stepped is not None:
            raise Deposed(
                f"generation {self.generation} ended: {ending(self._ended_as or stepped)}"
            )
        if incumbent is not None and incumbent.letting_go:
            raise Deposed(f"generation {self.generation} is committing a handover: {COMMITTING}")
