"""The rendezvous is the truth (#11, cases 1 and 7), with real processes and real files.

A wiped runtime directory, or a lock file deleted under a live holder, must
not leave two holders: the holder notices and steps down.  Generations never
repeat, even after a wipe, and a planted one cannot make the next record
unreadable.  Socket names tell another user nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from highlander._host.record import GENERATION_MAX, read_record
from highlander._host.rendezvous import project_key
from tests.support.proctools import Child, Children, wipe

#: Hang guard (never a performance bound).
SETTLE = 30.0


def _holder(kids: Children, **cfg: object) -> Child:
    child = kids.start(**cfg)
    child.wait_for("ready")
    return child


def _state(kids: Children) -> str:
    (state,) = kids.runtime.glob("*.state")
    return str(state)


# -- case 7: generations -------------------------------------------------------------


def test_generations_never_repeat_after_the_runtime_dir_is_wiped(kids: Children) -> None:
    first = _holder(kids)
    second = kids.start()
    assert second.wait_for("ready")["generation"] == 2
    assert first.finish()[0] == 0
    os.kill(second.pid, signal.SIGKILL)
    second.finish()
    shutil.rmtree(kids.runtime)  # a /tmp cleaner, a logout
    third = kids.start()
    report = third.wait_for("ready")
    assert report["outcome"] == "claimed_free"
    assert report["generation"] == 3  # not 1 again


def test_a_planted_generation_at_the_bound_leaves_a_readable_record(kids: Children) -> None:
    first = _holder(kids)
    path = _state(kids)
    record = read_record(path)
    assert record is not None
    planted = record._replace(generation=GENERATION_MAX - 1)
    with open(path, "w") as out:
        out.write(json.dumps(planted._asdict()))
    assert read_record(path) is not None  # readers accept it...
    os.kill(first.pid, signal.SIGKILL)
    first.finish()
    second = kids.start()
    report = second.wait_for("ready")
    written = read_record(path)
    assert written is not None, "the successor wrote a record every reader rejects"
    assert written.pid == second.pid and written.generation == report["generation"] == 2


# -- case 7: socket names ------------------------------------------------------------


@pytest.fixture
def short_kids() -> Iterator[Children]:
    """Children under a short directory: long paths get hashed names anyway (sun_path)."""
    top = Path(tempfile.mkdtemp(prefix="hl-", dir="/tmp"))
    children = Children(top)
    try:
        yield children
    finally:
        children.cleanup()
        shutil.rmtree(top, ignore_errors=True)


def test_socket_names_tell_another_user_nothing(short_kids: Children) -> None:
    kids = short_kids
    holder = _holder(kids, app="very-secret-app")
    digest = project_key(os.path.realpath(kids.project)).hex()[:16]
    # /proc/net/unix is what `ss -xl` reads, and every user can read it.
    if shutil.which("setpriv") and os.geteuid() == 0:
        as_other = ["setpriv", "--reuid=4251", "--regid=4251", "--clear-groups"]
        table = subprocess.run(
            [*as_other, "cat", "/proc/net/unix"], capture_output=True, check=True, text=True
        ).stdout
    else:
        with open("/proc/net/unix") as unix:
            table = unix.read()
    ours = [line for line in table.splitlines() if str(kids.runtime) in line]
    assert ours, "the holder's listener is not in the table"
    for line in ours:
        assert "very-secret-app" not in line and digest not in line, line
    assert holder.proc.poll() is None


# -- case 1: the rendezvous taken from under a live holder --------------------------


def _steps_down(child: Child) -> str:
    """It steps down by itself (on_deposed, exit 0); what check_current() then says."""
    report = child.wait_for("deposed", SETTLE)
    status, _, err = child.finish(SETTLE)
    assert status == 0, err.decode()[-800:]
    return str(report["why"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["wipe", "lock_and_socket", "lock"])
def test_a_holder_whose_rendezvous_is_taken_steps_down(kids: Children, how: str) -> None:
    first = _holder(kids)
    if how == "wipe":
        wipe(kids.runtime)
    else:
        for pattern in ("*.lock", "*.sock") if how == "lock_and_socket" else ("*.lock",):
            for path in kids.runtime.glob(pattern):
                path.unlink()
    why = _steps_down(first)
    assert why == "generation 1 ended: its lock file or runtime directory was deleted or replaced"
    if how != "wipe":  # (the wiped directory took the event log with it)
        assert [e["pid"] for e in kids.events("lost_rendezvous")] == [first.pid]
    second = kids.start()
    report = second.wait_for("ready")
    assert report["outcome"] in ("claimed_free", "claimed_stale")
    assert report["generation"] == 2
