"""The share-mode part of the :class:`~highlander.Highlander` handle (docs/mcp.md)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from highlander._shell.sessions import Session, Sessions


class SharingApi:
    """Serving attached sessions: what a holder in share mode offers its newcomers."""

    _sessions: Sessions | None = None
    _serve_attached: Callable[[Session], None] | None = None
    _deposed: threading.Event

    def serve_attached(self, serve: Callable[[Session], None] | None) -> None:
        """Serve every client a share-mode newcomer attaches with ``serve`` (``None``: stop).

        While set, HELLO tells newcomers this holder shares: a newcomer of the
        same configuration and a build not newer than ours becomes a relay
        instead of replacing us, and each of its connections reaches
        ``serve`` as a :class:`~highlander._shell.sessions.Session` (its
        socket, the bytes read past ATTACH, the relay's pid), on the
        holder's serving side: hand it to your server's loop and return; call
        ``session.ended()`` when it is over.  :func:`highlander.mcp.serve`
        does all of this for an MCP SDK server.
        """
        self._serve_attached = serve
        if self._sessions is not None:
            self._sessions.serve_with(serve)

    @property
    def attached(self) -> int:
        """How many attached sessions this holder serves now."""
        return self._sessions.open if self._sessions is not None else 0

    def promote(self, wait: float) -> bool:
        """Our own client left: hand every attached session, and the project, to a relay.

        Ends each attached session (:meth:`Sessions.leave`); each relay starts
        its server again, the first is told ``leaving`` and succeeds us with
        the handoff, the others attach to it.  Blocks until a successor
        acknowledged (the default ``on_deposed`` then ends this process) or
        ``wait`` seconds passed; whether it was deposed.  Nothing to do
        (``False`` at once) without attached sessions.
        """
        if self._sessions is None or not self._sessions.open:
            return False
        self._sessions.leave()
        return self._deposed.wait(wait)

    def _sessions_for_reign(self) -> Sessions:
        """The registry the reign's serving side uses (created with it)."""
        from highlander._shell.sessions import Sessions  # noqa: PLC0415 - at serving time

        self._sessions = Sessions()
        self._sessions.serve_with(self._serve_attached)
        return self._sessions
