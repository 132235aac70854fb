"""Running the save hook, one run at a time, while its progress goes out as PROGRESS frames.

A :class:`SaveFlight` is one run of ``on_save``.  It belongs to the holder,
not to the conversation that asked for it: a newcomer that dies mid-save
does not stop it (a sync hook in a worker thread could not be stopped
anyway), and the next request while it runs *joins* it instead of starting
a second save next to it.  An application's save is rarely safe to run twice
at once.  A request that comes after the run ended starts a new one: the
state may have changed since.

The hook runs in a worker thread (sync) or on the loop (async); each
``Progress.advance()`` wakes the follower's pump, which sends the latest
state, so the hook never waits on the network and a slow peer never delays
the save.  The hook's own exception is kept whole (:attr:`SaveFlight.error`)
so the refusal names it (:func:`describe_failure`: type and message, the
leaves of an exception group), and its traceback goes to the holder's stderr
once per run (``save_hook_failed``).

A follower also watches its conversation for the newcomer's end: a newcomer
that left (killed, or gone after judging the save stalled) is no longer the
holder's successor, even while a hung hook reports nothing that would fail
to reach it (:class:`SuccessorLeft`).  Otherwise the holder would answer
every later newcomer BUSY in the name of the one that left, and none could
join the run and judge it.  A newcomer this kernel shows stopped (SIGSTOP,
a terminal's Ctrl-Z, a debugger) for ``stall`` is let go the same way
(:class:`Stopped`): it cannot judge the save, and keeping its conversation
open would wedge the project for as long as it stays stopped.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable

from highlander._core.connection import Connection
from highlander._core.errors import ProtocolError
from highlander._core.messages import ProgressReport
from highlander._host.identity import run_state
from highlander._host.log import log
from highlander._shell.hooks import call_hook
from highlander._shell.progress import Progress
from highlander._shell.wire import send_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (4 ms for a holder)
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from highlander._host.waiting import Flag, Runtime, TaskGroup

    #: The application's ``on_save``: called with a :class:`Progress`, returns the handoff.
    SaveHook: TypeAlias = Callable[[Progress], Any]


#: A save that ends within this many seconds of its request is answered by SAVED
#: alone, without the PROGRESS "saving" that tells a newcomer a longer one began:
#: over etcd each frame is a write through raft, and SAVED waited for this one's
#: answer (one write fewer; no gain the bench could show alone, docs/performance.md).
#: No newcomer's deadline is near that short (its stall allowance is seconds).
QUIET_SAVE = 0.02


class SuccessorLeft(Exception):  # noqa: N818 - an event, not a failure of ours
    """The newcomer a save was for ended its conversation before SAVED (or was let go).

    The run goes on (the next request joins it); the conversation is over.
    ``reason``: for the ``timeout`` event (``successor left``, ``successor stopped``).
    """

    def __init__(self, message: str, reason: str = "successor left") -> None:
        super().__init__(message)
        self.reason = reason


class Stopped:
    """Whether the successor ``pid`` (on this kernel) has stayed stopped for ``stall``.

    Sampled every ``stall / 4`` while the follower waits: a stop is counted
    from the first sample that shows it, so a newcomer is let go after
    ``stall`` to ``1.25 * stall`` of being stopped, never sooner.
    """

    def __init__(self, pid: int, stall: float) -> None:
        """Watch ``pid`` with the patience ``stall`` (seconds)."""
        self.pid = pid
        self.stall = stall
        self.every = stall / 4
        self._since: float | None = None

    def past(self, now: float) -> bool:
        """Whether it has been stopped since at least ``stall`` before ``now``."""
        sample = run_state(self.pid, threads=False)
        if sample is None or sample.state not in "Tt":
            self._since = None  # running again, or gone (its end of stream says so)
            return False
        if self._since is None:
            self._since = now
        return now - self._since >= self.stall


class SaveFlight:
    """One run of the save hook, followed by whichever conversation asks for it."""

    def __init__(self, hook: SaveHook | None, runtime: Runtime) -> None:
        self.hook = hook
        self.runtime = runtime
        self.progress = Progress(self._notify)
        self.finished = runtime.flag()
        self.handoff: dict[str, Any] | None = None
        #: The hook's exception (or the reason its result is unusable), if it failed.
        self.error: BaseException | None = None
        self._wakes: list[Flag] = []

    @property
    def running(self) -> bool:
        """Whether the hook has not returned yet."""
        return not self.finished.is_set()

    def start(self, group: TaskGroup) -> None:
        """Run the hook in ``group`` (the holder's, so no conversation's end cancels it)."""
        group.spawn(self._fly)

    async def _fly(self) -> None:
        try:
            value = await _call_hook(self.runtime, self.hook, self.progress)
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"on_save must return a dict or None, not {type(value).__name__}")
            self.handoff = value
        except Exception as exc:  # reported to the newcomer and in the event log
            self.error = exc
            log(
                "warning",
                "save_hook_failed",
                error=_name(exc),
                traceback=_traceback(exc),
            )
        finally:
            self.finished.set()
            self._wake_all()

    def _notify(self) -> None:
        # From the hook's thread as a rule: a flag may be set from any thread,
        # and one set after its loop ended wakes nobody (the save outlived its holder).
        self._wake_all()

    def _wake_all(self) -> None:
        for wake in list(self._wakes):
            wake.set()

    async def follow(
        self, sock: socket.socket, conn: Connection, stopped: Stopped | None = None
    ) -> dict[str, Any] | None:
        """Send this run's progress as PROGRESS frames until it ends; return its handoff.

        A run that ends within :data:`QUIET_SAVE` sends none: SAVED follows SAVE.

        Raises the hook's exception if it failed, :class:`SuccessorLeft` if the
        newcomer left (or, watched by ``stopped``, stayed stopped too long).
        """
        runtime = self.runtime
        if not await self._ends_within(QUIET_SAVE):
            await send_message(sock, conn, ProgressReport(counter=0, note="saving"), runtime)
        left: list[SuccessorLeft] = []
        leaving = runtime.flag()
        failure: Exception | None = None
        async with runtime.group() as tasks:
            tasks.spawn(self._notice_leaving, sock, leaving, left, stopped)
            try:
                await self._pump(sock, conn, leaving, left)
            except Exception as exc:  # raised below: anyio's group would wrap it in a group
                failure = exc
            tasks.cancel()
        if failure is not None:
            raise failure
        if self.error is not None:
            raise self.error
        return self.handoff

    async def _ends_within(self, seconds: float) -> bool:
        """Whether the run ends within ``seconds`` (sooner if the hook reports progress)."""
        if not self.running:
            return True
        wake = self.runtime.flag()
        self._wakes.append(wake)
        try:
            async with self.runtime.group() as tasks:
                tasks.spawn(_ring, self.runtime, wake, seconds)
                await wake.wait()
                tasks.cancel()
        finally:
            self._wakes.remove(wake)
        return not self.running

    async def _pump(
        self, sock: socket.socket, conn: Connection, leaving: Flag, left: list[SuccessorLeft]
    ) -> None:
        """Send each new state of the progress until the run ends (or the newcomer left)."""
        runtime, sent = self.runtime, 0
        while True:
            wake = runtime.flag()
            self._wakes.append(wake)
            try:
                if leaving.is_set():
                    raise left[0]
                state = self.progress.state
                if state.counter > sent:
                    step = ProgressReport(state.counter, state.done, state.total, state.note)
                    await send_message(sock, conn, step, runtime)
                    sent = state.counter
                    continue
                if not self.running:
                    return
                await wake.wait()
            finally:
                self._wakes.remove(wake)

    async def _notice_leaving(
        self, sock: socket.socket, leaving: Flag, left: list[SuccessorLeft], stopped: Stopped | None
    ) -> None:
        """Set ``leaving`` (and wake the follower) when the newcomer's end of ``sock`` is gone.

        The protocol has the newcomer send nothing between SAVE and SAVED, so
        readable means its end of stream (or a reset); a byte that comes
        anyway is left for the reader after SAVED to judge.  With ``stopped``,
        also when the kernel has shown the newcomer stopped for its ``stall``.
        """
        runtime = self.runtime
        while True:
            try:
                if not await runtime.readable(sock, None if stopped is None else stopped.every):
                    assert stopped is not None
                    if stopped.past(runtime.now()):
                        left.append(
                            SuccessorLeft(
                                f"the newcomer (pid {stopped.pid}) stayed stopped for "
                                f"{stopped.stall:g} s during the save",
                                "successor stopped",
                            )
                        )
                        break
                    continue
                data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:  # reset: gone as surely as an end of stream
                data = b""
            except Exception:  # the socket closed under us (Closed): the follower sees to it
                return
            if data:
                return
            left.append(SuccessorLeft("the newcomer ended its conversation during the save"))
            break
        leaving.set()
        self._wake_all()


def joined(
    flight: SaveFlight | None, hook: SaveHook | None, runtime: Runtime, group: TaskGroup
) -> SaveFlight:
    """``flight`` while it runs, or a new run started in ``group``: never two at once.

    A newcomer may have died mid-save; its save runs on, and the next request
    follows it.
    """
    if flight is None or not flight.running:
        flight = SaveFlight(hook, runtime)
        flight.start(group)
    return flight


async def _ring(waiter: Runtime, wake: Flag, seconds: float) -> None:
    await waiter.sleep(seconds)
    wake.set()


#: Frames of a failed hook's traceback kept on stderr (the innermost ones).
TRACEBACK_FRAMES = 12


def describe_failure(exc: BaseException) -> str:
    """What a failed save says to the newcomer and in the event log: the original error.

    ``the save hook failed: ValueError: disk full``; for an exception group
    (a task group inside the hook), its innermost errors, not the group's
    own generic message.
    """
    if isinstance(exc, ProtocolError):
        return f"the save hook's handoff is invalid: {exc}"
    return f"the save hook failed: {_name(exc)}"


def _name(exc: BaseException) -> str:
    leaves = _leaves(exc)
    named = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves[:3])
    if len(leaves) > 3:
        named += f"; and {len(leaves) - 3} more"
    return named


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _traceback(exc: BaseException) -> str:
    """The hook's traceback from its own first frame (ours and anyio's left out)."""
    import traceback  # noqa: PLC0415 - only when a hook failed

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _plumbing(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb, limit=-TRACEBACK_FRAMES)
    return "".join(lines).rstrip()


#: The whole package, not only this folder: the hook caller lives beside us, but
#: the frames between the holder and the hook may come from any floor.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plumbing(filename: str) -> bool:
    """Whether a frame is Highlander's or anyio's, between the holder and the hook."""
    anyio = sys.modules.get("anyio")  # the async API's holder runs on it; the sync one does not
    where = os.path.dirname(anyio.__file__ or _PACKAGE) if anyio is not None else _PACKAGE
    return filename.startswith((_PACKAGE, where))


async def _call_hook(runtime: Runtime, hook: SaveHook | None, progress: Progress) -> Any:
    if hook is None:
        return None
    return await call_hook(runtime, hook, progress, abandon_on_cancel=True)
