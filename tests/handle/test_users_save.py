"""#13 items 1-2: a save hook that raises is named, whole, on both sides.

The newcomer gets :class:`SaveFailedError` naming the hook's own exception
(type and message), the holder's ``refused`` event names it too, the
holder's stderr carries its traceback (never stdout), and the holder keeps
serving.  Every combination of sync/async holder, newcomer and hook, with
real processes.
"""

from __future__ import annotations

import time

import pytest

from tests.support.proctools import Children


def _refusals_by(kids: Children, pid: int) -> list[str]:
    """The holder's ``refused`` details, once it has written one (it does so right after
    sending REFUSED, so the newcomer may report first); bounded by a hang guard."""
    deadline = time.monotonic() + 10.0
    while True:
        found = [e["detail"] for e in kids.events("refused") if e["pid"] == pid]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("holder_async", "hook", "newcomer_async"),
    [
        (False, "sync", False),
        (False, "async", True),
        (True, "async", False),
        (True, "sync", True),
    ],
    ids=["sync-holder-sync-hook", "sync-holder-async-hook", "async-holder", "async-holder-sync"],
)
def test_a_raising_save_hook_is_named_on_both_sides(
    kids: Children, holder_async: bool, hook: str, newcomer_async: bool
) -> None:
    holder = kids.start(**{"async": holder_async, "hook": hook, "save": "raise", "steps": 2})
    holder.wait_for("ready")
    newcomer = kids.start(**{"async": newcomer_async, "report_errors": True})
    error = newcomer.wait_for("error")
    original = f"ValueError: disk on fire in {holder.pid}"
    assert error["type"] == "SaveFailedError"
    assert original in error["message"], error
    assert newcomer.finish()[0] == 1
    assert holder.proc.poll() is None, "a failed save is never fatal to the holder"
    assert _refusals_by(kids, holder.pid) == [f"the save hook failed: {original}"]

    holder.proc.terminate()
    _, out, err = holder.finish()
    assert out == b"", "the traceback goes to stderr, never stdout"
    failed = [line for line in err.decode().splitlines() if "event='save_hook_failed'" in line]
    assert len(failed) == 1, err.decode()
    assert "Traceback (most recent call last)" in failed[0]
    assert "disk on fire" in failed[0]
    # The hook's own frames, not only the plumbing that ran it.
    assert ("in _save" if hook == "sync" else "in async_save") in failed[0]


@pytest.mark.parametrize("hook", ["sync", "async"])
def test_an_exception_group_from_the_hook_names_its_inner_error(kids: Children, hook: str) -> None:
    holder = kids.start(hook=hook, save="raise_group", steps=1)
    holder.wait_for("ready")
    newcomer = kids.start(report_errors=True)
    error = newcomer.wait_for("error")
    assert error["type"] == "SaveFailedError"
    assert "OSError: [Errno 28] No space left" in error["message"], error
    assert "sub-exception" not in error["message"]
    (detail,) = _refusals_by(kids, holder.pid)
    assert "OSError: [Errno 28] No space left" in detail
    assert holder.proc.poll() is None
