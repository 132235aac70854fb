"""Calling the application's hooks (``on_save``, ``on_deposed``): one rule for sync and async.

A plain function runs in a worker thread, so a hook that blocks never
stalls the loop that answers newcomers.  A coroutine function, or an
awaitable that a plain function returns, is awaited by the runtime: on the
caller's own loop for the async API, on an asyncio loop of its own (in a
worker thread) for the sync API, whose serving loop is not asyncio
(:meth:`highlander._host.loop.SelectorLoop.run_coroutine`).
"""

from __future__ import annotations

from collections.abc import Callable

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (4 ms for a holder)
if TYPE_CHECKING:
    from typing import Any

    from highlander._host.waiting import Runtime


async def call_hook(
    runtime: Runtime, hook: Callable[..., Any], *args: Any, abandon_on_cancel: bool = False
) -> Any:
    """Run ``hook(*args)`` by the rule above and return its result.

    ``abandon_on_cancel``: a cancelled caller stops waiting for a hook in a
    worker thread (which runs on; a thread cannot be stopped) instead of
    waiting for it to return.
    """
    if _is_coroutine_function(hook):
        return await runtime.run_coroutine(hook(*args), abandon_on_cancel=abandon_on_cancel)
    value = await runtime.to_thread(hook, *args, abandon_on_cancel=abandon_on_cancel)
    if hasattr(value, "__await__"):  # a partial of an async def, a plain def returning one
        return await runtime.run_coroutine(value, abandon_on_cancel=abandon_on_cancel)
    return value


#: CO_COROUTINE: the code flag of an ``async def`` (what ``inspect`` checks).
_COROUTINE_FLAGS = 0x80


def _is_coroutine_function(hook: Callable[..., Any]) -> bool:
    """``inspect.iscoroutinefunction`` for functions and bound methods, without ``inspect``.

    ``inspect`` (with ``ast``, ``dis`` and ``tokenize``) cost a holder's first
    save several milliseconds on the succession's critical path.  Whatever
    this does not recognise runs in a worker thread, and an awaitable it
    returns is awaited all the same.
    """
    code = getattr(getattr(hook, "__func__", hook), "__code__", None)
    return code is not None and bool(getattr(code, "co_flags", 0) & _COROUTINE_FLAGS)
