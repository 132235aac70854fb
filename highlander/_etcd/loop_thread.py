"""The etcd session's own loop: a :class:`~highlander._host.loop.SelectorLoop` in a daemon thread.

The lease must be renewed whatever the application does with its event
loop, or without one, so the session's client, keeper and watches run on
a loop of their own.  It is the serving side's selector loop, not asyncio:
a newcomer that talks to etcd then imports neither asyncio nor anyio
(about half of its start, measured in docs/performance.md), and a holder
carries no second event loop.

Other threads reach the loop through :meth:`LoopThread.call` (run a
coroutine function there and wait for its result) and
:meth:`LoopThread.spawn` (start it; a :class:`Spawned` says how it ended),
what anyio's blocking portal gave before.  A daemon thread: a process that
leaves without closing its session (an error at the claim, ``sys.exit``)
must not wait for it.
"""

from __future__ import annotations

import threading

from highlander._host.loop import SelectorLoop
from highlander._host.tasks import Cancelled

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from typing import Any

    from highlander._host.tasks import Group, Task

#: How long starting the loop's thread may take (a hang guard: it takes microseconds).
START_LIMIT = 30.0


class SpawnCancelled(Exception):  # noqa: N818 - a state, as concurrent.futures' CancelledError
    """The coroutine was cancelled (or its loop ended) before it returned."""


class Spawned:
    """A coroutine started on the loop, as another thread sees it (a small Future)."""

    def __init__(self, owner: LoopThread) -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._cancelled = False
        self._cancel_asked = False
        self._callbacks: list[Callable[[Spawned], object]] = []
        self.task: Task | None = None

    def cancel(self) -> bool:
        """Cancel it (from any thread); ``False`` if it had ended already."""
        with self._lock:
            if self._ended.is_set():
                return False
            self._cancel_asked = True
        self._owner.loop.call_soon_threadsafe(self._cancel_on_loop)
        return True

    def _cancel_on_loop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    def done(self) -> bool:
        """Whether it has ended (returned, raised or been cancelled)."""
        return self._ended.is_set()

    def cancelled(self) -> bool:
        """Whether it ended by a cancellation."""
        return self._cancelled

    def result(self, timeout: float | None = None) -> Any:
        """Its return value, once it ended; raises what it raised (or :class:`SpawnCancelled`)."""
        if not self._ended.wait(timeout):
            raise TimeoutError("the etcd session's task did not end in time")
        if self._cancelled:
            raise SpawnCancelled("the etcd session's task was cancelled")
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self) -> BaseException | None:
        """What it raised, once it ended (``None`` if it returned)."""
        self._ended.wait()
        if self._cancelled:
            raise SpawnCancelled("the etcd session's task was cancelled")
        return self._error

    def add_done_callback(self, callback: Callable[[Spawned], object]) -> None:
        """Call ``callback(self)`` when it ends (at once if it has: on the caller's thread)."""
        with self._lock:
            if not self._ended.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def finish(self, result: Any, error: BaseException | None, cancelled: bool) -> None:
        """Record how it ended and run the callbacks (once; on the loop's thread)."""
        with self._lock:
            if self._ended.is_set():
                return
            self._result, self._error, self._cancelled = result, error, cancelled
            self._ended.set()
            callbacks, self._callbacks = self._callbacks, []
        self._owner.pending.discard(self)
        for callback in callbacks:
            callback(self)


async def _run(spawned: Spawned, fn: Callable[..., Coroutine[Any, Any, Any]], args: Any) -> None:
    try:
        result = await fn(*args)
    except Cancelled:
        spawned.finish(None, None, True)
        raise
    except BaseException as exc:  # the starter's to see: siblings go on
        spawned.finish(None, exc, False)
        return
    spawned.finish(result, None, False)


class LoopThread:
    """A :class:`SelectorLoop` serving coroutines for other threads until :meth:`stop`."""

    def __init__(self, name: str = "highlander-etcd") -> None:
        """Start the loop's daemon thread; return once it runs."""
        self.loop = SelectorLoop()
        self.pending: set[Spawned] = set()
        self._stop = self.loop.flag()
        self._group: Group | None = None
        self._stopped = False
        ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, args=(ready,), name=name, daemon=True)
        self.thread.start()
        if not ready.wait(START_LIMIT):
            raise RuntimeError("the etcd session's loop did not start")

    def _serve(self, ready: threading.Event) -> None:
        async def main() -> None:
            async with self.loop.group() as group:
                self._group = group
                ready.set()
                await self._stop.wait()
                group.cancel()

        try:
            self.loop.run(main)
        finally:
            self._stopped = True
            for spawned in list(self.pending):  # ended with the loop, never finished
                spawned.finish(None, None, True)

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Spawned:
        """Start ``fn(*args)`` on the loop; do not wait."""
        if self._stopped:
            raise RuntimeError("the etcd session is closed")
        spawned = Spawned(self)
        self.pending.add(spawned)

        def start() -> None:
            if spawned._cancel_asked or self._group is None:
                spawned.finish(None, None, True)
            else:
                spawned.task = self._group.spawn(_run, spawned, fn, args)

        self.loop.call_soon_threadsafe(start)
        if self._stopped:  # the loop ended between the check and the call: nobody runs it
            spawned.finish(None, None, True)
        return spawned

    def call(
        self,
        fn: Callable[..., Coroutine[Any, Any, Any]],
        *args: Any,
        meanwhile: Callable[[], bool] | None = None,
    ) -> Any:
        """Run ``fn(*args)`` on the loop and wait for its result (from another thread).

        ``meanwhile``: work for the waiting thread, a step per call, until
        it returns ``False`` or the result is in (the result then waits for
        at most the step under way).
        """
        return self.wait(self.spawn(fn, *args), meanwhile)

    def wait(self, spawned: Spawned, meanwhile: Callable[[], bool] | None = None) -> Any:
        """Wait for ``spawned``'s result (from another thread), ``meanwhile`` as in :meth:`call`."""
        if threading.get_ident() == self.loop.thread_id:
            raise RuntimeError("the etcd session's loop cannot wait for itself")
        while meanwhile is not None and not spawned.done() and meanwhile():
            pass
        return spawned.result()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop (its tasks are cancelled) and wait up to ``timeout`` for its thread."""
        self._stop.set()
        if threading.get_ident() != self.loop.thread_id:
            self.thread.join(timeout)
