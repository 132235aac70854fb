"""Fork safety: a holder's forked children never hold the lock or the listener.

A real holder starts a ``multiprocessing`` pool with the fork start method,
then dies by SIGKILL; its workers live on, and a newcomer must claim at once
(the lock is free and nobody listens), not wait out the workers' lives.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.proctools import Child, Children

pytestmark = pytest.mark.timeout(120)

#: Hang guard for the newcomer's claim (not a performance bound).
NO_HANG = 20.0

HOLDER = """
    import json, multiprocessing, os, time
    from highlander import Deposed, Highlander

    _fd = int(os.environ["HL_READY_FD"])

    def report(**fields):
        os.write(_fd, (json.dumps({"pid": os.getpid(), **fields}) + "\\n").encode())

    hl = Highlander.ensure_singleton(app="child", exit_when_orphaned=False)

    def view():
        try:
            hl.check_current()
            current = True
        except Deposed as exc:
            current = str(exc)
        report(event="worker", is_holder=hl.is_holder, current=current)

    def busy(seconds):
        report(event="busy")
        time.sleep(seconds)

    pool = multiprocessing.get_context("fork").Pool(2, initializer=view)
    # Busy workers outlive their parent (idle ones would see their queue close).
    pool.map_async(busy, [600, 600], chunksize=1)
    hl.check_current()  # the parent still holds it
    report(event="ready", generation=hl.generation, is_holder=hl.is_holder)
    time.sleep(600)
"""


@pytest.fixture
def worker_pidfds() -> Iterator[list[int]]:
    """Pidfds of the pool workers (not our children): ended through them afterwards."""
    fds: list[int] = []
    try:
        yield fds
    finally:
        for fd in fds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            select.select([fd], [], [], 10)
            os.close(fd)


def _alive(pidfd: int) -> bool:
    readable, _, _ = select.select([pidfd], [], [], 0)
    return not readable


def _start_holder(kids: Children) -> Child:
    return kids.spawn([sys.executable, "-c", textwrap.dedent(HOLDER)], kids.env())


def test_forked_workers_do_not_keep_the_project_after_the_holder_dies(
    kids: Children, worker_pidfds: list[int]
) -> None:
    holder = _start_holder(kids)
    heard: dict[str, list[dict[str, Any]]] = {"worker": [], "ready": [], "busy": []}
    while len(heard["worker"]) < 2 or len(heard["busy"]) < 2 or not heard["ready"]:
        report = holder.next_report()
        assert report is not None, holder.finish()
        heard[report["event"]].append(report)
    views, (ready,) = heard["worker"], heard["ready"]
    for view in views:
        worker_pidfds.append(os.pidfd_open(view["pid"]))
    assert ready["is_holder"] is True and ready["generation"] == 1
    for view in views:
        # A forked child knows it is not the holder.
        assert view["is_holder"] is False
        assert "fork" in view["current"], view

    os.kill(holder.pid, signal.SIGKILL)
    holder.proc.wait()  # not finish(): the workers keep its stdout and stderr open
    newcomer = kids.start()
    report = newcomer.wait_for("ready", timeout=NO_HANG)
    assert report["outcome"] == "claimed_stale"
    assert report["generation"] == 2
    assert all(_alive(fd) for fd in worker_pidfds), "the workers were meant to outlive the holder"
    assert not kids.events("hung") and not kids.events("timeout")
