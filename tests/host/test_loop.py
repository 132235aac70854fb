"""The sync holder's serving loop (``highlander._host.loop``) on real descriptors and threads."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from highlander._host.loop import SelectorLoop
from highlander._host.tasks import Cancelled, Closed


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):  # the test closed it itself
            os.close(fd)


def run(fn: Any, *args: Any) -> Any:
    loop = SelectorLoop()
    return loop.run(fn, loop, *args)


def test_readable_times_out_then_sees_data(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe

    async def main(loop: SelectorLoop) -> list[bool]:
        seen = [await loop.readable(read_end, 0.01)]
        os.write(write_end, b"x")
        seen.append(await loop.readable(read_end, 0.01))
        seen.append(await loop.readable(read_end))  # no timeout: data is there
        seen.append(await loop.readable(read_end, 0))  # a zero timeout still looks
        return seen

    assert run(main) == [False, True, True, True]


def test_writable_on_a_full_socket(full_socket: tuple[socket.socket, socket.socket]) -> None:
    left, right = full_socket

    async def main(loop: SelectorLoop) -> list[bool]:
        full = await loop.writable(left, 0.01)
        right.recv(1 << 20)
        return [full, await loop.writable(left, 1.0)]

    assert run(main) == [False, True]


def test_tasks_interleave_on_one_thread(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    order: list[str] = []

    async def reader(loop: SelectorLoop) -> None:
        assert await loop.readable(read_end, 5.0)
        order.append(f"read {os.read(read_end, 10)!r}")

    async def writer(loop: SelectorLoop) -> None:
        await loop.sleep(0.02)
        order.append("write")
        os.write(write_end, b"hi")

    async def main(loop: SelectorLoop) -> None:
        async with loop.group() as group:
            group.spawn(reader, loop)
            group.spawn(writer, loop)
        order.append("both ended")

    run(main)
    assert order == ["write", "read b'hi'", "both ended"]


def test_a_flag_set_from_another_thread_wakes_its_waiter() -> None:
    async def main(loop: SelectorLoop) -> tuple[bool, str]:
        flag = loop.flag()
        setter = threading.Timer(0.02, flag.set)
        setter.start()
        await flag.wait()
        setter.join()
        await flag.wait()  # set stays set
        return flag.is_set(), threading.current_thread().name

    assert run(main) == (True, threading.current_thread().name)


def test_cancel_raises_at_the_current_and_every_later_wait(pipe: tuple[int, int]) -> None:
    read_end, _ = pipe
    seen: list[str] = []

    async def victim(loop: SelectorLoop) -> None:
        try:
            await loop.readable(read_end)  # nothing ever comes
        except Cancelled:
            seen.append("cancelled")
            try:
                await loop.sleep(10)  # level-triggered: no second wait either
            except Cancelled:
                seen.append("cancelled again")
            raise
        finally:
            seen.append("finally")

    async def main(loop: SelectorLoop) -> None:
        async with loop.group() as group:
            task = group.spawn(victim, loop)
            await loop.sleep(0.01)
            task.cancel()
            task.cancel()  # twice is once
        seen.append("group closed")

    run(main)
    assert seen == ["cancelled", "cancelled again", "finally", "group closed"]


def test_a_cancelled_wait_leaves_the_descriptor_free(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe

    async def waiter(loop: SelectorLoop) -> None:
        await loop.readable(read_end)

    async def main(loop: SelectorLoop) -> bool:
        async with loop.group() as group:
            group.spawn(waiter, loop).cancel()
        os.write(write_end, b"x")
        return await loop.readable(read_end, 1.0)  # a new waiter on the same descriptor

    assert run(main) is True


def test_a_childs_error_cancels_its_siblings_and_is_raised_at_the_groups_end() -> None:
    seen: list[str] = []

    async def fails(loop: SelectorLoop) -> None:
        await loop.sleep(0.01)
        raise ValueError("boom")

    async def sleeper(loop: SelectorLoop) -> None:
        try:
            await loop.sleep(30)
        except Cancelled:
            seen.append("sibling cancelled")
            raise

    async def main(loop: SelectorLoop) -> None:
        async with loop.group() as group:
            group.spawn(fails, loop)
            group.spawn(sleeper, loop)

    with pytest.raises(ValueError, match="boom"):
        run(main)
    assert seen == ["sibling cancelled"]


def test_to_thread_returns_the_result_or_raises_the_error() -> None:
    def work(x: int) -> tuple[int, str]:
        return x * 2, threading.current_thread().name

    def broken() -> None:
        raise KeyError("nope")

    async def main(loop: SelectorLoop) -> tuple[int, str]:
        value, where = await loop.to_thread(work, 21)
        with pytest.raises(KeyError):
            await loop.to_thread(broken)
        return value, where

    value, where = run(main)
    assert value == 42
    assert where == "highlander-hook"


def test_a_cancelled_thread_wait_waits_for_the_thread_unless_abandoned() -> None:
    release = threading.Event()
    seen: list[str] = []

    def blocking() -> str:
        release.wait(5)
        seen.append("thread returned")
        return "late"

    async def waits(loop: SelectorLoop, abandon: bool) -> None:
        try:
            await loop.to_thread(blocking, abandon_on_cancel=abandon)
        except Cancelled:
            seen.append(f"cancelled (abandon={abandon})")
            raise

    async def main(loop: SelectorLoop, abandon: bool) -> None:
        async with loop.group() as group:
            task = group.spawn(waits, loop, abandon)
            await loop.sleep(0.01)
            task.cancel()
            if abandon:
                return  # the group's end must not wait for the thread
            threading.Timer(0.05, release.set).start()

    run(main, True)
    assert seen == ["cancelled (abandon=True)"]
    release.set()
    deadline = time.monotonic() + 5
    while "thread returned" not in seen and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.clear()
    release.clear()
    run(main, False)
    assert seen == ["thread returned", "cancelled (abandon=False)"]


def test_notify_closing_wakes_the_waiter_with_closed() -> None:
    left, right = socket.socketpair()
    with left, right:

        async def waiter(loop: SelectorLoop) -> str:
            try:
                await loop.readable(left)
            except Closed:
                return "closed"
            return "readable"

        async def main(loop: SelectorLoop) -> list[str]:
            results: list[str] = []

            async def keep() -> None:
                results.append(await waiter(loop))

            async with loop.group() as group:
                group.spawn(keep)
                await loop.sleep(0.01)
                loop.notify_closing(left)
            return results

        assert run(main) == ["closed"]


def test_a_closed_socket_cannot_be_waited_on() -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.close()

    async def main(loop: SelectorLoop) -> None:
        await loop.readable(sock)

    with pytest.raises(Closed):
        run(main)


def test_two_readers_of_one_descriptor_is_an_error(pipe: tuple[int, int]) -> None:
    read_end, _ = pipe

    async def reader(loop: SelectorLoop) -> None:
        await loop.readable(read_end, 0.2)

    async def main(loop: SelectorLoop) -> None:
        async with loop.group() as group:
            group.spawn(reader, loop)
            group.spawn(reader, loop)

    with pytest.raises(RuntimeError, match="already waits"):
        run(main)


def test_an_asyncio_awaitable_is_refused_with_the_fix() -> None:
    import asyncio

    async def main(loop: SelectorLoop) -> None:
        await asyncio.sleep(0)  # yields None to the loop, not one of its waits
        await asyncio.sleep(0.01)  # yields an asyncio future

    with pytest.raises(RuntimeError, match=r"not asyncio.*async with Highlander"):
        run(main)


def test_an_async_hook_runs_on_an_asyncio_loop_of_its_own() -> None:
    import asyncio

    async def hook() -> str:
        await asyncio.sleep(0.001)
        return type(asyncio.get_running_loop()).__name__

    async def main(loop: SelectorLoop) -> str:
        result: str = await loop.run_coroutine(hook(), abandon_on_cancel=False)
        return result

    assert "EventLoop" in run(main)


def test_tasks_left_when_the_main_task_returns_are_cancelled() -> None:
    seen: list[str] = []

    async def orphan(loop: SelectorLoop) -> None:
        try:
            await loop.sleep(30)
        finally:
            seen.append("orphan ended")

    async def main(loop: SelectorLoop) -> str:
        loop._start(orphan(loop), None)  # a task outside any group
        await loop.sleep(0)
        return "done"

    assert run(main) == "done"
    assert seen == ["orphan ended"]


def test_a_wakeup_after_the_loop_ended_writes_to_no_reused_descriptor() -> None:
    loop = SelectorLoop()

    async def main(loop: SelectorLoop) -> None:
        await loop.sleep(0)

    loop.run(main, loop)
    # The loop's pipe is closed: its numbers may now belong to other files.
    read_end, write_end = os.pipe()
    try:
        loop.call_soon_threadsafe(lambda: None)
        loop.flag().set()
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):
            os.read(read_end, 1)  # nothing was written into a reused number
    finally:
        os.close(read_end)
        os.close(write_end)


def test_timers_fire_in_deadline_order() -> None:
    order: list[float] = []

    async def nap(loop: SelectorLoop, seconds: float) -> None:
        await loop.sleep(seconds)
        order.append(seconds)

    async def main(loop: SelectorLoop) -> None:
        async with loop.group() as group:
            for seconds in (0.03, 0.01, 0.02, 0.0):
                group.spawn(nap, loop, seconds)

    run(main)
    assert order == [0.0, 0.01, 0.02, 0.03]
