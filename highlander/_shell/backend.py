"""The local backend: where holders meet on one machine (the seam: :mod:`highlander._shell.seam`).

Every start claims through it, so it imports only what a free claim needs;
the rest of the local machinery is imported by the operation that uses it.
"""

from __future__ import annotations

from highlander._host.claim import Reign, claim_free

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import socket

    from highlander._core.findings import Setback
    from highlander._core.messages import Hello, Saved
    from highlander._core.patience import Look
    from highlander._host.identity import Expected, PeerCredentials
    from highlander._host.record import HolderRecord
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.client import Greeting, Silent
    from highlander._shell.incumbent import Incumbent
    from highlander._shell.seam import Backend


class LocalBackend:
    """One machine: ``flock``, a Unix socket, ``/proc`` and pidfd (the default)."""

    name = "local"
    dials_early = True

    def claim(self, settings: Settings) -> Reign | None:
        """See :meth:`Backend.claim`: the lock without waiting, then the record."""
        return claim_free(settings)

    def holder(self, settings: Settings) -> HolderRecord | None:
        """See :meth:`Backend.holder`: the record in the runtime directory."""
        from highlander._host.record import read_record  # noqa: PLC0415

        return read_record(settings.paths.state)

    def look(self, settings: Settings, now: float) -> Look:
        """See :meth:`Backend.look`: the record, ``/proc`` and the socket path."""
        from highlander._core.patience import Look  # noqa: PLC0415
        from highlander._host.identity import run_state  # noqa: PLC0415
        from highlander._host.record import read_record  # noqa: PLC0415
        from highlander._shell.watch import in_the_way  # noqa: PLC0415

        record = read_record(settings.paths.state)
        return Look(
            now=now,
            holder=(record.pid, record.generation) if record else None,
            run=run_state(record.pid) if record else None,
            blocker=in_the_way(settings.paths.socket),
        )

    def opened_early(self) -> tuple[socket.socket, int] | None:
        """See :meth:`Backend.opened_early`: never (the early dial opens its own)."""
        return None

    def open(self, settings: Settings) -> socket.socket | None:
        """See :meth:`Backend.open`: a non-blocking connect to the project's socket."""
        from highlander._shell.dial import connect  # noqa: PLC0415

        return connect(settings.paths.socket)

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
        """See :meth:`Backend.fence`: the verified kill (SIGTERM, grace, SIGKILL), at any phase."""
        from highlander._host.termination import terminate  # noqa: PLC0415

        return await terminate(
            target, settings.timeouts, settings.events, why, waiter, halted=halted
        )

    async def watch(self, incumbent: Incumbent) -> None:
        """See :meth:`Backend.watch`: inotify on the runtime directory."""
        from highlander._shell.watch import keep_watch  # noqa: PLC0415

        await keep_watch(incumbent)

    async def see_out(self, incumbent: Incumbent, predecessor: Expected) -> None:
        """See :meth:`Backend.see_out`: its exit on a pidfd; past ``exit_grace``, :meth:`fence`."""
        from highlander._shell.predecessor import see_out  # noqa: PLC0415 - after a succession

        await see_out(incumbent, predecessor)

    # -- the conversation -----------------------------------------------------------

    def place(self, settings: Settings) -> str:
        """See :meth:`Backend.place`: the project's socket path."""
        return settings.paths.socket

    def peer(self, sock: socket.socket) -> PeerCredentials:
        """See :meth:`Backend.peer`: ``SO_PEERCRED``."""
        from highlander._host.identity import peer_credentials  # noqa: PLC0415

        return peer_credentials(sock)

    def sees(self, sock: socket.socket) -> bool:
        """See :meth:`Backend.sees`: one machine, one kernel."""
        return True

    def hello_problem(
        self, settings: Settings, hello: Hello, sock: socket.socket, pid: int
    ) -> str | None:
        """See :meth:`Backend.hello_problem`: HELLO against ``/proc``."""
        from highlander._shell.client import hello_problem  # noqa: PLC0415 - it imports us

        return hello_problem(settings, hello, pid)

    def silent(self, settings: Settings, greeting: Silent, connected_ms: int) -> Setback:
        """See :meth:`Backend.silent`: the record and the kernel decide."""
        from highlander._shell.silent import local_silent  # noqa: PLC0415 - rare

        return local_silent(settings, greeting, connected_ms)

    async def take_turn(self, settings: Settings, waiter: Waiter) -> None:
        """See :meth:`Backend.take_turn`: no turns on one machine (the kernel orders connects)."""

    def leave_turn(self, *, holding: bool) -> None:
        """See :meth:`Backend.leave_turn`: nothing to give up."""

    async def await_exit(self, settings: Settings, pid: int, within: float, waiter: Waiter) -> None:
        """See :meth:`Backend.await_exit`: a pidfd."""
        from highlander._host.termination import wait_for_exit  # noqa: PLC0415 - rare

        await wait_for_exit(pid, within, waiter)

    # -- the handover -----------------------------------------------------------------

    def prepare_conclusion(self) -> None:
        """See :meth:`Backend.prepare_conclusion`: the handover's modules."""
        import highlander._shell.handover  # noqa: F401, PLC0415 - the point is the import

    async def conclude(
        self, settings: Settings, greeting: Greeting, saved: Saved, fds: list[int], started: float
    ) -> Reign | None:
        """See :meth:`Backend.conclude`: adopt the descriptors, ACK, ask the kernel."""
        from highlander._shell.handover import conclude  # noqa: PLC0415 - after SAVED

        return await conclude(settings, greeting, saved, fds, started)

    def descriptors(self, reign: Reign) -> list[int]:
        """See :meth:`Backend.descriptors`: the lock and the listener."""
        return [reign.lock.fd, reign.listener.sock.fileno()]

    async def lost_before_saved(self, incumbent: Incumbent) -> bool:
        """See :meth:`Backend.lost_before_saved`: the lock file still at its path."""
        from highlander._shell.watch import lost_before_saved  # noqa: PLC0415

        return await lost_before_saved(incumbent)

    async def take_back(self, incumbent: Incumbent) -> None:
        """See :meth:`Backend.take_back`: a fresh lock description and listener."""
        from highlander._shell.watch import take_back  # noqa: PLC0415

        await take_back(incumbent)

    async def commit(self, incumbent: Incumbent, sock: socket.socket) -> bool:
        """See :meth:`Backend.commit`: the successor holds copies; closing ours is the commit."""
        return True

    def fencing(self, reign: Reign) -> tuple[str | None, int]:
        """See :meth:`Backend.fencing`: no key; the generation."""
        return None, reign.record.generation

    def unproven(self, reign: Reign, settings: Settings, generation: int) -> str | None:
        """See :meth:`Backend.unproven`: the lock, the lock file and the record."""
        from highlander._host.claim import unproven  # noqa: PLC0415

        return unproven(reign, settings.paths, generation)


#: The backend every claim uses today.
LOCAL: Backend = LocalBackend()


def backend_for(settings: Settings) -> Backend:
    """The backend ``settings`` choose: this machine, or the etcd cluster they name."""
    if settings.backend is None:
        return LOCAL
    # The session first and its lease grant sent, then a newcomer's first request,
    # while the rest of the etcd backend's code loads (etcd users only).
    from highlander._etcd.session import require_shared_token, session_for  # noqa: PLC0415

    require_shared_token(settings)
    session = session_for(settings.backend, settings.env, ttl=settings.lease_ttl)
    session.begin()
    try:
        from highlander._shell.etcd_first import start  # noqa: PLC0415

        return start(settings, session)
    except BaseException:
        session.close()  # a prefix refused, say: the lease granted meanwhile is revoked
        raise
