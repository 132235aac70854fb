"""What a holder asks of its reign: the :class:`~highlander.Highlander` handle's checks.

``is_holder``, ``fencing`` and ``check_current()``: one owner for the
question "may this process act as holder now?", which the handle's claim and
release (``highlander._highlander``) and its serving side keep answerable.
"""

from __future__ import annotations

from highlander._core.errors import Deposed
from highlander._ending import COMMITTING, ending

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import threading

    from highlander._host.claim import Reign
    from highlander._host.event_log import Outcome
    from highlander._host.settings import Settings
    from highlander._shell.incumbent import Incumbent
    from highlander._shell.seam import Backend


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
