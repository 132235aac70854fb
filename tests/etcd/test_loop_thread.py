"""The etcd session's loop thread, and the HTTP pool on it: real threads, sockets, a real cluster.

The session's client runs on :class:`~highlander._etcd.loop_thread.LoopThread`
(the serving side's selector loop, no asyncio); ``tests/etcd/test_http.py``
runs the same pool on anyio (asyncio and trio).  Here: what other threads
see of the loop (results, errors, cancellation, the end of the loop), and
the pool's deadlines against a member that accepts and never answers.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from highlander._etcd import api
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from highlander._etcd.http import Pool, TransportError
from highlander._etcd.loop_thread import LoopThread, SpawnCancelled
from tests.support.etcd_cluster import Cluster

#: Hang guard for the waits below (a healthy loop answers in microseconds).
WAIT = 10.0


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread(name="test-loop")
    try:
        yield thread
    finally:
        thread.stop()
        assert not thread.thread.is_alive()


def test_a_call_returns_the_coroutines_value_and_raises_its_error(loop: LoopThread) -> None:
    async def double(n: int) -> int:
        await loop.loop.sleep(0.01)
        return 2 * n

    async def fail() -> None:
        raise ValueError("from the loop")

    assert loop.call(double, 21) == 42
    with pytest.raises(ValueError, match="from the loop"):
        loop.call(fail)
    assert loop.call(double, 1) == 2  # one task's error ends nothing else


def test_a_spawned_task_is_cancelled_from_another_thread(loop: LoopThread) -> None:
    started = threading.Event()
    ended: list[str] = []

    async def forever() -> None:
        started.set()
        try:
            await loop.loop.sleep(3600)
        finally:
            ended.append("cleaned up")

    spawned = loop.spawn(forever)
    seen: list[bool] = []
    spawned.add_done_callback(lambda done: seen.append(done.cancelled()))
    assert started.wait(WAIT)
    assert spawned.cancel()
    with pytest.raises(SpawnCancelled):
        spawned.result(WAIT)
    assert (spawned.cancelled(), ended, seen) == (True, ["cleaned up"], [True])
    assert not spawned.cancel()  # ended already


def test_stopping_the_loop_ends_its_tasks_and_refuses_new_ones() -> None:
    thread = LoopThread(name="test-loop")

    async def forever() -> None:
        await thread.loop.sleep(3600)

    spawned = thread.spawn(forever)
    thread.stop()
    assert not thread.thread.is_alive()
    assert spawned.done() and spawned.cancelled()
    with pytest.raises(RuntimeError, match="closed"):
        thread.spawn(forever)


def test_the_loop_does_not_wait_for_itself(loop: LoopThread) -> None:
    async def inner() -> None:
        loop.call(inner)

    with pytest.raises(RuntimeError, match="cannot wait for itself"):
        loop.call(inner)


def test_the_session_loop_imports_no_event_loop(etcd: Cluster) -> None:
    """A newcomer talking to etcd loads neither asyncio nor anyio (a fresh interpreter)."""
    program = (
        "import sys\n"
        "from highlander._etcd.session import session_for\n"
        f"session = session_for({etcd.backend!r})\n"
        "session.lease_kept()\n"
        "session.close()\n"
        "print(sorted(m for m in ('asyncio', 'anyio', 'sniffio', 'trio') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, timeout=60, check=True
    )
    assert done.stdout.decode().strip() == "[]", done.stderr.decode()


def test_a_request_to_a_member_that_never_answers_ends_at_its_deadline(
    loop: LoopThread,
) -> None:
    """Accepted by the kernel (a listening socket nobody serves) and never answered."""
    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(8)
        url = f"http://127.0.0.1:{frozen.getsockname()[1]}/v3/kv/range"

        async def ask() -> float:
            pool = Pool(runtime=loop.loop)
            start = time.monotonic()
            try:
                with pytest.raises(TransportError, match=r"within 0\.3 s"):
                    await pool.post(url, b"{}", {}, 0.3)
            finally:
                await pool.aclose()
            return time.monotonic() - start

        assert 0.3 <= loop.call(ask) < WAIT


def test_a_refused_connection_is_a_transport_error(loop: LoopThread) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, not listening: the kernel refuses

        async def ask() -> None:
            pool = Pool(runtime=loop.loop)
            try:
                with pytest.raises(TransportError, match="ConnectionRefused"):
                    await pool.post(f"http://127.0.0.1:{port}/", b"{}", {}, 1.0)
            finally:
                await pool.aclose()

        loop.call(ask)


def test_the_client_on_the_loop_reuses_one_connection(loop: LoopThread, etcd: Cluster) -> None:
    """Kept alive on the selector loop as on anyio: many requests, one connection per member."""
    client = Client(parse(etcd.backend, {}), runtime=loop.loop)

    async def many() -> set[int]:
        async with client:
            for _ in range(20):
                await client.call("/v3/kv/range", api.get(b"/highlander-tests/none"))
            pool = client._http
            assert pool is not None
            return {id(c) for idle in pool._idle.values() for c in idle}

    assert len(loop.call(many)) == 1
