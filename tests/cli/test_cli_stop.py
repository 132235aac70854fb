"""#13 item 5: ``highlander stop`` against a holder that cannot be asked, and ``stop --force``.

A plain ``stop`` that fails (a hung ``on_save``, a SIGSTOPped holder) says
what to do next, naming ``--force``; ``stop --force`` ends the holder the
record names (the verified kill, no save) and exits 0; a record that names
some other process (a reused pid, or a process that does not hold the lock)
gets nothing signalled.  Real holders, real signals; every process is ended
by pid (``kids``' cleanup).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from highlander._host.identity import process_identity
from tests.support.proctools import WAIT, Child, Children, wait_stopped
from tests.support.proctools_extra import Extras


def cli(kids: Children, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args],
        env=kids.env(),
        capture_output=True,
        text=True,
        timeout=WAIT * 2,  # a plain stop waits out the holder's stall deadline (10 s)
        check=False,
    )


def one_document(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.stdout.strip(), f"nothing on stdout (status {done.returncode}): {done.stderr}"
    return json.loads(done.stdout)


def force_ends(kids: Children, holder: Child) -> None:
    """``stop --force`` ends ``holder`` (its pid, by its exit status) and says so, exit 0."""
    forced = cli(kids, "stop", "--force", "--json", "--app", "child")
    assert forced.returncode == 0, forced.stderr
    assert one_document(forced) == {"stopped": holder.pid, "handoff": None, "forced": True}
    status, _, _ = holder.finish()
    assert status in (-signal.SIGTERM, -signal.SIGKILL), status
    assert cli(kids, "status", "--app", "child").returncode == 3
    signalled = [e for e in kids.events() if e["event"] in ("terminated", "killed")]
    assert signalled and {e["peer_pid"] for e in signalled} == {holder.pid}


def test_stop_of_a_hung_save_advises_force_which_ends_it(kids: Children) -> None:
    holder = kids.start(save="stall", steps=1)  # one step, then the hook never returns
    holder.wait_for("ready")
    done = cli(kids, "stop", "--json", "--app", "child")
    assert done.returncode == 1, done
    error = one_document(done)["error"]
    assert "stall" in error and "highlander stop --force" in error, error
    assert holder.proc.poll() is None, "a failed stop leaves the holder running"
    force_ends(kids, holder)


def test_stop_of_a_stopped_holder_advises_cont_or_force_which_ends_it(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)
    done = cli(kids, "stop", "--app", "child")
    assert done.returncode == 1, done
    assert f"kill -CONT {holder.pid}" in done.stderr, done.stderr
    assert "highlander stop --force" in done.stderr
    force_ends(kids, holder)


BYSTANDER = """
import signal, time
# Blocked, not handled: a signal sent to us stays pending, for the test to see.
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
report(event="ready")
time.sleep(600)
"""


def pending_signals(pid: int) -> dict[str, int]:
    """The process's pending signal masks (thread and process-wide), from /proc."""
    masks = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("SigPnd", "ShdPnd"):
            masks[name] = int(value, 16)
    return masks


@pytest.mark.parametrize("record_names", ["a reused pid", "a process without the lock"])
def test_force_signals_nothing_when_the_record_names_another_process(
    kids: Children, extras: Extras, record_names: str
) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    bystander = extras.helper(BYSTANDER)
    bystander.wait_for("ready")
    (state,) = kids.runtime.glob("child-*.state")
    record = json.loads(state.read_text())
    record["pid"] = bystander.pid  # a reused pid: the holder's start time, another process
    if record_names == "a process without the lock":
        who = process_identity(bystander.pid)
        assert who is not None
        record.update(start_time=who.start_time, exe=who.exe, uid=who.uid)
    state.write_text(json.dumps(record))

    done = cli(kids, "stop", "--force", "--json", "--app", "child")
    assert done.returncode == 1, done
    error = one_document(done)["error"]
    assert "never signals an unverified process" in error, error
    assert bystander.proc.poll() is None and holder.proc.poll() is None
    assert pending_signals(bystander.pid) == {"SigPnd": 0, "ShdPnd": 0}
    assert not [e for e in kids.events() if e["event"] in ("terminated", "killed")]
    assert [e["peer_pid"] for e in kids.events("identity_mismatch")] == [bystander.pid]


def test_force_without_a_holder_is_3(kids: Children) -> None:
    done = cli(kids, "stop", "--force", "--json", "--app", "child")
    assert done.returncode == 3
    assert one_document(done)["held"] is False
