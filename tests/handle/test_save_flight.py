"""What a holder's save sends before SAVED, over a real socketpair (highlander._shell.saving).

A save that ends within ``QUIET_SAVE`` is answered by SAVED alone: over etcd
every frame is a write through raft in series, so the PROGRESS "saving" of a
trivial save cost its handover a round trip (docs/performance.md).  A save
that is still running after it reports "saving" first, as it always did.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import anyio
import pytest

from highlander._core.codec import NEED_DATA
from highlander._core.messages import Hello, ProgressReport, Save
from highlander._core.pair import ConnectionPair
from highlander._core.state import Role, State
from highlander._host.waiting import ANYIO
from highlander._shell.progress import Progress
from highlander._shell.saving import SaveFlight

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def saving(
    key: bytes,
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> ConnectionPair:
    """A pair on the real monotonic clock, the incumbent in SAVING."""
    pair = ConnectionPair(
        key=key, newcomer_nonce=newcomer_nonce, incumbent_nonce=incumbent_nonce,
        clock=time.monotonic,
    )  # fmt: skip
    pair.send(Role.INCUMBENT, make_hello(incumbent_nonce))
    pair.send(Role.NEWCOMER, make_save(newcomer_nonce, incumbent_nonce))
    assert pair.incumbent.state is State.SAVING
    return pair


@pytest.fixture
def wire() -> Iterator[tuple[socket.socket, socket.socket]]:
    """The holder's end and the newcomer's end of a real stream socketpair."""
    ours, theirs = socket.socketpair()
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def _frames(pair: ConnectionPair, data: bytes) -> list[object]:
    side = pair.newcomer
    side.receive_data(data)
    out: list[object] = []
    while (event := side.next_event(time.monotonic())) is not NEED_DATA:
        out.append(event)
    return out


def _pending(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


def test_a_save_that_ends_at_once_sends_no_progress(
    saving: ConnectionPair, wire: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = wire

    async def hook(progress: Progress) -> dict[str, int]:
        return {"n": 1}

    async def main() -> dict[str, int] | None:
        async with ANYIO.group() as group:
            flight = SaveFlight(hook, ANYIO)
            flight.start(group)
            return await flight.follow(ours, saving.incumbent)

    assert anyio.run(main) == {"n": 1}
    assert _pending(theirs) == b""  # nothing before SAVED, which the caller sends
    assert saving.incumbent.state is State.SAVING


def test_a_save_still_running_says_saving_first(
    saving: ConnectionPair, wire: tuple[socket.socket, socket.socket]
) -> None:
    ours, theirs = wire
    release = anyio.Event()
    seen: list[object] = []

    async def hook(progress: Progress) -> dict[str, int]:
        await release.wait()  # held until the newcomer's end has read "saving"
        return {"n": 2}

    async def newcomer() -> None:
        while not seen:
            await anyio.wait_readable(theirs)
            seen.extend(_frames(saving, theirs.recv(65536)))
        release.set()

    async def main() -> dict[str, int] | None:
        async with ANYIO.group() as group:
            group.spawn(newcomer)
            flight = SaveFlight(hook, ANYIO)
            flight.start(group)
            return await flight.follow(ours, saving.incumbent)

    assert anyio.run(main) == {"n": 2}
    assert seen == [ProgressReport(counter=0, note="saving")]
    assert _pending(theirs) == b""
