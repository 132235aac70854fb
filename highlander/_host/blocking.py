"""Run a coroutine that never suspends, with no event loop: the sync API's driver.

Apart from :mod:`highlander._host.waiting` so that the free claim, which
every start takes, can be written as the same coroutine as the async API's
without importing ``typing`` (2 ms) or ``select`` on the way.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any, TypeVar

    _T = TypeVar("_T")


def run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine that waits only through ``BLOCKING``, without an event loop."""
    try:
        suspended = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError(  # pragma: no cover - a programming error, caught by the suite
        f"{coro!r} tried to suspend on an event loop ({suspended!r}) under the blocking waiter"
    )
