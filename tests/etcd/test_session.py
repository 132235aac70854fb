"""Holders on etcd as real processes: SIGKILLed, SIGSTOPped past the TTL, and the next one.

Each holder is ``tests/programs/etcd_holder.py``: it writes ``act T`` lines
(``CLOCK_BOOTTIME``, one clock for every process of the machine) for as long
as it may act as holder, so "never two at once" is a comparison of times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.etcd_cluster import Cluster
from tests.support.proctools import wait_stopped

PROGRAM = Path(__file__).parents[1] / "programs" / "etcd_holder.py"
ROOT = Path(__file__).parents[2]
TTL = 2  # below what users may choose (5), to keep the tests short on a quiet local cluster


class Holder:
    """One etcd_holder.py child and its witness file."""

    def __init__(self, cluster: Cluster, key: str, witness: Path) -> None:
        self.witness = witness
        with witness.with_suffix(".err").open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(PROGRAM), cluster.backend, key, str(witness), str(TTL)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    def stderr(self) -> str:
        return self.witness.with_suffix(".err").read_text()

    def lines(self) -> list[list[str]]:
        if not self.witness.exists():
            return []
        return [line.split() for line in self.witness.read_text().splitlines() if line]

    def wait_for(self, word: str, timeout: float = 30.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.lines() if line[0] == word]
            if found:
                return found[0]
            if self.process.poll() is not None:
                raise AssertionError(f"exited {self.process.returncode} before {word!r}")
            time.sleep(0.01)
        raise AssertionError(f"no {word!r} line within {timeout} s: {self.lines()[-3:]}")

    def acts(self) -> list[float]:
        return [float(line[1]) for line in self.lines() if line[0] == "act"]

    def end(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=30)
        assert self.process.stdout is not None
        out = self.process.stdout.read()
        self.process.stdout.close()
        assert out == b""  # stdout is sacred


@pytest.fixture
def start(etcd: Cluster, tmp_path: Path) -> Iterator[Callable[[], Holder]]:
    """Start holders of one fresh key; every one is ended by pid afterwards."""
    started: list[Holder] = []
    key = f"/highlander-tests/{uuid.uuid4().hex}/holder"

    def one() -> Holder:
        holder = Holder(etcd, key, tmp_path / f"witness-{len(started)}")
        started.append(holder)
        return holder

    try:
        yield one
    finally:
        for holder in started:
            holder.end()


def test_the_next_holds_once_the_holder_is_sigkilled(start: Callable[[], Holder]) -> None:
    first = start()
    token = int(first.wait_for("held")[1])
    second = start()
    first.wait_for("act")
    time.sleep(TTL / 2)
    assert not any(line[0] == "held" for line in second.lines())  # one holder at a time
    first.process.kill()
    first.process.wait(timeout=30)
    killed = time.clock_gettime(time.CLOCK_BOOTTIME)
    held = second.wait_for("held", timeout=10 * TTL)
    assert int(held[1]) > token  # a new reign, a greater fencing token
    # The suite's etcd is 3.5.1: each holder warned once, on stderr, naming the fix.
    assert first.stderr().count("older than 3.5.13") == 1
    assert float(held[2]) > killed  # it waited for the lease, not for luck
    assert max(first.acts()) < min(second.acts())


def test_a_holder_stopped_past_its_ttl_never_acts_after_its_successor_began(
    start: Callable[[], Holder],
) -> None:
    first = start()
    first.wait_for("act")
    second = start()
    os.kill(first.process.pid, signal.SIGSTOP)
    wait_stopped(first.process.pid)
    held = second.wait_for("held", timeout=10 * TTL)  # the lease ended on the server
    second.wait_for("act")
    os.kill(first.process.pid, signal.SIGCONT)
    lost = first.wait_for("lost", timeout=10 * TTL)
    assert lost[1] in {"expired", "gone"}
    # After resuming it did not act once: its bound had passed while it was stopped.
    assert max(first.acts()) < float(held[2])
    assert max(first.acts()) < min(second.acts())
