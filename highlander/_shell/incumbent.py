"""The holder's side: serve newcomers, save on request, hand over and step down.

Runs on a :class:`~highlander._host.waiting.Runtime`: for the sync API a
:class:`~highlander._host.loop.SelectorLoop` on a background thread, for
the async one the caller's anyio loop; so the application's work never
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

from highlander._core.connection import Connection
from highlander._core.errors import ProtocolError, Reason, SignatureError, UnsafeSecretError
from highlander._core.messages import (
    AckSuccession,
    Attach,
    Busy,
    Intent,
    Refused,
    Save,
    Saved,
    Status,
)
from highlander._core.state import Role
from highlander._host.claim import Reign
from highlander._host.event_log import Event, Outcome
from highlander._host.identity import PeerCredentials
from highlander._host.listener import Listener
from highlander._host.settings import Settings
from highlander._host.tasks import Closed
from highlander._shell.admission import hello as greeting
from highlander._shell.admission import other_app, policy, status_reply
from highlander._shell.backend import LOCAL
from highlander._shell.saving import SaveFlight, Stopped, SuccessorLeft, describe_failure, joined
from highlander._shell.serving_guard import ServingFailed, ServingGuard, Slot, describe, step_down
from highlander._shell.sessions import Sessions, answer_attach
from highlander._shell.watch import watch_parent
from highlander._shell.wire import Overdue, receive_event, send_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (4 ms for a holder)
if TYPE_CHECKING:
    from typing import Any

    from highlander._host.identity import Expected
    from highlander._host.waiting import Flag, Runtime, TaskGroup
    from highlander._shell.saving import SaveHook
    from highlander._shell.seam import Backend

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
        on_deposed: Callable[[Outcome, Runtime], Awaitable[None]],
        backend: Backend = LOCAL,
        sessions: Sessions | None = None,
    ) -> None:
        self.settings = settings
        #: Share mode: who serves attached sessions (:mod:`highlander._shell.sessions`).
        self.sessions = sessions if sessions is not None else Sessions()
        self.sessions.bind(settings)
        self.backend = backend
        self.reign = reign
        self.on_save = on_save
        self.on_deposed = on_deposed
        self.outcome: Outcome | None = None
        self.ended = threading.Event()
        #: The lock and listener are out with a successor that has not confirmed yet.
        self.handed_over = False
        #: From the commit on (a timely ACK): this reign no longer acts as holder.
        self.letting_go = False
        self._successor: PeerCredentials | None = None
        self._successor_start = 0
        #: Deposed predecessors, until they have left (:mod:`highlander._shell.predecessor`).
        self._leaving: list[Expected] = []
        #: What serving runs on; set by :meth:`serve`.
        self.runtime: Runtime = None  # type: ignore[assignment]
        self._guard: ServingGuard = None  # type: ignore[assignment]
        self._stop: Flag | None = None
        self._stop_requested = threading.Event()
        self._tg: TaskGroup | None = None
        #: An error that ended a serving task: the holder steps down with it.
        self._crash: BaseException | None = None
        #: What keeps the socket path from being published again, if anything (_watch).
        self.blocked: str | None = None
        self._flight: SaveFlight | None = None

    async def serve(self, runtime: Runtime, parent: int | None = None) -> Outcome:
        """Serve on ``runtime`` until the reign ends; return how it ended.

        With ``parent``, the reign also ends when that process (the client
        that started us) exits: an orphaned server must not outlive its IDE.
        If serving cannot go on, the holder steps down instead of living on
        deaf (:mod:`highlander._shell.serving_guard`): this never raises an error.
        """
        self.runtime = runtime
        self._guard = ServingGuard(self.settings.events, runtime)
        stop = self._stop = runtime.flag()
        try:
            if self._stop_requested.is_set():  # released before we got going
                return self.outcome or Outcome.RELEASED
            async with runtime.group() as tg:
                self._tg = tg
                tg.spawn(self._guarded, self._accept_loop)
                tg.spawn(self._guarded, self.backend.watch, self)
                if parent is not None:
                    tg.spawn(self._guarded, watch_parent, self, parent)
                for predecessor in self.reign.predecessors:
                    if predecessor.pid != os.getpid():
                        tg.spawn(self._see_out, predecessor)
                if self._stop_requested.is_set():  # stop() came before the flag existed
                    stop.set()
                await stop.wait()
                tg.cancel()
            if self._crash is not None:
                await step_down(self, describe(self._crash))
        except Exception as exc:  # whatever it was, a deaf holder is worse
            await step_down(self, describe(exc))
        finally:
            self.ended.set()
        return self.outcome or Outcome.RELEASED

    async def _guarded(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Run one serving task; an error in it ends the serving (and so the reign)."""
        try:
            await fn(*args)
        except Exception as exc:
            if self._crash is None:
                self._crash = exc
            self.stop()

    async def _see_out(self, predecessor: Expected) -> None:
        """See the deposed predecessor leave; until it has, this succession is not over (BUSY)."""
        self._leaving.append(predecessor)
        try:
            await self.backend.see_out(self, predecessor)
        finally:
            self._leaving.remove(predecessor)

    def stop(self) -> None:
        """Stop serving; callable from any thread, before or while :meth:`serve` runs."""
        self._stop_requested.set()
        stop = self._stop
        if stop is None or self.ended.is_set():
            # Not started (it checks the request first thing), or over: its loop
            # may be finishing, and a call into it now would wait forever.
            return
        stop.set()

    async def deposed(self, outcome: Outcome) -> None:
        """Run the ``on_deposed`` callback of this reign (its hook, on this runtime)."""
        await self.on_deposed(outcome, self.runtime)

    def close_listener(self, *, unlink: bool, listener: Listener | None = None) -> None:
        """Close the listener (or an old one), waking the accept loop first.

        A descriptor closed under a wait wakes nobody, and its number may be reused.
        """
        listener = listener or self.reign.listener
        if self.runtime is not None:  # serving has begun
            self.runtime.notify_closing(listener.sock)
        listener.close(unlink=unlink)

    async def _accept_loop(self) -> None:
        tg = self._tg
        assert tg is not None
        while self.outcome is None:
            listener = self.reign.listener.sock
            try:
                await self.runtime.readable(listener)
            except Closed:
                continue  # replaced: its path was taken and published anew (_watch)
            if listener is not self.reign.listener.sock or self.outcome is not None:
                continue  # replaced after it woke us, before we ran, or the reign is over
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as exc:
                await self._guard.accept_failed(exc)  # backs off, skips, or ServingFailed
                continue
            self._guard.accepted()
            sock.setblocking(False)
            slot = self._guard.open_slot()
            if slot is None:
                sock.close()
                continue
            slot.task = tg.spawn(self._guarded, self._serve_connection, sock, slot)

    def replace_listener(self, listener: Listener) -> None:
        """Serve on ``listener`` from now on (on the loop's thread: the old one's waiters wake)."""
        old = self.reign.listener
        self.reign = self.reign._replace(listener=listener)
        self.close_listener(unlink=False, listener=old)

    async def _serve_connection(self, sock: socket.socket, slot: Slot) -> None:
        peer: PeerCredentials | None = None
        events = self.settings.events
        try:
            peer = self.backend.peer(sock)
            if peer.uid != os.geteuid():
                events.emit(Event.AUTH_FAILED, peer_pid=peer.pid, reason=f"peer uid {peer.uid}")
                return
            await self._converse(sock, peer, slot)
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
            self._guard.close_slot(slot)
            sock.close()

    async def _converse(self, sock: socket.socket, peer: PeerCredentials, slot: Slot) -> None:
        record = self.reign.record
        conn = Connection(
            Role.INCUMBENT,
            key=self.settings.key(),
            nonce=os.urandom(16),
            now=self.runtime.now(),
            timeouts=self.settings.timeouts,
        )
        hello = greeting(self.settings, record, conn.local_nonce, shares=self.sessions.sharing)
        await send_message(sock, conn, hello, self.runtime)
        request = await receive_event(sock, conn, self.runtime)
        self._guard.engaged(slot)  # a real request: no longer evictable
        if isinstance(request, Status):
            reply = status_reply(self.settings, record, busy=self._successor is not None)
            # Not logged: a read-only query leaves no trace (a monitor may ask every second).
            await send_message(sock, conn, reply, self.runtime)
        elif isinstance(request, Save):
            await self._answer_save(sock, conn, request, peer)
        elif isinstance(request, Attach):
            await answer_attach(self, sock, conn, request, peer)

    def busy(self, peer: PeerCredentials) -> Busy | None:
        """BUSY (logged) while a succession runs: ours, or our predecessor's still leaving."""
        events = self.settings.events
        if self._successor is not None:
            events.emit(Event.BUSY, peer_pid=peer.pid, successor_pid=self._successor.pid)
            return Busy(pid=self._successor.pid, start_time=self._successor_start)
        if self._leaving:
            # Our own succession ends when our predecessor has left (or been ended).
            leaving = self._leaving[0]
            events.emit(Event.BUSY, peer_pid=peer.pid, predecessor_pid=leaving.pid)
            return Busy(pid=leaving.pid, start_time=leaving.start_time)
        return None

    async def _refuse(self, sock: socket.socket, conn: Connection, why: Reason, say: str) -> None:
        await send_message(sock, conn, Refused(why, say[:1024]), self.runtime)

    async def _answer_save(
        self, sock: socket.socket, conn: Connection, save: Save, peer: PeerCredentials
    ) -> None:
        events, now_ms = self.settings.events, int(time.time() * 1000)
        refusal = other_app(self.settings, save)
        busy = self.busy(peer) if refusal is None else None
        if busy is not None:
            await send_message(sock, conn, busy, self.runtime)
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
        events, started = self.settings.events, self.runtime.now()
        events.emit(Event.SAVE_REQUESTED, peer_pid=peer.pid, intent=save.intent)
        try:
            local = self.backend.sees(sock)  # a newcomer on this kernel: stopped is visible
            stopped = Stopped(peer.pid, self.settings.timeouts.stall) if local else None
            assert self._tg is not None
            flight = self._flight = joined(self._flight, self.on_save, self.runtime, self._tg)
            handoff = await flight.follow(sock, conn, stopped)
            saved = Saved(handoff=handoff, generation=self.reign.record.generation)
        except SuccessorLeft as left:  # not our successor any more: the next SAVE joins the run
            events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="save", reason=left.reason)
            return
        except Exception as exc:  # the hook's failure is reported, never fatal to the holder
            detail = describe_failure(exc)
            await self._refuse(sock, conn, Reason.INTERNAL, detail)
            events.emit(Event.REFUSED, peer_pid=peer.pid, reason=Reason.INTERNAL, detail=detail)
            return
        if await self.backend.lost_before_saved(self):
            return
        succeed = save.intent is Intent.SUCCEED
        self.handed_over = succeed
        fds = self.backend.descriptors(self.reign) if succeed else []
        await send_message(sock, conn, saved, self.runtime, fds)
        events.emit(
            Event.SAVED,
            peer_pid=peer.pid,
            generation=saved.generation,
            duration_ms=self._ms_since(started),
        )
        # The commit point (highlander._core.commit): only a timely ACK_SUCCESSION
        # gives the project away; whatever else ends this wait, we keep it.
        try:
            ack = await receive_event(sock, conn, self.runtime)
        except Overdue:
            self.handed_over = False
            # An ACK that crosses this is void: say so, so the newcomer lets go at once.
            with contextlib.suppress(OSError):
                await self._refuse(sock, conn, Reason.LATE, LATE)
            await self.backend.take_back(self)  # a stopped successor's copies must not outlive us
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
        outcome = Outcome.DEPOSED if succeed else Outcome.STOPPED
        self._let_go(outcome, peer, started)  # a commit that raises leaves it let go
        if succeed and not await self.backend.commit(self, sock):
            # Nothing moved: this reign acts again, unless it ended another way.
            self.handed_over = self.letting_go = False
            if self.outcome is None:
                generation = self.reign.record.generation
                events.emit(Event.RESUMED, peer_pid=peer.pid, generation=generation)
            return
        await self._step_down(sock, outcome)

    def _ms_since(self, started: float) -> int:
        return int((self.runtime.now() - started) * 1000)

    def _let_go(self, outcome: Outcome, peer: PeerCredentials, started: float) -> None:
        # From the commit on this reign does not act (check_current() fails,
        # is_holder is false), and says so first: over etcd the move may apply at
        # any moment, and the successor holds as soon as its watch shows it.
        self.letting_go = True
        events, generation = self.settings.events, self.reign.record.generation
        events.emit(Event.ACKED, peer_pid=peer.pid, duration_ms=self._ms_since(started))
        events.emit(Event.RELINQUISHED, peer_pid=peer.pid, outcome=outcome, generation=generation)

    async def _step_down(self, sock: socket.socket, outcome: Outcome) -> None:
        self.outcome = outcome
        # A successor has its own copies of the lock and listener: closing ours
        # frees nothing.  After a plain stop nobody does, so the socket goes too.
        self.close_listener(unlink=outcome is Outcome.STOPPED)
        self.reign.lock.release()
        # The end of the stream is the commit's answer: with our lock file closed
        # (the kernel shows it), the successor may begin now, not after our
        # on_deposed and our exit (highlander._core.commit).
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        await self.deposed(outcome)
        self.stop()


def _pid(peer: PeerCredentials | None) -> int | None:
    return peer.pid if peer is not None else None
