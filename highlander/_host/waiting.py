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
from typing import Protocol

from highlander._host.blocking import run_blocking

# run_blocking lives in _host/blocking (the free claim needs it without
# typing); it is re-exported here beside the waiters it drives.
__all__ = ["ANYIO", "BLOCKING", "Waitable", "Waiter", "run_blocking"]


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
    """Waits on the running anyio event loop (asyncio or trio)."""

    def now(self) -> float:
        import anyio  # noqa: PLC0415 - only code that already runs on a loop gets here

        return anyio.current_time()

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        import anyio  # noqa: PLC0415

        with anyio.move_on_after(math.inf if timeout is None else timeout):
            await anyio.wait_readable(fd)
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


#: Wait by blocking the thread; drive the coroutines with :func:`run_blocking`.
BLOCKING: Waiter = _Blocking()
#: Wait on the running anyio event loop.
ANYIO: Waiter = _Anyio()


def _poll(fd: Waitable, mask: int, timeout: float | None) -> bool:
    poller = select.poll()
    poller.register(fd, mask)
    # Round up: waking a hair early would report a deadline as missed too soon.
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return bool(poller.poll(ms))
