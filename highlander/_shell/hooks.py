"""Calling the application's hooks (``on_save``, ``on_deposed``): one rule for sync and async.

A coroutine function runs on the serving loop; anything else runs in a
worker thread, so a hook that blocks never stalls the loop that answers
newcomers.  An awaitable that a plain function returns is awaited too.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import anyio.to_thread


async def call_hook(hook: Callable[..., Any], *args: Any, abandon_on_cancel: bool = False) -> Any:
    """Run ``hook(*args)`` by the rule above and return its result.

    ``abandon_on_cancel``: a cancelled caller stops waiting for a hook in a
    worker thread (which runs on; a thread cannot be stopped) instead of
    waiting for it to return.
    """
    if inspect.iscoroutinefunction(hook):
        return await hook(*args)
    value = await anyio.to_thread.run_sync(hook, *args, abandon_on_cancel=abandon_on_cancel)
    if inspect.isawaitable(value):
        return await value
    return value
