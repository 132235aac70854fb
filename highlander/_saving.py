"""Running the save hook while its progress goes out as PROGRESS frames.

The hook runs in a worker thread (sync) or on the loop (async); each
``Progress.advance()`` wakes a pump task that sends the latest state, so the
hook never waits on the network and a slow peer never delays the save.
"""

from __future__ import annotations

import contextlib
import inspect
import socket
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from highlander._connection import Connection
from highlander._messages import ProgressReport
from highlander._progress import Progress
from highlander._waiting import ANYIO
from highlander._wire import send_frame

SaveHook = Callable[[Progress], Any]


async def run_save(
    hook: SaveHook | None, sock: socket.socket, conn: Connection
) -> dict[str, Any] | None:
    """Run ``hook`` while a pump turns its progress into PROGRESS frames; return the handoff."""
    wake = anyio.Event()
    token = anyio.lowlevel.current_token()
    loop_thread = threading.get_ident()

    def notify() -> None:
        if threading.get_ident() == loop_thread:
            wake.set()
        else:
            # RuntimeError: the loop is gone; the save outlived its conversation.
            with contextlib.suppress(RuntimeError):
                anyio.from_thread.run_sync(wake.set, token=token)

    progress = Progress(notify)
    result: list[Any] = []

    async def pump(done: anyio.Event) -> None:
        nonlocal wake
        start = ProgressReport(counter=0, note="saving")
        await send_frame(sock, conn.send(start, ANYIO.now()), ANYIO)
        sent = 0
        while not done.is_set():
            await wake.wait()
            wake = anyio.Event()
            state = progress.state
            if state.counter > sent:
                step = ProgressReport(state.counter, state.done, state.total, state.note)
                await send_frame(sock, conn.send(step, ANYIO.now()), ANYIO)
                sent = state.counter

    async def save(done: anyio.Event) -> None:
        try:
            result.append(await _call_hook(hook, progress))
        finally:
            done.set()
            wake.set()

    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(pump, done)
        tg.start_soon(save, done)
    value = result[0] if result else None
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"on_save must return a dict or None, not {type(value).__name__}")
    return value


async def _call_hook(hook: SaveHook | None, progress: Progress) -> Any:
    if hook is None:
        return None
    if inspect.iscoroutinefunction(hook):
        return await hook(progress)
    value = await anyio.to_thread.run_sync(hook, progress, abandon_on_cancel=True)
    if inspect.isawaitable(value):
        return await value
    return value
