"""The seam: what Highlander decides, and the backend where holders meet.

Everything above this seam decides and is the same whatever the backend:
the protocol core (messages, signing, the state machine, deadlines), the
newcomer's policy, modes and the event log.  A backend answers five
questions about one place where holders meet, and nothing else:

1. **claim** the project while nobody holds it, with a fencing token;
2. **holder**: who holds it now, as the backend records it (to be verified
   before any fence), and **look**: that, with whatever the backend can see
   of the holder's work, as one sample for the newcomer's policy;
3. **open** one succession conversation with whoever serves it;
4. **fence** out a holder found hung;
5. **watch** the claim while holding it, and end the reign when it is lost.

:class:`~highlander._shell.backend.LocalBackend` is the first one: ``flock`` and a generation floor,
the record checked against ``/proc``, a Unix socket with ``SO_PEERCRED``
and ``SCM_RIGHTS``, the verified kill through a pidfd, and an inotify
watch of the runtime directory.  An etcd backend (issue #15) is a second
implementation of the same five operations: a transaction on
``create_revision == 0`` for the claim, the holder key and its lease, the
same signed frames carried as keys and watches, a lease revoked as the
fence, and a keepalive that is not answered in time as the loss.
``docs/architecture.md`` has the table.

Not yet behind the seam (the conversation's transport still is a socket,
:mod:`highlander._shell.wire`): frames reach the core as bytes, so a second
transport replaces :func:`~highlander._shell.wire.send_frame` and the read
in :func:`~highlander._shell.wire.receive_event`; the core does not change.
"""

from __future__ import annotations

from typing import Protocol

TYPE_CHECKING = False  # typing.TYPE_CHECKING (only type checkers import this module)
if TYPE_CHECKING:
    import socket

    from highlander._core.patience import Look
    from highlander._host.claim import Reign
    from highlander._host.identity import Expected
    from highlander._host.record import HolderRecord
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.incumbent import Incumbent


class Backend(Protocol):
    """Where holders meet: the five operations of the module docstring."""

    #: Short name, as in ``HIGHLANDER_BACKEND`` (``local``).
    name: str

    def claim(self, settings: Settings) -> Reign | None:
        """Hold the project if nobody does; ``None`` while somebody does.

        The :class:`~highlander._host.claim.Reign` carries the fencing
        token (``generation``): greater than every earlier reign's.
        """

    def holder(self, settings: Settings) -> HolderRecord | None:
        """The holder as the backend records it, to be verified before any fence."""

    def look(self, settings: Settings, now: float) -> Look:
        """One sample at ``now`` of what the newcomer's policy decides from.

        The holder's ``(pid, generation)``, the kernel's view of its work
        where the backend can see it (``None`` where it cannot: another
        host), and what blocks the meeting place, if anything does.
        """

    def open(self, settings: Settings) -> socket.socket | None:
        """A conversation with whoever serves the project; ``None`` if nobody does.

        Raises :class:`~highlander._shell.dial.QueueFull` when the server
        cannot take one more conversation now.
        """

    async def fence(
        self, target: Expected, settings: Settings, why: str, waiter: Waiter, *, halted: bool
    ) -> bool:
        """Make the hung holder ``target`` unable to act as holder; ``True`` once it is.

        ``halted``: the verdict was taken while it was stopped (a backend
        that can see it run again spares it and returns ``False``).
        """

    async def watch(self, incumbent: Incumbent) -> None:
        """Watch the claim for the whole reign; end the reign when it is lost."""

    async def see_out(self, incumbent: Incumbent, predecessor: Expected) -> None:
        """After a succession: see that the deposed ``predecessor`` leaves (fence it if not).

        Off the successor's critical path: the handover committed already.
        """
