"""#13 item 15: what docs/guide.md says about apps and failed saves is exactly what happens.

Two claims were not true: "different apps never interact" (apps meet when
a ``SAVE`` names another app, and are refused) and "the holder's event log
names the exception" (the traceback is on stderr only).  Each claim the
guide makes now is checked here against real processes.
"""

from __future__ import annotations

import re

from tests.handle.test_users_save import _refusals_by
from tests.support.paths import DOCS
from tests.support.proctools import Children

GUIDE = DOCS / "guide.md"


def _row(first_cell: str) -> str:
    """The guide's table row whose first cell is ``first_cell``."""
    text = GUIDE.read_text(encoding="utf-8")
    (row,) = re.findall(rf"^\| {re.escape(first_cell)} \|.*$", text, re.M)
    return row


def test_the_app_row_says_apps_hold_side_by_side_and_refuse_each_others_save(
    kids: Children,
) -> None:
    row = _row("`app`")
    assert "never interact" not in row
    for claim in ("side by side", "`REFUSED` `other_app`", "`OtherAppError`", "files of its own"):
        assert claim in row, claim
    # Side by side, each with files of its own (the refusal: tests/processes/test_other_app.py).
    first = kids.start(app="alpha server")
    first.wait_for("ready")
    second = kids.start(app="beta")
    second.wait_for("ready")
    assert first.proc.poll() is None and second.proc.poll() is None
    locks = sorted(path.name for path in kids.runtime.glob("*.lock"))
    assert len(locks) == 2 and locks[1].startswith("beta-"), locks


def test_the_save_failure_row_says_where_the_exception_is_named(kids: Children) -> None:
    row = _row("`SaveFailedError`")
    assert "event log names the exception" not in row
    assert "the save hook failed: ValueError: ..." in row
    assert "in the event log" in row and "stderr only" in row and "`save_hook_failed`" in row

    holder = kids.start(hook="sync", save="raise", steps=1)
    holder.wait_for("ready")
    newcomer = kids.start(report_errors=True)
    named = f"the save hook failed: ValueError: disk on fire in {holder.pid}"
    error = newcomer.wait_for("error")
    assert error["type"] == "SaveFailedError" and named in error["message"], error
    assert newcomer.finish()[0] == 1
    assert _refusals_by(kids, holder.pid) == [named], "the refused event in the event log"
    assert not kids.events("save_hook_failed"), "the traceback line is not in the event log"
    holder.proc.terminate()
    _, _, err = holder.finish()
    stderr = err.decode()
    assert "event='refused'" in stderr and named in stderr
    (failed,) = [line for line in stderr.splitlines() if "event='save_hook_failed'" in line]
    assert "Traceback (most recent call last)" in failed
