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


def _kids(
    tmp_path: Path,
    witness: list[str],
    relinquished_ns: dict[int, int],
    resumed_ns: dict[int, int] | None = None,
) -> Children:
    kids = Children(tmp_path)
    kids.runtime.mkdir()
    kids.witness.write_text("".join(line + "\n" for line in witness))
    offset = time.time_ns() - time.monotonic_ns()
    said = [("relinquished", relinquished_ns), ("resumed", resumed_ns or {})]
    lines = [
        {"ts": (at + offset) / 1e9, "event": event, "pid": pid, "generation": pid - 9}
        for event, when in said
        for pid, at in when.items()
    ]
    lines.sort(key=lambda e: e["ts"])
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


def test_a_relinquished_taken_back_by_resumed_does_not_end_the_reign(tmp_path: Path) -> None:
    # Over etcd: pid 10 let go for its move at +5 ms, the move did not apply, and it
    # held again at +5.5 ms; pid 11's acquire at +6 ms is then two holders.
    base = time.monotonic_ns()
    witness = _pid_10_then_11(base)
    kids = _kids(tmp_path, witness, {10: base + 5 * MS}, {10: base + 5 * MS + MS // 2})
    with pytest.raises(AssertionError, match="two holders at once"):
        assert_no_overlap(kids.reigns())
