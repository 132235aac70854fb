"""The local backend: where holders meet on one machine (the seam: :mod:`highlander._shell.seam`).

Every start claims through it, so it imports only what a free claim needs;
the rest of the local machinery is imported by the operation that uses it.
"""

from __future__ import annotations

from highlander._host.claim import Reign, claim_free

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import socket

    from highlander._core.patience import Look
    from highlander._host.identity import Expected
    from highlander._host.record import HolderRecord
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.incumbent import Incumbent
    from highlander._shell.seam import Backend


class LocalBackend:
    """One machine: ``flock``, a Unix socket, ``/proc`` and pidfd (the default)."""

    name = "local"

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

    def open(self, settings: Settings) -> socket.socket | None:
        """See :meth:`Backend.open`: a non-blocking connect to the project's socket."""
        from highlander._shell.dial import connect  # noqa: PLC0415

        return connect(settings.paths.socket)

    async def fence(
        self, target: Expected, settings: Settings, why: str, waiter: Waiter, *, halted: bool
    ) -> bool:
        """See :meth:`Backend.fence`: the verified kill (SIGTERM, grace, SIGKILL)."""
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


#: The backend every claim uses today.
LOCAL: Backend = LocalBackend()
