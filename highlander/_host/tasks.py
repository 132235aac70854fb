"""The pieces of :mod:`highlander._host.loop`'s tasks: what a task waits on, and how it ends.

A task suspends only by awaiting a :class:`Wait` (the loop's one kind of
request: a descriptor's readiness with a deadline, a pause, a :class:`Flag`,
a :class:`Group`'s end, a function in a worker thread).  :class:`Cancelled`
and :class:`Closed` are what such a wait may raise instead of returning.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator
    from typing import Any

    from highlander._host.loop import SelectorLoop


class Cancelled(BaseException):
    """Raised inside a task that was cancelled, at its current and every later wait."""


class Closed(Exception):  # noqa: N818 - a condition of the descriptor, as anyio's ClosedResourceError
    """The descriptor being waited on was closed (or announced as closing) meanwhile."""


class Wait:
    """What a task asks the loop for when it suspends (the only thing it may yield)."""

    __slots__ = ("abandon", "args", "deadline", "fd", "kind", "mask", "shield", "target")

    def __init__(self, kind: str, *, deadline: float | None = None, shield: bool = False) -> None:
        self.kind = kind
        self.deadline = deadline
        self.shield = shield
        self.fd = -1
        self.mask = 0
        self.target: Any = None
        self.args: tuple[Any, ...] = ()
        self.abandon = False

    def __await__(self) -> Generator[Wait, Any, Any]:
        return (yield self)


class Task:
    """One coroutine on the loop; :meth:`cancel` it from the loop's thread."""

    __slots__ = (
        "_loop",
        "cancelled",
        "coro",
        "done",
        "error",
        "group",
        "parked",
        "result",
        "stamp",
    )

    def __init__(self, loop: SelectorLoop, coro: Coroutine[Any, Any, Any], group: Group | None):
        self._loop = loop
        self.coro = coro
        self.group = group
        self.cancelled = False
        self.done = False
        self.error: BaseException | None = None
        self.result: Any = None
        #: The wait the task is suspended in, if any.
        self.parked: Wait | None = None
        #: Bumped at every wake, so a timer of an earlier wait is ignored.
        self.stamp = 0

    def cancel(self) -> None:
        """Cancel the task: its wait raises :class:`Cancelled` now, and every later one too."""
        self._loop._cancel(self)


class Flag:
    """Set once, from any thread; awaited by tasks on one loop (an ``Event`` without clear)."""

    __slots__ = ("_loop", "_set", "_waiters")

    def __init__(self, loop: SelectorLoop) -> None:
        self._loop = loop
        self._set = False
        self._waiters: list[Task] = []

    def is_set(self) -> bool:
        """Whether :meth:`set` has been called."""
        return self._set

    def set(self) -> None:
        """Set the flag and wake its waiters (from any thread; a no-op after the loop ended)."""
        self._set = True
        if threading.get_ident() == self._loop.thread_id:
            self._fire()
        else:
            self._loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        waiters, self._waiters = self._waiters, []
        for task in waiters:
            self._loop._wake(task)

    async def wait(self) -> None:
        """Wait until the flag is set."""
        if not self._set:
            wait = Wait("flag")
            wait.target = self
            await wait


class Group:
    """Tasks started together; leaving ``async with`` waits until all of them ended.

    A child's error (anything but :class:`Cancelled`) cancels its siblings
    and is raised when the group closes, as in a nursery.
    """

    def __init__(self, loop: SelectorLoop) -> None:
        self._loop = loop
        self._tasks: set[Task] = set()
        self._error: BaseException | None = None
        self._host: Task | None = None

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Task:
        """Start ``fn(*args)`` as a child task; returns it (for :meth:`Task.cancel`)."""
        task = self._loop._start(fn(*args), self)
        self._tasks.add(task)
        return task

    def cancel(self) -> None:
        """Cancel every child still running."""
        for task in list(self._tasks):
            task.cancel()

    def _ended(self, task: Task) -> None:
        self._tasks.discard(task)
        if task.error is not None and self._error is None:
            self._error = task.error
            self.cancel()
        if not self._tasks and self._host is not None:
            host, self._host = self._host, None
            self._loop._wake(host)

    async def __aenter__(self) -> Group:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if exc is not None:
            self.cancel()
        while self._tasks:
            await group_wait(self)
        if self._error is not None and exc is None:
            raise self._error
        return False


def group_wait(group: Group) -> Wait:
    wait = Wait("group", shield=True)
    wait.target = group
    return wait
