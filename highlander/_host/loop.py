"""The sync holder's serving loop: the shell's coroutines over ``selectors``, no asyncio.

A sync holder serves newcomers from a background thread.  That thread used
to run anyio's asyncio backend, which cost every idle holder about 2 MB of
memory for an event loop it uses for a handful of descriptors.  This module
is the whole event loop that the serving side needs, and nothing more:

* tasks are coroutines that wait only through :class:`SelectorLoop`'s own
  awaitables (readiness of a descriptor with a deadline, a pause, a
  :class:`Flag`, a function run in a worker thread);
* a :class:`Group` starts tasks and waits for all of them when it closes;
* cancellation is per task and level-triggered: once cancelled, every later
  wait of that task raises :class:`Cancelled` (a ``BaseException``, so the
  shell's ``except Exception`` never swallows it), except the group's own
  wait for its children, so a cancelled task can still clean up;
* other threads reach the loop only through :meth:`SelectorLoop.call_soon_threadsafe`
  (a self-pipe wakes the selector), which is what :meth:`Flag.set` uses.

The async API runs the same shell code on the caller's anyio loop instead
(:data:`highlander._host.waiting.ANYIO`); both satisfy the ``Runtime``
protocol in :mod:`highlander._host.waiting`.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import itertools
import os
import selectors
import threading
import time

from highlander._host.tasks import Cancelled, Closed, Flag, Group, Task, Wait

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine
    from typing import Any

    from highlander._host.waiting import Waitable

#: How long the loop, once its main task has returned, waits for the tasks
#: it cancelled to finish (they only run their ``finally`` blocks).
DRAIN_LIMIT = 1.0


class SelectorLoop:
    """Runs tasks on the calling thread until the main one returns; see the module docstring."""

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._ready: collections.deque[tuple[Task, Any, BaseException | None]] = collections.deque()
        self._calls: collections.deque[Callable[[], object]] = collections.deque()
        self._timers: list[tuple[float, int, Task, int]] = []
        self._order = itertools.count()
        #: fd -> [the task waiting to read, the task waiting to write]
        self._io: dict[int, list[Task | None]] = {}
        self._tasks: set[Task] = set()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = False
        self._pipe_lock = threading.Lock()
        self.thread_id = 0

    # -- the Waiter protocol ----------------------------------------------------

    def now(self) -> float:
        """Seconds on the monotonic clock (the clock every deadline uses)."""
        return time.monotonic()

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """Wait until ``fd`` is readable; ``False`` if ``timeout`` passed first."""
        return bool(await self._io_wait(fd, selectors.EVENT_READ, timeout))

    async def writable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """Wait until ``fd`` is writable; ``False`` if ``timeout`` passed first."""
        return bool(await self._io_wait(fd, selectors.EVENT_WRITE, timeout))

    async def sleep(self, seconds: float) -> None:
        """Pause for ``seconds`` (zero or less: let the other ready tasks run first)."""
        await Wait("sleep", deadline=time.monotonic() + max(seconds, 0.0))

    # -- the rest of the Runtime protocol ---------------------------------------

    def group(self) -> Group:
        """A new group of tasks (``async with loop.group() as g: g.spawn(...)``)."""
        return Group(self)

    def flag(self) -> Flag:
        """A new :class:`Flag` on this loop."""
        return Flag(self)

    async def to_thread(
        self, fn: Callable[..., Any], *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        """Run ``fn(*args)`` in a new daemon thread; return its result or raise its error.

        Cancelled meanwhile, the task waits for the thread to return and
        then raises :class:`Cancelled`; with ``abandon_on_cancel`` it raises
        at once and the thread's result is dropped (a thread cannot be stopped).
        """
        wait = Wait("thread")
        wait.target, wait.args, wait.abandon = fn, args, abandon_on_cancel
        return await wait

    async def run_coroutine(self, awaitable: Awaitable[Any], *, abandon_on_cancel: bool) -> Any:
        """Await an application's awaitable (an ``async def`` hook) on an asyncio loop of its own.

        The hook may use anything asyncio offers, which this loop does not:
        it runs with ``asyncio.run`` in a worker thread.
        """
        return await self.to_thread(_run_on_asyncio, awaitable, abandon_on_cancel=abandon_on_cancel)

    def notify_closing(self, fd: Waitable) -> None:
        """Wake the tasks waiting on ``fd`` with :class:`Closed` (call before closing it)."""
        number = fd if isinstance(fd, int) else fd.fileno()
        for task in list(self._io.get(number, ())):
            if task is not None:
                self._unpark(task)
                self._ready.append((task, None, Closed(f"descriptor {number} was closed")))

    def call_soon_threadsafe(self, call: Callable[[], object]) -> None:
        """Run ``call`` on the loop's thread soon (from any thread; dropped once the loop ended)."""
        self._calls.append(call)
        # Under the lock: once the pipe is closed its number may belong to
        # another file, which must never receive our wake-up byte.
        with self._pipe_lock:
            if self._closed:
                return
            # A full pipe: the loop is awake anyway.
            with contextlib.suppress(BlockingIOError):
                os.write(self._wake_w, b"\0")

    def run(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        """Run ``fn(*args)`` as the main task until it returns; return its result.

        Tasks still running then are cancelled and given :data:`DRAIN_LIMIT`
        to finish.  The loop cannot be run twice.
        """
        self.thread_id = threading.get_ident()
        main = self._start(fn(*args), None)
        try:
            while not main.done:
                self._tick()
            for task in list(self._tasks):
                task.cancel()
            until = time.monotonic() + DRAIN_LIMIT
            while self._tasks and time.monotonic() < until:
                self._tick(until)
        finally:
            self._close()
        if main.error is not None:
            raise main.error
        return main.result

    # -- the scheduler ------------------------------------------------------------

    def _io_wait(self, fd: Waitable, mask: int, timeout: float | None) -> Wait:
        number = fd if isinstance(fd, int) else fd.fileno()
        if number < 0:
            raise Closed("the descriptor is closed")
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        wait = Wait("io", deadline=deadline)
        wait.fd, wait.mask = number, mask
        return wait

    def _start(self, coro: Coroutine[Any, Any, Any], group: Group | None) -> Task:
        task = Task(self, coro, group)
        self._tasks.add(task)
        self._ready.append((task, None, None))
        return task

    def _tick(self, limit: float | None = None) -> None:
        timeout: float | None = None
        if self._ready or self._calls:
            timeout = 0.0
        else:
            soonest = self._timers[0][0] if self._timers else limit
            if limit is not None and soonest is not None:
                soonest = min(soonest, limit)
            if soonest is not None:
                timeout = max(0.0, soonest - time.monotonic())
        for key, mask in self._selector.select(timeout):
            if key.fd == self._wake_r:
                self._drain_wakeups()
            else:
                self._io_ready(key.fd, mask)
        while self._calls:
            self._calls.popleft()()
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, task, stamp = heapq.heappop(self._timers)
            if stamp == task.stamp and task.parked is not None:
                self._wake(task, False)
        for _ in range(len(self._ready)):
            task, value, error = self._ready.popleft()
            self._step(task, value, error)

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    def _io_ready(self, fd: int, mask: int) -> None:
        slots = self._io.get(fd)
        if slots is None:
            return
        for index, bit in ((0, selectors.EVENT_READ), (1, selectors.EVENT_WRITE)):
            task = slots[index]
            if task is not None and mask & bit:
                self._wake(task, True)

    def _step(self, task: Task, value: Any, error: BaseException | None) -> None:
        if task.done:
            return
        try:
            wait = task.coro.throw(error) if error is not None else task.coro.send(value)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
        except Cancelled:
            self._finish(task, None, None)
        except BaseException as exc:
            self._finish(task, None, exc)
        else:
            self._park(task, wait)

    def _finish(self, task: Task, result: Any, error: BaseException | None) -> None:
        task.done, task.error, task.result = True, error, result
        self._tasks.discard(task)
        if task.group is not None:
            task.group._ended(task)

    def _park(self, task: Task, wait: object) -> None:
        if not isinstance(wait, Wait):
            # An asyncio (or trio) awaitable: only the application's own code yields those.
            problem = RuntimeError(
                f"{wait!r} was awaited on Highlander's serving loop, which is not asyncio; "
                "use the async API (async with Highlander(...)) for hooks that need one"
            )
            self._ready.append((task, None, problem))
            return
        if task.cancelled and not wait.shield:
            self._ready.append((task, None, Cancelled()))
            return
        task.parked = wait
        if wait.deadline is not None:
            heapq.heappush(self._timers, (wait.deadline, next(self._order), task, task.stamp))
        kind = wait.kind
        if kind == "io":
            self._watch_fd(task, wait)
        elif kind == "flag":
            wait.target._waiters.append(task)
        elif kind == "group":
            if wait.target._tasks:
                wait.target._host = task
            else:
                self._wake(task)
        elif kind == "thread":
            self._start_thread(task, wait)
        # "sleep": the timer pushed above is all it needs.

    def _watch_fd(self, task: Task, wait: Wait) -> None:
        slots = self._io.setdefault(wait.fd, [None, None])
        index = 0 if wait.mask == selectors.EVENT_READ else 1
        if slots[index] is not None:
            self._unpark(task)
            busy = RuntimeError(f"another task already waits on descriptor {wait.fd}")
            self._ready.append((task, None, busy))
            return
        slots[index] = task
        try:
            self._register(wait.fd)
        except (OSError, ValueError) as exc:  # closed under us, or never valid
            self._unpark(task)
            self._ready.append((task, None, Closed(f"descriptor {wait.fd}: {exc}")))

    def _register(self, fd: int) -> None:
        slots = self._io.get(fd, [None, None])
        mask = selectors.EVENT_READ if slots[0] else 0
        mask |= selectors.EVENT_WRITE if slots[1] else 0
        try:
            registered = self._selector.get_key(fd).events
        except KeyError:
            registered = 0
        if mask == registered:
            return
        if not mask:
            self._io.pop(fd, None)
            # Already closed: epoll forgot it itself.
            with contextlib.suppress(KeyError, OSError, ValueError):
                self._selector.unregister(fd)
        elif registered:
            self._selector.modify(fd, mask)
        else:
            self._selector.register(fd, mask)

    def _start_thread(self, task: Task, wait: Wait) -> None:
        def work() -> None:
            try:
                result, error = wait.target(*wait.args), None
            except BaseException as exc:
                result, error = None, exc
            self.call_soon_threadsafe(lambda: self._thread_done(task, wait, result, error))

        threading.Thread(target=work, name="highlander-hook", daemon=True).start()

    def _thread_done(
        self, task: Task, wait: Wait, result: Any, error: BaseException | None
    ) -> None:
        if task.parked is not wait:
            return  # abandoned on cancel: the result has nobody to go to
        self._unpark(task)
        self._ready.append((task, result, Cancelled() if task.cancelled else error))

    def _wake(self, task: Task, value: Any = None) -> None:
        self._unpark(task)
        self._ready.append((task, value, None))

    def _unpark(self, task: Task) -> None:
        wait, task.parked = task.parked, None
        task.stamp += 1
        if wait is None:
            return
        if wait.kind == "io":
            slots = self._io.get(wait.fd)
            if slots is not None:
                slots[0 if wait.mask == selectors.EVENT_READ else 1] = None
                self._register(wait.fd)
        elif wait.kind == "flag":
            waiters = wait.target._waiters
            if task in waiters:
                waiters.remove(task)
        elif wait.kind == "group" and wait.target._host is task:
            wait.target._host = None

    def _cancel(self, task: Task) -> None:
        if task.done or task.cancelled:
            return
        task.cancelled = True
        wait = task.parked
        if wait is None or wait.shield or (wait.kind == "thread" and not wait.abandon):
            return  # running or ready now (it raises at its next wait), or waits on, shielded
        self._unpark(task)
        self._ready.append((task, None, Cancelled()))

    def _close(self) -> None:
        with self._pipe_lock:
            self._closed = True
            self._selector.close()
            os.close(self._wake_r)
            os.close(self._wake_w)


def _run_on_asyncio(awaitable: Awaitable[Any]) -> Any:
    import asyncio  # noqa: PLC0415 - only an application's async hook needs it

    async def main() -> Any:
        return await awaitable

    return asyncio.run(main())
