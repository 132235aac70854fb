"""One place per user that a login session, an environment or another user cannot move (#11, 2-3).

These tests use the real default place of the test's user (root in CI):
``/tmp/highlander-0``, ``/run/user/0``.  They skip when either is already in
use on this machine, and remove everything they created.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from highlander._host.rendezvous import RUNTIME_VAR, choose_runtime_dir, default_runtime_dir
from tests.support.proctools import Child, Children, assert_no_overlap

UID = os.geteuid()
DEFAULT = default_runtime_dir(UID)
RUN_USER = f"/run/user/{UID}"
SQUATTER = 4250

needs_root = pytest.mark.skipif(UID != 0, reason="needs root to act as another uid")


@pytest.fixture
def default_place(kids: Children, tmp_path: Path) -> Iterator[Path]:
    """The real default place, absent before and removed after; a private HOME for the test.

    The children are ended first: a live holder restores its deleted socket,
    so removing the place under it races with the holder writing into it.
    """
    for path in (DEFAULT, RUN_USER):
        if os.path.lexists(path):
            pytest.skip(f"{path} is in use on this machine")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    try:
        yield home
    finally:
        kids.cleanup()
        for path in [DEFAULT, RUN_USER, *map(str, Path("/tmp").glob(f"highlander-{UID}-*"))]:
            if os.path.islink(path) or os.path.isfile(path):
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)


def _env(kids: Children, home: Path) -> dict[str, str]:
    env = kids.env(HOME=str(home))
    del env[RUNTIME_VAR]
    return env


def _start(kids: Children, home: Path) -> Child:
    return kids.start(env=_env(kids, home))


def test_the_place_ignores_run_user_and_the_environment(tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "xdg"), "TMPDIR": str(tmp_path / "t"), "HOME": "/x"}
    assert choose_runtime_dir(env=env, uid=4242) == "/tmp/highlander-4242"


def test_a_login_between_two_starts_does_not_move_the_rendezvous(
    kids: Children, default_place: Path
) -> None:
    first = _start(kids, default_place)
    assert first.wait_for("ready")["outcome"] == "claimed_free"
    os.makedirs(RUN_USER, mode=0o700)  # a login session begins
    second = _start(kids, default_place)
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded" and report["handoff"]["from"] == first.pid
    assert first.finish()[0] == 0
    assert not os.path.lexists(os.path.join(RUN_USER, "highlander"))
    assert_no_overlap(kids.reigns())


def _doctor(kids: Children, home: Path) -> str:
    """What `highlander doctor` says about the runtime directory (its stdout)."""
    done = subprocess.run(
        [sys.executable, "-m", "highlander.cli", "doctor"],
        env=_env(kids, home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout


def _squat(how: str) -> None:
    """Another user (a real uid, through setpriv) takes the default place first."""
    if how == "symlink":
        command = f"ln -s /tmp {DEFAULT}"
    else:
        mode = "0777" if how == "open_dir" else "0700"
        command = f"mkdir -m {mode} {DEFAULT}"
    as_squatter = ["setpriv", f"--reuid={SQUATTER}", f"--regid={SQUATTER}", "--clear-groups"]
    subprocess.run(
        [*as_squatter, "sh", "-c", command],
        check=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
    )
    assert os.lstat(DEFAULT).st_uid == SQUATTER


@needs_root
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
@pytest.mark.parametrize("how", ["open_dir", "closed_dir", "symlink"])
def test_a_squatted_default_place_falls_back_for_good(
    kids: Children, default_place: Path, how: str
) -> None:
    _squat(how)
    assert "falls back, for good" in _doctor(kids, default_place)
    first = _start(kids, default_place)
    assert first.wait_for("ready")["outcome"] == "claimed_free"
    marker = default_place / ".cache" / "highlander" / "runtime-dir"
    fallback = marker.read_text().strip()
    assert fallback.startswith(f"{DEFAULT}-") and len(fallback) == len(DEFAULT) + 13
    assert os.stat(fallback).st_uid == UID and os.stat(fallback).st_mode & 0o777 == 0o700
    assert list(Path(fallback).glob("*.sock")), "the holder is in the fallback"
    assert f"{fallback} (the fallback: {DEFAULT} was squatted" in _doctor(kids, default_place)
    # Every later start of this user meets it there, squat or no squat.
    second = _start(kids, default_place)
    assert second.wait_for("ready")["outcome"] == "succeeded"
    assert first.finish()[0] == 0
    if how == "symlink":
        os.unlink(DEFAULT)
    else:
        os.rmdir(DEFAULT)
    third = _start(kids, default_place)
    assert third.wait_for("ready")["outcome"] == "succeeded"
    assert second.finish()[0] == 0
    assert not os.path.lexists(DEFAULT)  # nobody went back to the default place
