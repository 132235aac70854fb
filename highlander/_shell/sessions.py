"""The holder's side of share mode: admit an ATTACH, hand the connection to the server.

A holder shares while something serves attached sessions: the MCP
integration (:func:`highlander.mcp.serve`) opens :class:`Sessions` with a
function that takes each admitted connection.  Until then HELLO says
``shares: false`` and every newcomer succeeds as without share mode.

:func:`answer_attach` checks the ATTACH with the same rules the newcomer used
(:func:`highlander._core.sharing.incumbent_admits`) after the same token,
uid and identity checks as a SAVE's (the conversation is the one every
request has), answers ATTACHED, REFUSED or BUSY (a succession is running:
an attached session would end with this holder at once), and passes the
connection on.  Events: ``attached`` and ``detached`` (how many sessions
are open), ``refused`` with the reason.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from highlander._core.connection import Connection
from highlander._core.messages import Attach, Attached, Refused
from highlander._core.sharing import EXPLAINED, ShareMode, incumbent_admits
from highlander._host.event_log import Event
from highlander._host.identity import PeerCredentials
from highlander._shell.wire import send_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._host.settings import Settings
    from highlander._shell.incumbent import Incumbent


class Session:
    """One attached client's connection, as the server receives it."""

    def __init__(self, sessions: Sessions, sock: socket.socket, rest: bytes, peer_pid: int):
        """Connection ``sock`` (blocking), the bytes ``rest`` read past ATTACH, the relay's pid."""
        self.sock = sock
        self.rest = rest
        self.peer_pid = peer_pid
        self._sessions = sessions
        self._ended = False

    def ended(self) -> None:
        """The server is done with this session: count it out (idempotent)."""
        if not self._ended:
            self._ended = True
            self._sessions.ended(self)


class Sessions:
    """The attached sessions of one holder: who serves them, how many are open."""

    def __init__(self) -> None:
        """Not sharing yet."""
        self._serve: Callable[[Session], None] | None = None
        self._lock = threading.Lock()
        self.open = 0
        self._settings: Settings | None = None
        self._live: set[Session] = set()
        #: The holder's own client left: ATTACH is told to succeed us (``leaving``).
        self.leaving = False

    def bind(self, settings: Settings) -> None:
        """Serve the reign of ``settings``: its share mode, its event log."""
        self._settings = settings

    @property
    def sharing(self) -> bool:
        """Whether attached sessions are served now (HELLO's ``shares``): share mode, a server."""
        on = self._settings is not None and self._settings.share is not ShareMode.OFF
        return on and self._serve is not None

    def serve_with(self, serve: Callable[[Session], None] | None) -> None:
        """Serve each admitted session with ``serve`` from now on (``None``: stop sharing).

        ``serve`` runs on the holder's serving side and must not block: it
        hands the session to the server's own loop.
        """
        self._serve = serve

    def admit(self, sock: socket.socket, rest: bytes, peer_pid: int) -> int:
        """Give a new session to the server; how many are open with it."""
        serve = self._serve
        if serve is None:
            sock.close()
            return self.open
        session = Session(self, sock, rest, peer_pid)
        with self._lock:
            self.open += 1
            count = self.open
            self._live.add(session)
        serve(session)
        return count

    def leave(self) -> int:
        """The holder's client left: end every session so that its relay finds a successor.

        Each relay sees its connection close, answers its client's requests
        in flight with an error, and starts its server again in its own
        process (:mod:`highlander._relay`); the first to arrive is told
        ``leaving`` and succeeds this holder with the handoff (promotion),
        the others attach to it.  Returns how many sessions were ended.
        """
        with self._lock:
            self.leaving = True
            live = list(self._live)
        for session in live:
            with contextlib.suppress(OSError):
                session.sock.shutdown(socket.SHUT_RDWR)  # the server's reader ends it
        return len(live)

    def ended(self, session: Session) -> None:
        """Count ``session`` out (through :meth:`Session.ended`)."""
        with self._lock:
            self.open -= 1
            count = self.open
            self._live.discard(session)
        if self._settings is not None:
            self._settings.events.emit(Event.DETACHED, peer_pid=session.peer_pid, sessions=count)


async def answer_attach(
    incumbent: Incumbent,
    sock: socket.socket,
    conn: Connection,
    attach: Attach,
    peer: PeerCredentials,
) -> None:
    """Answer ``attach`` on ``sock``: ATTACHED (and the session goes to the server), or not."""
    settings, runtime, sessions = incumbent.settings, incumbent.runtime, incumbent.sessions
    busy = incumbent.busy(peer)
    if busy is not None:
        await send_message(sock, conn, busy, runtime)
        return
    why = incumbent_admits(
        sessions.sharing, settings.app, settings.build(), attach, leaving=sessions.leaving
    )
    if why is not None:
        detail = EXPLAINED.get(why, why.value)
        await send_message(sock, conn, Refused(why, detail), runtime)
        settings.events.emit(Event.REFUSED, peer_pid=peer.pid, reason=why, detail=detail)
        return
    generation = incumbent.reign.record.generation
    await send_message(sock, conn, Attached(generation, sessions.open + 1), runtime)
    served = sock.dup()  # ours is closed with the conversation
    served.setblocking(True)
    count = sessions.admit(served, conn.unframed(), peer.pid)
    settings.events.emit(Event.ATTACHED, peer_pid=peer.pid, generation=generation, sessions=count)
