"""#13 items 4 and 17: what Python users expect of the handle.

A second ``ensure_singleton()`` in one process returns the first handle (and
another app or project is a ``ConfigurationError`` that leaves the held
claim alone); ``with Highlander(...) as hl:`` works; ``acquire(timeout=)``
bounds the whole wait.  Real processes throughout.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

from tests.support.proctools import Child, Children, wait_stopped

#: Reports through HL_READY_FD; sleeps until killed after its last report.
PRELUDE = """
import json, os, sys, time
from highlander import Highlander, HighlanderError
_fd = int(os.environ["HL_READY_FD"])
def report(**fields):
    os.write(_fd, (json.dumps({"pid": os.getpid(), **fields}) + "\\n").encode())
"""


def _helper(kids: Children, code: str, **env: str) -> Child:
    """Run ``code`` (after :data:`PRELUDE`) in this test's runtime dir and project."""
    return kids.spawn([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], kids.env(**env))


def _status(kids: Children, app: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", "status", "--json", "--app", app],
        env=kids.env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_second_ensure_singleton_returns_the_first_handle(kids: Children) -> None:
    child = _helper(
        kids,
        """
            first = Highlander.ensure_singleton(app="twice")
            second = Highlander.ensure_singleton(app="twice")
            first.check_current()
            report(event="done", same=second is first, holder=first.is_holder,
                   generation=second.generation)
            time.sleep(60)
        """,
    )
    done = child.wait_for("done")
    assert done["same"] and done["holder"] and done["generation"] == 1
    assert child.proc.poll() is None, "the process must not end"
    status = _status(kids, "twice")
    assert status.returncode == 0, status
    assert f'"pid": {child.pid}' in status.stdout


def test_another_app_in_the_same_process_is_refused_and_the_claim_stays(kids: Children) -> None:
    child = _helper(
        kids,
        """
            from highlander import ConfigurationError
            first = Highlander.ensure_singleton(app="first")
            try:
                Highlander.ensure_singleton(app="second")
            except ConfigurationError as exc:
                report(event="refused", message=str(exc))
            else:
                report(event="claimed-both")
            first.check_current()
            report(event="still", holder=first.is_holder)
            time.sleep(60)
        """,
    )
    refused = child.next_report()
    assert refused is not None and refused["event"] == "refused", refused
    assert "already holds first" in refused["message"]
    assert "release()" in refused["message"]
    assert child.wait_for("still")["holder"]
    assert child.proc.poll() is None
    assert _status(kids, "first").returncode == 0
    assert _status(kids, "second").returncode == 3, "the second app was never claimed"


def test_acquire_on_another_handle_for_the_held_claim_keeps_it(kids: Children) -> None:
    child = _helper(
        kids,
        """
            from highlander import ConfigurationError
            first = Highlander(app="again").acquire()
            assert first.acquire() is first  # again on the same handle: itself
            try:
                Highlander(app="again").acquire()
            except ConfigurationError as exc:
                report(event="refused", message=str(exc))
            first.check_current()
            report(event="still", holder=first.is_holder)
            time.sleep(60)
        """,
    )
    assert "already holds again" in child.wait_for("refused")["message"]
    assert child.wait_for("still")["holder"]
    time.sleep(0.2)
    assert child.proc.poll() is None


# -- item 12: a warning is an event name plus fields, never a sentence in event= -----------

EVENT_FIELD = re.compile(r"event='([^']*)'")


def _event_names(stderr: bytes) -> list[str]:
    return [m.group(1) for m in EVENT_FIELD.finditer(stderr.decode())]


def test_warn_mode_warnings_have_short_event_names(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)
    try:
        duplicate = _helper(
            kids,
            """
            from highlander import Timeouts
            from highlander._host.log import flush
            hl = Highlander(app="child", mode="warn", timeouts=Timeouts(hello=0.3)).acquire()
            hl._probe.join(30)
            flush()
            report(event="done", outcome=hl.outcome.value)
            """,
        )
        assert duplicate.wait_for("done")["outcome"] == "duplicate"
        status, out, err = duplicate.finish()
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert (status, out) == (0, b"")
    names = _event_names(err)
    assert "running_as_duplicate" in names and "holder_not_answering" in names, err
    assert all(re.fullmatch(r"[a-z_]+", name) for name in names), names
    lines = err.decode().splitlines()
    (warned,) = [line for line in lines if "event='running_as_duplicate'" in line]
    assert f"holder_pid={holder.pid}" in warned and "runs as a duplicate" in warned
    (silent,) = [line for line in lines if "event='holder_not_answering'" in line]
    assert "is not answering" in silent and "Nothing was signalled" in silent


def test_token_warnings_have_short_event_names(kids: Children) -> None:
    child = _helper(
        kids,
        """
        from highlander._host.log import flush
        hl = Highlander(app="short").acquire()
        hl.settings.key()
        flush()
        report(event="done")
        """,
        HIGHLANDER_TOKEN="abc",
    )
    child.wait_for("done")
    _, out, err = child.finish()
    assert out == b""
    names = _event_names(err)
    assert "token_too_short" in names, err
    assert all(re.fullmatch(r"[a-z_]+", name) for name in names), names


# -- item 17: the sync context manager and acquire(timeout=) ------------------------------


def test_with_statement_acquires_and_releases(kids: Children) -> None:
    go_on = kids.tmp / "go-on"
    child = _helper(
        kids,
        f"""
        with Highlander(app="ctx") as hl:
            hl.check_current()
            report(event="inside", holder=hl.is_holder, generation=hl.generation)
            while not os.path.exists({str(go_on)!r}):  # until the test says go on
                time.sleep(0.01)
        report(event="after", holder=hl.is_holder)
        time.sleep(60)
        """,
    )
    inside = child.wait_for("inside")
    assert inside["holder"] and inside["generation"] == 1
    assert _status(kids, "ctx").returncode == 0
    go_on.touch()
    assert child.wait_for("after")["holder"] is False
    assert _status(kids, "ctx").returncode == 3, "released on leaving the block"


def _timed_newcomer(kids: Children, timeout: float, **timeouts: float) -> Child:
    return _helper(
        kids,
        f"""
        from highlander import AcquireTimeoutError, Timeouts
        started = time.monotonic()
        try:
            Highlander(app="child", timeouts=Timeouts(**{timeouts!r})).acquire(timeout={timeout})
            report(event="result", outcome="held", took=time.monotonic() - started)
        except AcquireTimeoutError as exc:
            report(event="result", outcome="timeout", message=str(exc),
                   timeout_error=isinstance(exc, TimeoutError),
                   took=time.monotonic() - started)
        """,
    )


def test_acquire_timeout_bounds_a_long_save(kids: Children) -> None:
    holder = kids.start(steps=200, step_delay=0.05)  # a 10 s save that keeps progressing
    holder.wait_for("ready")
    newcomer = _timed_newcomer(kids, 1.0)
    result = newcomer.wait_for("result")
    assert result["outcome"] == "timeout", result
    assert 1.0 <= result["took"] < 4.0, result
    assert result["timeout_error"]
    assert f"pid {holder.pid}" in result["message"]
    assert "acquire()" in result["message"] and "highlander status" in result["message"]
    assert newcomer.finish()[0] == 0
    assert holder.proc.poll() is None, "the holder keeps the project"
    assert _status(kids, "child").returncode == 0


def test_acquire_timeout_never_signals_a_silent_holder_after_the_time_is_up(
    kids: Children,
) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)
    try:
        # Without a time limit this newcomer would wait 30 s for HELLO, then end the holder.
        newcomer = _timed_newcomer(kids, 0.5, hello=30.0, stall=30.0)
        result = newcomer.wait_for("result")
        assert result["outcome"] == "timeout", result
        assert result["took"] < 3.0, result
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert holder.proc.poll() is None
    assert not kids.events("terminated") and not kids.events("killed")
    assert _status(kids, "child").returncode == 0


def test_acquire_timeout_zero_takes_a_free_project(kids: Children) -> None:
    newcomer = _timed_newcomer(kids, 0)
    assert newcomer.wait_for("result")["outcome"] == "held"


def test_acquire_timeout_must_be_seconds(kids: Children) -> None:
    child = _helper(
        kids,
        """
        from highlander import ConfigurationError
        for bad in (-1, float("nan"), "5", True):
            try:
                Highlander(app="bad").acquire(timeout=bad)
                report(event="accepted", value=repr(bad))
            except ConfigurationError as exc:
                report(event="refused", message=str(exc))
        report(event="end")
        """,
    )
    heard = [child.next_report() for _ in range(5)]
    assert [r["event"] for r in heard if r] == ["refused"] * 4 + ["end"], heard
    assert all("seconds >= 0" in r["message"] for r in heard[:4] if r)
