"""The seam: what Highlander decides, and the backend where holders meet.

Everything above this seam decides and is the same whatever the backend:
the protocol core (messages, signing, the state machine, deadlines), the
newcomer's policy, modes and the event log.  A backend answers questions
about one place where holders meet, and nothing else:

1. **claim** the project while nobody holds it, with a fencing token;
   **holder**: who holds it now, as the backend records it, and **look**:
   that, with whatever the backend can see of the holder's work, as one
   sample for the newcomer's policy;
2. the **conversation**: **open** one with whoever serves the project, say
   who answers (**peer**, **sees**, **hello_problem**, **place** for
   messages) and what a silent one means (**silent**);
3. the **handover**: what goes with SAVED (**descriptors**), the commit on
   each side (**commit** in the incumbent after a timely ACK, **conclude**
   in the newcomer after SAVED), and what a holder checks and undoes around
   it (**lost_before_saved**, **take_back**);
4. **fence** out a holder found hung, **await_exit** of one that is leaving,
   **see_out** a deposed predecessor;
5. **watch** the claim while holding it, and end the reign when it is lost;
   **unproven**: why ``check_current()`` cannot pass.

:class:`~highlander._shell.backend.LocalBackend` is one machine: ``flock``
and a generation floor, the record checked against ``/proc``, a Unix socket
with ``SO_PEERCRED`` and ``SCM_RIGHTS``, the verified kill through a pidfd,
and an inotify watch of the runtime directory.
:class:`~highlander._shell.etcd_backend.EtcdBackend` is an etcd cluster:
the holder key on a lease (claim: ``create_revision == 0``), the same signed
frames carried as sealed keys and bridged to a socket, the commit as one
transaction, a guarded move and a revoke as the fence, and a keepalive not
answered in time as the loss.  ``docs/architecture.md`` has the table.
"""

from __future__ import annotations

from typing import Protocol

TYPE_CHECKING = False  # typing.TYPE_CHECKING (only type checkers import this module)
if TYPE_CHECKING:
    import socket

    from highlander._core.findings import Setback
    from highlander._core.messages import Hello, Saved
    from highlander._core.patience import Look
    from highlander._host.claim import Reign
    from highlander._host.identity import Expected, PeerCredentials
    from highlander._host.record import HolderRecord
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.client import Greeting, Silent
    from highlander._shell.incumbent import Incumbent


class Backend(Protocol):
    """Where holders meet: the operations of the module docstring."""

    #: Short name, as in ``HIGHLANDER_BACKEND`` (``local``).
    name: str
    #: Whether a newcomer may open its first conversation before it takes its turn
    #: (:meth:`take_turn`): the local backend has no turns.
    dials_early: bool

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

    def opened_early(self) -> tuple[socket.socket, int] | None:
        """A conversation the claim opened already, and when (wall ms); once, else ``None``.

        For a backend that does not dial early (its newcomers take turns):
        etcd's first claim joins the queue and opens one in the same request
        when nobody is queued before it.
        """

    def open(self, settings: Settings) -> socket.socket | None:
        """A conversation with whoever serves the project; ``None`` if nobody does.

        Raises :class:`~highlander._shell.dial.QueueFull` when the server
        cannot take one more conversation now.
        """

    async def fence(
        self,
        target: Expected,
        settings: Settings,
        why: str,
        waiter: Waiter,
        *,
        halted: bool,
        ceiling: bool = False,
    ) -> bool:
        """Make the hung holder ``target`` unable to act as holder; ``True`` once it is.

        ``halted``: the verdict was taken while it was stopped (a backend
        that can see it run again spares it and returns ``False``).
        ``ceiling``: its save outran the ceiling, so it is ended even while
        it still reports progress (a backend that spares a holder that
        answered after all must not spare this one).
        """

    async def watch(self, incumbent: Incumbent) -> None:
        """Watch the claim for the whole reign; end the reign when it is lost."""

    async def see_out(self, incumbent: Incumbent, predecessor: Expected) -> None:
        """After a succession: see that the deposed ``predecessor`` leaves (fence it if not).

        Off the successor's critical path: the handover committed already.
        """

    def place(self, settings: Settings) -> str:
        """Where holders meet, for messages (a socket path, an etcd cluster and project)."""

    def peer(self, sock: socket.socket) -> PeerCredentials:
        """Who is at the other end of the conversation ``sock`` (opened or accepted)."""

    def sees(self, sock: socket.socket) -> bool:
        """Whether this machine's kernel can see that peer's process (``/proc``)."""

    def hello_problem(
        self, settings: Settings, hello: Hello, sock: socket.socket, pid: int
    ) -> str | None:
        """What is wrong with ``hello``'s identity, as the backend knows ``pid``; or ``None``."""

    def silent(self, settings: Settings, greeting: Silent, connected_ms: int) -> Setback:
        """What a holder that sent no HELLO (connected at wall ``connected_ms``) means."""

    async def await_exit(self, settings: Settings, pid: int, within: float, waiter: Waiter) -> None:
        """Wait (at most ``within``) until the holder ``pid``, busy handing over, is gone."""

    async def take_turn(self, settings: Settings, waiter: Waiter) -> None:
        """Before a conversation with the holder: wait while other newcomers converse (bounded)."""

    def leave_turn(self, *, holding: bool) -> None:
        """The newcomer is done (holds, attached, gave up): others may converse.

        ``holding``: it holds now, so the backend may give the turn up in the
        background rather than hold ``acquire()`` up for it.
        """

    def prepare_conclusion(self) -> None:
        """While the incumbent saves: load what :meth:`conclude` runs (off its critical path)."""

    async def conclude(
        self, settings: Settings, greeting: Greeting, saved: Saved, fds: list[int], started: float
    ) -> Reign | None:
        """The newcomer after SAVED: ACK and hold, or ``None`` (the incumbent kept it)."""

    def descriptors(self, reign: Reign) -> list[int]:
        """What goes with SAVED to a successor (local: the lock and the listener)."""

    async def lost_before_saved(self, incumbent: Incumbent) -> bool:
        """Just before SAVED: whether the claim is lost already (then the reign ended)."""

    async def take_back(self, incumbent: Incumbent) -> None:
        """After a successor went silent past its ACK deadline: void what it was given."""

    async def commit(self, incumbent: Incumbent, sock: socket.socket) -> bool:
        """The incumbent after a timely ACK on ``sock``: ``True`` once the successor holds."""

    def unproven(self, reign: Reign, settings: Settings, generation: int) -> str | None:
        """Why this process cannot prove ``reign`` current (``check_current()``); or ``None``."""

    def fencing(self, reign: Reign) -> tuple[str | None, int]:
        """The key and token that fence ``reign``'s own writes (``Highlander.fencing``)."""
