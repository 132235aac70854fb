"""A rendezvous lost during a save is never handed over (#11 with #10's commit point).

The watch learns of a deleted or replaced lock file from inotify.  A bind
mount over the lock file changes what the path names without any event in
the directory, so the watch stays asleep: only the check just before SAVED
can notice.  Handing out a lock file that is no longer at its path would let
the holder go on believing it holds beside the next claimer of the path.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.proctools import Children


@pytest.mark.timeout(120)
def test_a_lock_replaced_during_the_save_ends_the_reign_instead_of_a_handover(
    kids: Children, tmp_path: Path
) -> None:
    holder = kids.start(save="normal", steps=6, step_delay=0.25)
    holder.wait_for("ready")
    (lock,) = kids.runtime.glob("*.lock")
    stand_in = tmp_path / "stand-in.lock"
    stand_in.write_bytes(b"")
    os.chmod(stand_in, 0o600)
    newcomer = kids.start()
    holder.wait_for("saving")
    mounted = subprocess.run(
        ["mount", "--bind", str(stand_in), str(lock)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        newcomer.finish()
        pytest.skip(f"cannot bind-mount over the lock file here: {mounted.stderr.decode().strip()}")
    try:
        status, _, err = holder.finish()
        report = newcomer.wait_for("ready")
    finally:
        subprocess.run(["umount", "-l", str(lock)], check=False)
    assert status == 0, err.decode()
    assert report["outcome"] in ("claimed_free", "claimed_stale"), report
    mine = [e for e in kids.events() if e["pid"] == holder.pid]
    assert "saved" not in [e["event"] for e in mine], mine
    (lost,) = [e for e in mine if e["event"] == "lost_rendezvous"]
    assert "cannot be handed over" in lost["reason"]
    # The reigns never overlap: the holder's ended before the newcomer's began.
    (first, second) = sorted(kids.reigns(), key=lambda r: r[2])
    assert first[0] == holder.pid and second[0] == newcomer.pid
    assert first[3] <= second[2]


@pytest.mark.timeout(120)
def test_a_socket_path_no_rename_can_replace_is_named_not_a_step_down(
    kids: Children, tmp_path: Path
) -> None:
    """Chaos seed 12: a directory replaced the socket path between the holder's look and
    its rename; the rename's error escaped and the healthy holder stepped down (its state
    lost). A bind mount over the socket path makes the same failure every time: the
    rename hits a mount point (EBUSY). The holder names it and keeps the project."""
    holder = kids.start(save="normal", steps=1)
    holder.wait_for("ready")
    (sock,) = kids.runtime.glob("*.sock")
    stand_in = tmp_path / "not-a-socket"
    stand_in.write_bytes(b"")
    mounted = subprocess.run(
        ["mount", "--bind", str(stand_in), str(sock)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot bind-mount over the socket here: {mounted.stderr.decode().strip()}")
    try:
        (kids.runtime / "wake-the-watch").write_bytes(b"")  # a mount makes no inotify event
        deadline = time.monotonic() + 30  # a hang guard, not a timing bound
        while time.monotonic() < deadline and not kids.events("socket_blocked"):
            time.sleep(0.05)
        (blocked,) = kids.events("socket_blocked")
        assert blocked["pid"] == holder.pid and "remove" in blocked["reason"]
        assert holder.proc.poll() is None
        assert kids.events("serving_failed") == [] and kids.events("relinquished") == []
    finally:
        subprocess.run(["umount", "-l", str(sock)], check=False)
    (kids.runtime / "wake-again").write_bytes(b"")
    report = kids.start().wait_for("ready")
    assert report["outcome"] == "succeeded" and report["handoff"]["from"] == holder.pid
