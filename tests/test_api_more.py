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

from proctools import Child, Children

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
    try:
        duplicate = _helper(
            kids,
            """
            from highlander import Timeouts
            from highlander._log import flush
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
        from highlander._log import flush
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
