"""A chaos child stopped by the harness survives the exit of whoever launched the harness.

etcd seed 45 at 6c27d51 failed on "child died of SIGHUP, no event": the run
was started in the background from a shell that then exited, while the
harness had a holder stopped.  The harness and its children formed one
process group; the shell's exit left it orphaned with a stopped member, and
the kernel sends such a group SIGHUP (then SIGCONT).  Each child now runs in
a group of its own, whose parent (the harness) stays in the same session.

Real processes, a real SIGSTOP, and a launcher that really exits: the
launcher starts a session of its own, so the harness's group is orphaned at
its exit wherever the suite runs (the process that adopts the harness is
outside that session).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.proctools import WAIT

#: The harness: a Lab, one child stopped, its pid written; then it waits to be ended.
HARNESS = """
import os, signal, sys, time
from pathlib import Path
from scripts.chaos.procs import Lab
from tests.support.proctools import wait_stopped
root = Path(sys.argv[1])
lab = Lab(root / "lab")
proc = lab.start_piped(0, ["sleep", "600"])
os.kill(proc.pid, signal.SIGSTOP)
wait_stopped(proc.pid)
(root / "child").write_text(str(proc.pid))
time.sleep(600)
"""

#: The launcher: starts the harness in a group of its own, waits for its child, exits.
LAUNCHER = """
import os, subprocess, sys, time
from pathlib import Path
root = Path(sys.argv[1])
harness = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(root)], process_group=0)
(root / "harness").write_text(str(harness.pid))
deadline = time.monotonic() + 60
while not (root / "child").exists() and time.monotonic() < deadline:
    time.sleep(0.01)
"""


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_stopped_child_outlives_the_launchers_exit(tmp_path: Path) -> None:
    (tmp_path / "lab").mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path), HARNESS],
        env=env,
        start_new_session=True,
    )
    pids: list[int] = []
    try:
        assert launcher.wait(timeout=WAIT) == 0
        pids.append(int((tmp_path / "harness").read_text()))
        assert (tmp_path / "child").exists(), "the harness never stopped its child"
        child = int((tmp_path / "child").read_text())
        pids.append(child)
        # The kernel's SIGHUP comes at the launcher's exit; give it time to be acted on
        # (a hang guard's wait: a dead child shows as gone or a zombie in this window).
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and _state(child) == "T":
            time.sleep(0.02)
        assert _state(child) == "T", f"the stopped child is {_state(child)!r}, not stopped"
        assert _state(pids[0]) not in (None, "Z"), "the harness died"
    finally:
        for pid in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
