"""A process that ends leaves no Highlander thread running Python under the interpreter's teardown.

CPython 3.11 crashes now and then (SIGSEGV in the import lock, or an abort)
when a daemon thread is still importing while the interpreter shuts down:
``make bench`` caught a newcomer that succeeded, released and died by
SIGSEGV, its serving thread still importing the serving side (about 1 exit
in 100 when a process acquires and releases at once).  The crash itself is
a matter of timing; what prevents it is not: ``release()`` waits for the
serving thread, and the OBSERVE/WARN probe is waited for at exit.  These
tests make the threads' imports slow on purpose (a finder that sleeps in
those threads only) and check, in real processes, that no such thread is
alive where it would be torn down.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import pytest

from tests.support.proctools import Child, Children

pytestmark = pytest.mark.timeout(120)

#: A finder that makes the first import on the thread named ``HL_SLOW_THREAD`` take 0.5 s.
PRELUDE = """
    import importlib.abc, json, os, sys, threading, time

    SLOW_THREAD = os.environ["HL_SLOW_THREAD"]

    _fd = int(os.environ["HL_READY_FD"])
    slept = []

    def report(**fields):
        os.write(_fd, (json.dumps({"pid": os.getpid(), **fields}) + "\\n").encode())

    class Slow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if threading.current_thread().name == SLOW_THREAD and not slept:
                slept.append(name)
                time.sleep(0.5)
            return None

    sys.meta_path.insert(0, Slow())
"""

RELEASER = """
    from highlander import Highlander

    hl = Highlander(app="child", exit_when_orphaned=False).acquire()
    hl.release()
    alive = [t.name for t in threading.enumerate() if t.name == SLOW_THREAD]
    report(event="released", alive=alive, slept=slept)
"""

HOLDER = """
    import json, os, time
    from highlander import Highlander

    hl = Highlander(app="child", exit_when_orphaned=False).acquire()
    os.write(int(os.environ["HL_READY_FD"]), b'{"event": "ready"}\\n')
    time.sleep(600)
"""

OBSERVER = """
    import atexit

    def last():  # registered first, so it runs after every exit handler of Highlander's
        alive = [t.name for t in threading.enumerate() if t.name == SLOW_THREAD]
        report(event="exit", alive=alive, slept=slept)

    atexit.register(last)
    from highlander import Highlander

    hl = Highlander(app="child", mode="observe", exit_when_orphaned=False).acquire()
    report(event="duplicate", is_holder=hl.is_holder)
"""


def _program(source: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(source)]


def _ended_cleanly(child: Child, report: dict[str, Any], thread: str) -> None:
    """The slowed ``thread`` did run, was not alive where reported, and the child exited 0."""
    assert report["slept"], f"{thread} imported nothing: the test did not run"
    assert report["alive"] == []
    status, out, err = child.finish()
    assert status == 0, err.decode()[-2000:]
    assert out == b""


def test_release_returns_after_the_serving_thread_has_ended(kids: Children) -> None:
    child = kids.spawn(_program(RELEASER), kids.env(HL_SLOW_THREAD="highlander-child"))
    _ended_cleanly(child, child.wait_for("released"), "the serving thread")


def test_the_probe_is_waited_for_at_exit(kids: Children) -> None:
    holder = kids.spawn([sys.executable, "-c", textwrap.dedent(HOLDER)], kids.env())
    holder.wait_for("ready")
    observer = kids.spawn(_program(OBSERVER), kids.env(HL_SLOW_THREAD="highlander-probe"))
    assert observer.wait_for("duplicate")["is_holder"] is False
    _ended_cleanly(observer, observer.wait_for("exit"), "the probe")
