"""The moment of the commit over etcd, with real processes on a real cluster.

The incumbent stops acting when it accepts a timely ACK, before it sends the
move (``check_current()`` fails and ``is_holder`` is false from then on), and
says so first (``acked``, ``relinquished``): its successor holds as soon as
its watch shows the move, without waiting for the incumbent to hear etcd's
answer (docs/etcd.md, "The commit over etcd").  A move that does not apply
gives the reign back (``resumed``: tests/etcd/test_full_etcd.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.etcd.test_handle import SETTLE, Hosts, hosts

__all__ = ["hosts"]  # the fixture, used by name

#: How long the incumbent waits, after it accepted the ACK, before it sends the move.
DELAY = 1.0


def _lines(path: Path, pid: int) -> list[tuple[str, int, int]]:
    """``check_current()`` results of ``pid``: (pass|fail, began, ended), monotonic ns."""
    out = []
    for line in path.read_text().splitlines():
        what, who, began, ended = line.split()
        if int(who) == pid:
            out.append((what, int(began), int(ended)))
    return out


def test_an_incumbent_does_not_act_while_its_move_is_in_flight(
    hosts: Hosts, tmp_path: Path
) -> None:
    witness = tmp_path / "checks"
    first = hosts.start(
        "h1", before_move={"delay": DELAY}, check_loop=0.02, check_witness=str(witness)
    )
    first.wait_for("ready")
    deadline = time.monotonic() + SETTLE
    while not witness.exists() or not _lines(witness, first.pid):
        assert time.monotonic() < deadline, "the holder's check loop never wrote"
        time.sleep(0.01)  # its check loop runs: a pass at least, soon
    second = hosts.start("h2")
    first.wait_for("moving", timeout=SETTLE)  # it accepted the ACK; the move is DELAY away
    told = time.monotonic_ns()
    first.wait_for("moved", timeout=SETTLE)
    ready = second.wait_for("ready", timeout=SETTLE)
    assert ready["outcome"] == "succeeded" and ready["handoff"]["from"] == first.pid, ready
    checks = _lines(witness, first.pid)
    assert checks[0][0] == "pass", checks[:3]  # it held, and its checks said so
    during = [c for c in checks if c[1] >= told]
    # Without the stop at the move, every check in the DELAY before it passes.
    assert len(during) >= 2, f"{len(during)} checks after `moving`"
    assert {what for what, _, _ in during} == {"fail"}, during
    let_go = [e["ts"] for e in hosts.events("relinquished") if e["pid"] == first.pid]
    began = [e["ts"] for e in hosts.events("claimed") if e["pid"] == second.pid]
    assert let_go[0] <= began[0]
    assert first.finish(SETTLE)[0] == 0
