"""The holder's side: serve newcomers, save on request, hand over and step down.

Runs on its own event loop (a background thread for the sync API, the
caller's task group for the async one), so the application's work never
delays an answer.  Every connection is checked (same uid, signed frames,
deadlines) before it can ask for anything; one succession runs at a time,
and other newcomers get BUSY meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from highlander._core.connection import Connection
from highlander._core.errors import ProtocolError, Reason, SignatureError, UnsafeSecretError
from highlander._core.messages import (
    AckSuccession,
    Busy,
    Hello,
    Intent,
    Refused,
    Save,
    Saved,
    Status,
    StatusReply,
)
from highlander._core.state import Role
from highlander._host.claim import Reign
from highlander._host.event_log import Event, Outcome
from highlander._host.identity import PeerCredentials, own_identity, peer_credentials
from highlander._host.listener import Listener
from highlander._host.settings import Settings
from highlander._host.waiting import ANYIO
from highlander._shell.admission import other_app, policy
from highlander._shell.backend import LOCAL
from highlander._shell.saving import SaveFlight, SaveHook, describe_failure
from highlander._shell.serving_guard import ServingFailed, ServingGuard, describe, step_down
from highlander._shell.watch import lost_before_saved, take_back, watch_parent
from highlander._shell.wire import Overdue, receive_event, send_message

if TYPE_CHECKING:
    from highlander._shell.seam import Backend

#: Connections served at once; more are closed on accept (each is bounded by deadlines).
MAX_CONNECTIONS = 64
#: REFUSED ``late``: the ACK deadline passed and this holder keeps the project.
LATE = "the ACK_SUCCESSION came after the incumbent's deadline; it keeps the project"


class Incumbent:
    """Serves one reign until it is deposed, stopped or released."""

    def __init__(
        self,
        settings: Settings,
        reign: Reign,
        *,
        on_save: SaveHook | None,
        on_deposed: Callable[[Outcome], Awaitable[None]],
        backend: Backend = LOCAL,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.reign = reign
        self.on_save = on_save
        self.on_deposed = on_deposed
        self.outcome: Outcome | None = None
        self.ended = threading.Event()
        #: The lock and listener are out with a successor that has not confirmed yet.
        self.handed_over = False
        self._successor: PeerCredentials | None = None
        self._successor_start = 0
        #: Open conversations, oldest first: scope -> whether its request arrived.
        self._slots: dict[anyio.CancelScope, bool] = {}
        self._evicted = 0
        self._last_overload = float("-inf")
        self._guard = ServingGuard(settings.events, self._evict_idle)
        self._stop: anyio.Event | None = None
        self._stop_requested = threading.Event()
        self._loop_token: Any = None
        self._loop_thread = 0
        self._tg: anyio.abc.TaskGroup | None = None
        #: What keeps the socket path from being published again, if anything (_watch).
        self.blocked: str | None = None
        self._flight: SaveFlight | None = None

    async def serve(self, parent: int | None = None) -> Outcome:
        """Serve until the reign ends; return how it ended.

        With ``parent``, the reign also ends when that process (the client
        that started us) exits: an orphaned server must not outlive its IDE.
        If serving cannot go on, the holder steps down instead of living on
        deaf (:mod:`highlander._shell.serving_guard`): this never raises an error.
        """
        self._loop_token = anyio.lowlevel.current_token()
        self._loop_thread = threading.get_ident()
        self._stop = anyio.Event()
        try:
            if self._stop_requested.is_set():  # released before we got going
                return self.outcome or Outcome.RELEASED
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._accept_loop, tg)
                tg.start_soon(self.backend.watch, self)
                if parent is not None:
                    tg.start_soon(watch_parent, self, parent)
                await self._stop.wait()
                tg.cancel_scope.cancel()
        except Exception as exc:  # whatever it was, a deaf holder is worse
            await step_down(self, describe(exc))
        finally:
            self.ended.set()
        return self.outcome or Outcome.RELEASED

    def stop(self) -> None:
        """Stop serving; callable from any thread, before or while :meth:`serve` runs."""
        self._stop_requested.set()
        stop = self._stop
        if stop is None or self.ended.is_set():
            # Not started (it checks the request first thing), or over: its loop
            # may be finishing, and a call into it now would wait forever.
            return
        if threading.get_ident() == self._loop_thread:
            stop.set()
            return
        # The loop may already be gone (RunFinishedError): nothing left to stop.
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(stop.set, token=self._loop_token)

    async def _accept_loop(self, tg: anyio.abc.TaskGroup) -> None:
        while True:
            listener = self.reign.listener.sock
            try:
                await anyio.wait_readable(listener)
            except anyio.ClosedResourceError:
                continue  # replaced: its path was taken and published anew (_watch)
            if listener is not self.reign.listener.sock:
                continue  # replaced after it woke us, before we ran: accept on the new one
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                await self._guard.accept_failed(exc)  # backs off, skips, or ServingFailed
                continue
            self._guard.accepted()
            sock.setblocking(False)
            if len(self._slots) >= MAX_CONNECTIONS and not self._evict_idle():
                sock.close()
                continue
            scope = anyio.CancelScope()
            self._slots[scope] = False
            tg.start_soon(self._serve_connection, sock, scope)

    def replace_listener(self, listener: Listener) -> None:
        """Serve on ``listener`` from now on (on the loop's thread: the old one's waiters wake)."""
        old = self.reign.listener
        self.reign = self.reign._replace(listener=listener)
        anyio.notify_closing(old.sock)
        old.close(unlink=False)

    def _evict_idle(self) -> bool:
        """Make room by dropping the oldest connection that has not made its request.

        Idle connections cannot crowd out a real newcomer, which sends its
        request within milliseconds of HELLO.  Logged at most once a second.
        """
        victim = next((scope for scope, engaged in self._slots.items() if not engaged), None)
        if victim is None:
            return False
        victim.cancel()
        del self._slots[victim]
        self._evicted += 1
        now = ANYIO.now()
        if now - self._last_overload >= 1.0:
            self.settings.events.emit(
                Event.OVERLOAD, evicted=self._evicted, reason="idle connections evicted"
            )
            self._last_overload, self._evicted = now, 0
        return True

    async def _serve_connection(self, sock: socket.socket, scope: anyio.CancelScope) -> None:
        with scope:
            await self._serve_connection_in(sock, scope)

    async def _serve_connection_in(self, sock: socket.socket, scope: anyio.CancelScope) -> None:
        peer: PeerCredentials | None = None
        events = self.settings.events
        try:
            peer = peer_credentials(sock)
            if peer.uid != os.geteuid():
                events.emit(Event.AUTH_FAILED, peer_pid=peer.pid, reason=f"peer uid {peer.uid}")
                return
            await self._converse(sock, peer, scope)
        except SignatureError as exc:
            events.emit(Event.AUTH_FAILED, peer_pid=_pid(peer), reason=str(exc))
        except ProtocolError as exc:
            events.emit(Event.PROTOCOL_ERROR, peer_pid=_pid(peer), reason=str(exc))
        except Overdue as exc:
            events.emit(Event.TIMEOUT, peer_pid=_pid(peer), phase=exc.deadline.phase.value)
        except OSError as exc:
            events.emit(Event.PROTOCOL_ERROR, peer_pid=_pid(peer), reason=f"socket: {exc}")
        except UnsafeSecretError as exc:
            # No key, no conversation: every later one would fail the same way.
            raise ServingFailed(f"no key to serve with: {exc}") from exc
        except Exception as exc:  # one conversation's failure ends it alone
            self._guard.connection_failed(exc, _pid(peer))
            if self.outcome is not None:
                self.stop()  # the reign ended on the way (a hook failed after it): stop serving
        finally:
            self._slots.pop(scope, None)
            sock.close()

    async def _converse(
        self, sock: socket.socket, peer: PeerCredentials, scope: anyio.CancelScope
    ) -> None:
        me, record = own_identity(), self.reign.record
        conn = Connection(
            Role.INCUMBENT,
            key=self.settings.key(),
            nonce=os.urandom(16),
            now=anyio.current_time(),
            timeouts=self.settings.timeouts,
        )
        hello = Hello(
            pid=me.pid,
            start_time=me.start_time,
            exe=me.exe,
            app=self.settings.app,
            generation=record.generation,
            since_ms=record.since_ms,
            nonce=conn.local_nonce.hex(),
        )
        await send_message(sock, conn, hello, ANYIO)
        request = await receive_event(sock, conn, ANYIO)
        if scope in self._slots:
            self._slots[scope] = True  # a real request: no longer evictable
        if isinstance(request, Status):
            reply = StatusReply(
                app=self.settings.app,
                pid=me.pid,
                generation=record.generation,
                mode=self.settings.mode.value,
                since_ms=record.since_ms,
                busy=self._successor is not None,
            )
            # Not logged: a read-only query leaves no trace (a monitor may ask every second).
            await send_message(sock, conn, reply, ANYIO)
        elif isinstance(request, Save):
            await self._answer_save(sock, conn, request, peer)

    async def _refuse(
        self, sock: socket.socket, conn: Connection, reason: Reason, why: str
    ) -> None:
        await send_message(sock, conn, Refused(reason, why[:1024]), ANYIO)

    async def _answer_save(
        self, sock: socket.socket, conn: Connection, save: Save, peer: PeerCredentials
    ) -> None:
        events, now_ms = self.settings.events, int(time.time() * 1000)
        refusal = other_app(self.settings, save)
        if refusal is None and self._successor is not None:
            busy = Busy(pid=self._successor.pid, start_time=self._successor_start)
            await send_message(sock, conn, busy, ANYIO)
            events.emit(Event.BUSY, peer_pid=peer.pid, successor_pid=self._successor.pid)
            return
        history = self.reign.record.successions_ms
        refusal = refusal or policy(self.settings, save, history, now_ms)
        if refusal is not None:
            await self._refuse(sock, conn, refusal.reason, refusal.detail)
            events.emit(
                refusal.event, peer_pid=peer.pid, reason=refusal.reason, detail=refusal.detail
            )
            return
        self._successor, self._successor_start = peer, save.start_time
        try:
            await self._hand_over(sock, conn, save, peer)
        finally:
            if self.outcome is None:
                self._successor = None

    async def _hand_over(
        self, sock: socket.socket, conn: Connection, save: Save, peer: PeerCredentials
    ) -> None:
        events, started = self.settings.events, ANYIO.now()
        events.emit(Event.SAVE_REQUESTED, peer_pid=peer.pid, intent=save.intent)
        try:
            handoff = await self._save().follow(sock, conn)
            saved = Saved(handoff=handoff, generation=self.reign.record.generation)
        except Exception as exc:  # the hook's failure is reported, never fatal to the holder
            detail = describe_failure(exc)
            await self._refuse(sock, conn, Reason.INTERNAL, detail)
            events.emit(Event.REFUSED, peer_pid=peer.pid, reason=Reason.INTERNAL, detail=detail)
            return
        if await lost_before_saved(self):
            return
        succeed = save.intent is Intent.SUCCEED
        fds = [self.reign.lock.fd, self.reign.listener.sock.fileno()] if succeed else []
        self.handed_over = bool(fds)
        await send_message(sock, conn, saved, ANYIO, fds)
        events.emit(
            Event.SAVED,
            peer_pid=peer.pid,
            generation=saved.generation,
            duration_ms=_ms_since(started),
        )
        # The commit point (highlander._core.commit): only a timely ACK_SUCCESSION
        # gives the project away; whatever else ends this wait, we keep it.
        try:
            ack = await receive_event(sock, conn, ANYIO)
        except Overdue:
            self.handed_over = False
            # An ACK that crosses this is void: say so, so the newcomer lets go at once.
            with contextlib.suppress(OSError):
                await self._refuse(sock, conn, Reason.LATE, LATE)
            await take_back(self)  # a stopped successor's copies must not outlive us
            raise
        except BaseException:
            self.handed_over = False
            raise
        if isinstance(ack, Refused):
            # The successor could not prepare its takeover (a full disk, say).
            self.handed_over = False
            events.emit(Event.HANDOVER_ABORTED, peer_pid=peer.pid, reason=ack.detail)
            return
        if not isinstance(ack, AckSuccession):
            # The successor left without confirming; its copies of the lock
            # and listener closed with it.  Nothing changed: keep serving.
            self.handed_over = False
            events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="ack", reason="successor left")
            return
        await self._step_down(Outcome.DEPOSED if succeed else Outcome.STOPPED, peer, started)

    def _save(self) -> SaveFlight:
        """The running save, or a new one: never two at once.

        A newcomer may have died mid-save; its save runs on, and the next
        request follows it.
        """
        flight = self._flight
        if flight is None or not flight.running:
            assert self._tg is not None
            flight = self._flight = SaveFlight(self.on_save)
            flight.start(self._tg)
        return flight

    async def _step_down(self, outcome: Outcome, peer: PeerCredentials, started: float) -> None:
        self.outcome = outcome
        events = self.settings.events
        events.emit(Event.ACKED, peer_pid=peer.pid, duration_ms=_ms_since(started))
        # A successor has its own copies of the lock and listener: closing ours
        # frees nothing.  After a plain stop nobody does, so the socket goes too.
        self.reign.listener.close(unlink=outcome is Outcome.STOPPED)
        self.reign.lock.release()
        events.emit(
            Event.RELINQUISHED,
            peer_pid=peer.pid,
            outcome=outcome,
            generation=self.reign.record.generation,
        )
        await self.on_deposed(outcome)
        self.stop()


def _pid(peer: PeerCredentials | None) -> int | None:
    return peer.pid if peer is not None else None


def _ms_since(started: float) -> int:
    return int((ANYIO.now() - started) * 1000)
