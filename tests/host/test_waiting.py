"""The two waiters on real descriptors, and the loop-free driver."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Iterator

import anyio
import pytest

from highlander._host.waiting import ANYIO, BLOCKING, Waiter, run_blocking


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def test_blocking_readable_times_out_then_sees_data(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    assert run_blocking(BLOCKING.readable(read_end, 0.01)) is False
    os.write(write_end, b"x")
    assert run_blocking(BLOCKING.readable(read_end, 0.01)) is True
    assert run_blocking(BLOCKING.readable(read_end)) is True  # no timeout: data is there


def test_blocking_writable_on_a_full_socket(
    full_socket: tuple[socket.socket, socket.socket],
) -> None:
    left, right = full_socket
    assert run_blocking(BLOCKING.writable(left, 0.01)) is False
    right.recv(1 << 20)
    assert run_blocking(BLOCKING.writable(left, 1.0)) is True


def test_blocking_clock_and_sleep_move_forward() -> None:
    before = BLOCKING.now()
    run_blocking(BLOCKING.sleep(0.001))
    run_blocking(BLOCKING.sleep(-1))  # a deadline already past: no error, no wait
    assert BLOCKING.now() > before


def test_run_blocking_returns_and_raises_like_the_coroutine() -> None:
    async def value() -> int:
        await BLOCKING.sleep(0)
        return 42

    async def failure() -> None:
        await BLOCKING.sleep(0)
        raise ValueError("from inside")

    assert run_blocking(value()) == 42
    with pytest.raises(ValueError, match="from inside"):
        run_blocking(failure())


def test_run_blocking_refuses_a_coroutine_that_needs_an_event_loop() -> None:
    with pytest.raises(RuntimeError, match="tried to suspend on an event loop"):
        run_blocking(asyncio.sleep(0))


@pytest.mark.parametrize("waiter", [ANYIO, BLOCKING], ids=["anyio", "blocking"])
def test_both_waiters_agree_on_a_socket(waiter: Waiter) -> None:
    async def scenario() -> tuple[bool, bool]:
        left, right = socket.socketpair()
        with left, right:
            silent = await waiter.readable(left, 0.01)
            right.send(b"x")
            return silent, await waiter.readable(left, 5.0)

    result = anyio.run(scenario) if waiter is ANYIO else run_blocking(scenario())
    assert result == (False, True)


@pytest.mark.parametrize("waiter", [ANYIO, BLOCKING], ids=["anyio", "blocking"])
def test_a_frame_the_peer_never_reads_gives_up_after_the_stall_bound(
    waiter: Waiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    from highlander._shell import wire as _wire

    monkeypatch.setattr(_wire, "SEND_STALL", 0.05)  # a bound, not a timing assertion

    async def scenario() -> None:
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            with pytest.raises(BlockingIOError):
                while True:  # fill the peer's buffer: it never reads
                    left.send(b"x" * 65536)
            with pytest.raises(TimeoutError, match=r"bytes unread for 0\.05 s"):
                await _wire.send_frame(left, b"y" * 1000, waiter)

    if waiter is ANYIO:
        anyio.run(scenario)
    else:
        run_blocking(scenario())
