"""The no-overlap oracle of the process tests (``Children.reigns``) catches what it claims.

A reign ends at the earlier of its release line and its library's
``relinquished`` event; a successor's acquire line before that event is
still two holders.  Written witness and event files, no processes: this
checks the oracle, the process tests check the library with it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.proctools import Children, assert_no_overlap


def _kids(tmp_path: Path, witness: list[str], relinquished_ns: dict[int, int]) -> Children:
    kids = Children(tmp_path)
    kids.runtime.mkdir()
    kids.witness.write_text("".join(line + "\n" for line in witness))
    offset = time.time_ns() - time.monotonic_ns()
    lines = [
        {"ts": (at + offset) / 1e9, "event": "relinquished", "pid": pid, "generation": gen}
        for gen, (pid, at) in enumerate(relinquished_ns.items(), start=1)
    ]
    (kids.runtime / "app.events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    return kids


MS = 1_000_000


def _pid_10_then_11(base: int) -> list[str]:
    """Pid 10 acquires at ``base``, pid 11 at +6 ms, pid 10's on_deposed begins at +9 ms."""
    return [
        f"acquire 10 1 {base}",
        f"acquire 11 2 {base + 6 * MS}",
        f"release 10 1 {base + 9 * MS}",
    ]


def test_a_release_line_after_the_successor_counts_from_relinquished(tmp_path: Path) -> None:
    base = time.monotonic_ns()
    # Pid 10's library let go at +5 ms, before pid 11 acquired.
    witness = _pid_10_then_11(base)
    kids = _kids(tmp_path, witness, {10: base + 5 * MS})
    reigns = kids.reigns()
    assert reigns[0][:2] == (10, 1)
    assert abs(reigns[0][3] - (base + 5 * MS)) < MS  # ended by the event, not the line
    assert_no_overlap(reigns)


def test_a_relinquished_after_the_successors_acquire_is_two_holders(tmp_path: Path) -> None:
    base = time.monotonic_ns()
    witness = _pid_10_then_11(base)
    kids = _kids(tmp_path, witness, {10: base + 8 * MS})
    with pytest.raises(AssertionError, match="two holders at once"):
        assert_no_overlap(kids.reigns())


def test_without_an_event_the_release_line_ends_the_reign(tmp_path: Path) -> None:
    base = time.monotonic_ns()
    witness = _pid_10_then_11(base)
    kids = _kids(tmp_path, witness, {})
    with pytest.raises(AssertionError, match="two holders at once"):
        assert_no_overlap(kids.reigns())
