"""How the I/O shell waits: on the caller's event loop, or by blocking its thread.

The conversation code (:mod:`highlander._shell.wire`, :mod:`highlander._shell.client`,
:mod:`highlander._shell.newcomer`, :mod:`highlander._host.termination`) is written once,
as coroutines that wait only through a :class:`Waiter`.  :data:`ANYIO` waits
on the running anyio loop (the incumbent, the async API).  With
:data:`BLOCKING` every wait is a ``poll(2)`` or a sleep in the calling thread,
so none of those coroutines ever suspends and :func:`run_blocking` runs them
to completion with no event loop at all: a sync newcomer pays neither for
importing asyncio nor for starting a loop before it holds the project.  This
is httpcore's ``_sync``/``_async`` pair without a generated second copy.
"""

from __future__ import annotations

import math
import select
import time
from collections.abc import Awaitable, Callable, Coroutine

from highlander._host.blocking import run_blocking

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, Protocol
else:  # the classes below are only structural types: plain bases do at run time
    Protocol = object

# run_blocking lives in _host/blocking (the free claim needs it without
# typing); it is re-exported here beside the waiters it drives.
__all__ = ["ANYIO", "BLOCKING", "Runtime", "Waitable", "Waiter", "run_blocking"]


class _FileLike(Protocol):
    def fileno(self) -> int: ...


Waitable = int | _FileLike


class Waiter(Protocol):
    """The only ways the shell waits: a clock, readiness of a descriptor, a pause."""

    def now(self) -> float:
        """Seconds on this waiter's monotonic clock (the clock deadlines use)."""
        ...

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """Wait until ``fd`` is readable; ``False`` if ``timeout`` passed first."""
        ...

    async def writable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """Wait until ``fd`` is writable; ``False`` if ``timeout`` passed first."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Pause for ``seconds``."""
        ...


class Cancellable(Protocol):
    """A started task, as far as its starter is concerned."""

    def cancel(self) -> None:
        """Cancel it: its current wait, and every later one, raises."""
        ...


class TaskGroup(Protocol):
    """Tasks started together; leaving ``async with`` waits for all of them."""

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Cancellable:
        """Start ``fn(*args)`` in the group."""
        ...

    def cancel(self) -> None:
        """Cancel every task of the group."""
        ...

    async def __aenter__(self) -> TaskGroup: ...

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any: ...


class Flag(Protocol):
    """Set once from any thread, awaited on the runtime's loop."""

    def set(self) -> None:
        """Set it and wake its waiters (from any thread)."""
        ...

    def is_set(self) -> bool:
        """Whether it was set."""
        ...

    async def wait(self) -> None:
        """Wait until it is set."""
        ...


class Runtime(Waiter, Protocol):
    """A :class:`Waiter` that also runs tasks: what the holder's serving side runs on."""

    def group(self) -> TaskGroup:
        """A new task group."""
        ...

    def flag(self) -> Flag:
        """A new flag."""
        ...

    async def to_thread(
        self, fn: Callable[..., Any], *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        """Run ``fn(*args)`` in a worker thread (an application hook that may block)."""
        ...

    async def run_coroutine(self, awaitable: Awaitable[Any], *, abandon_on_cancel: bool) -> Any:
        """Await an application's awaitable (an ``async def`` hook)."""
        ...

    def notify_closing(self, fd: Waitable) -> None:
        """Wake whoever waits on ``fd`` with :class:`highlander._host.tasks.Closed`."""
        ...


class _Blocking:
    """Waits by blocking the calling thread; its coroutines never suspend."""

    def now(self) -> float:
        return time.monotonic()

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        return _poll(fd, select.POLLIN, timeout)

    async def writable(self, fd: Waitable, timeout: float | None = None) -> bool:
        return _poll(fd, select.POLLOUT, timeout)

    async def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0))


class _Anyio:
    """Waits and runs tasks on the running anyio event loop (asyncio or trio)."""

    def now(self) -> float:
        import anyio  # noqa: PLC0415 - only code that already runs on a loop gets here

        return anyio.current_time()

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        import anyio  # noqa: PLC0415

        from highlander._host.tasks import Closed  # noqa: PLC0415

        with anyio.move_on_after(math.inf if timeout is None else timeout):
            try:
                await anyio.wait_readable(fd)
            except anyio.ClosedResourceError as exc:
                raise Closed(str(exc)) from exc
            return True
        return False

    async def writable(self, fd: Waitable, timeout: float | None = None) -> bool:
        import anyio  # noqa: PLC0415

        with anyio.move_on_after(math.inf if timeout is None else timeout):
            await anyio.wait_writable(fd)
            return True
        return False

    async def sleep(self, seconds: float) -> None:
        import anyio  # noqa: PLC0415

        await anyio.sleep(seconds)

    def group(self) -> TaskGroup:
        return _AnyioGroup()

    def flag(self) -> Flag:
        return _AnyioFlag()

    async def to_thread(
        self, fn: Callable[..., Any], *args: Any, abandon_on_cancel: bool = False
    ) -> Any:
        import anyio.to_thread  # noqa: PLC0415

        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel)

    async def run_coroutine(self, awaitable: Awaitable[Any], *, abandon_on_cancel: bool) -> Any:
        return await awaitable  # the caller's own loop: the hook's natural home

    def notify_closing(self, fd: Waitable) -> None:
        import anyio  # noqa: PLC0415

        anyio.notify_closing(fd)


class _AnyioGroup:
    """An anyio task group whose tasks can be cancelled one by one."""

    def __init__(self) -> None:
        import anyio  # noqa: PLC0415

        self._tg = anyio.create_task_group()

    def spawn(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Cancellable:
        import anyio  # noqa: PLC0415

        scope = anyio.CancelScope()

        async def run() -> None:
            with scope:
                await fn(*args)

        self._tg.start_soon(run)
        return scope

    def cancel(self) -> None:
        self._tg.cancel_scope.cancel()

    async def __aenter__(self) -> TaskGroup:
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        return await self._tg.__aexit__(exc_type, exc, tb)


class _AnyioFlag:
    """An ``anyio.Event`` that any thread may set."""

    def __init__(self) -> None:
        import threading  # noqa: PLC0415

        import anyio  # noqa: PLC0415
        import anyio.lowlevel  # noqa: PLC0415

        self._event = anyio.Event()
        self._token = anyio.lowlevel.current_token()
        self._thread = threading.get_ident()

    def set(self) -> None:
        import threading  # noqa: PLC0415

        import anyio.from_thread  # noqa: PLC0415

        if threading.get_ident() == self._thread:
            self._event.set()
            return
        import contextlib  # noqa: PLC0415

        with contextlib.suppress(Exception):  # the loop is gone: nobody is left to wake
            anyio.from_thread.run_sync(self._event.set, token=self._token)

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


#: Wait by blocking the thread; drive the coroutines with :func:`run_blocking`.
BLOCKING: Waiter = _Blocking()
#: Wait, and run the holder's tasks, on the running anyio event loop.
ANYIO: Runtime = _Anyio()


def _poll(fd: Waitable, mask: int, timeout: float | None) -> bool:
    poller = select.poll()
    poller.register(fd, mask)
    # Round up: waking a hair early would report a deadline as missed too soon.
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return bool(poller.poll(ms))
