"""The watchdog's sample of a peer is taken only when a wait happens (``_shell/wire``).

Every wait for the peer's next frame starts from a sample of its process
(``/proc``: a few reads), against which a missed deadline is judged busy or
hung.  A frame that has already arrived needs none, so ``receive_event``
runs its ``on_wait`` just before the first wait for bytes that are not
there yet, and never when they are.  Real socketpairs, a real peer
process, the blocking waiter the sync API uses.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from highlander._core.connection import Connection
from highlander._core.messages import Hello
from highlander._core.state import Role
from highlander._host.waiting import BLOCKING, run_blocking
from highlander._shell.wire import Baseline, receive_event
from tests.support.core import build_hello

KEY = bytes(range(32))
PROCESS_TIMEOUT = 30  # seconds; catches hangs only


def _pair() -> tuple[socket.socket, socket.socket, Connection, bytes]:
    """A socketpair, the newcomer's connection on one end, and the incumbent's HELLO frame."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    incumbent = Connection(Role.INCUMBENT, key=KEY, nonce=os.urandom(16), now=0.0)
    frame = incumbent.send(build_hello(incumbent.local_nonce), 0.0)
    newcomer = Connection(Role.NEWCOMER, key=KEY, nonce=os.urandom(16), now=BLOCKING.now())
    return ours, theirs, newcomer, frame


def _receive(ours: socket.socket, conn: Connection, waits: list[float]) -> object:
    return run_blocking(
        receive_event(ours, conn, BLOCKING, on_wait=lambda: waits.append(time.monotonic()))
    )


def _receive_during(ours: socket.socket, conn: Connection, writer: threading.Thread) -> list[float]:
    """Receive HELLO while ``writer`` sends it; when ``on_wait`` ran."""
    waits: list[float] = []
    writer.start()
    try:
        assert isinstance(_receive(ours, conn, waits), Hello)
    finally:
        writer.join(PROCESS_TIMEOUT)
    return waits


def test_a_frame_already_here_is_read_without_a_sample() -> None:
    ours, theirs, conn, frame = _pair()
    with ours, theirs:
        theirs.sendall(frame)
        waits: list[float] = []
        assert isinstance(_receive(ours, conn, waits), Hello)
        assert waits == []


def test_a_frame_not_here_yet_is_sampled_once_before_the_wait() -> None:
    ours, theirs, conn, frame = _pair()
    with ours, theirs:
        sent: list[float] = []

        def late() -> None:
            time.sleep(0.2)
            sent.append(time.monotonic())
            theirs.sendall(frame[:5])  # half a header first: the wait goes on
            time.sleep(0.1)
            theirs.sendall(frame[5:])

        waits = _receive_during(ours, conn, threading.Thread(target=late))
        assert len(waits) == 1
        assert waits[0] < sent[0]


def test_a_partial_frame_is_sampled_when_the_rest_is_awaited() -> None:
    ours, theirs, conn, frame = _pair()
    with ours, theirs:
        theirs.sendall(frame[:10])
        rest = threading.Timer(0.2, theirs.sendall, args=(frame[10:],))
        assert len(_receive_during(ours, conn, rest)) == 1


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(PROCESS_TIMEOUT)


def test_a_baseline_samples_a_live_peer_once_until_reset(
    sleeper: subprocess.Popen[bytes],
) -> None:
    baseline = Baseline(sleeper.pid)
    assert baseline.sample is None  # nothing read until a wait needs it
    baseline.take()
    first = baseline.sample
    assert first is not None and first.state in "RSD"
    baseline.take()
    assert baseline.sample is first  # one sample per wait, however often asked
    baseline.sample = None
    baseline.take()
    assert baseline.sample is not None and baseline.sample is not first


def test_a_peer_the_kernel_cannot_see_is_never_sampled() -> None:
    baseline = Baseline(None)
    baseline.take()
    assert baseline.sample is None
