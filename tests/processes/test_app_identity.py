"""Identities never merge: every app name is used whole, by the library and by ``run``.

Real holders (tests/programs/child.py, and ``highlander run`` around small
Python scripts) in one project and one runtime directory: names that the
old rules cut to 32 characters or rewrote to ``[A-Za-z0-9._-]`` hold side
by side, and ``highlander status`` shows each name as given.  Waits are
bounded; nothing is timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from highlander._commands.run import default_app
from highlander._host.rendezvous import project_paths
from tests.support.proctools import WAIT, Child, Children, readable

#: Two real-world names that agree on their first 32 characters.
LONG = ("acme-internal-code-search-server-indexer", "acme-internal-code-search-server-gateway")
#: Three names the old rules reduced to one.
LOOKALIKES = ("my/app", "my app", "my_app")


def cli(kids: Children, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``highlander ARGS`` for the test's project and runtime directory."""
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args],
        env=kids.env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )


def status(kids: Children, app: str | None) -> dict[str, Any]:
    """``highlander status --json`` (for ``app``, or the project's only app)."""
    done = cli(kids, "status", "--json", *(("--app", app) if app is not None else ()))
    data: dict[str, Any] = json.loads(done.stdout)
    data["exit"] = done.returncode
    return data


def hold_side_by_side(kids: Children, names: tuple[str, ...]) -> list[Child]:
    """Start one holder per name, one after the other; each must claim a free project."""
    holders = []
    for name in names:
        child = kids.start(app=name)
        ready = child.wait_for("ready")
        assert ready["is_holder"], (name, ready)
        assert ready["outcome"] == "claimed_free", (name, ready)
        holders.append(child)
    return holders


@pytest.mark.parametrize("names", [LONG, LOOKALIKES], ids=["long", "lookalikes"])
def test_distinct_names_share_no_file(tmp_path: Path, names: tuple[str, ...]) -> None:
    secret = os.urandom(32)
    paths = [project_paths(str(tmp_path), name, "/srv/project", secret=secret) for name in names]
    for attr in ("base", "socket", "lock", "state", "events"):
        values = {getattr(p, attr) for p in paths}
        assert len(values) == len(names), attr


def test_two_long_names_differing_after_32_characters_hold_at_once(kids: Children) -> None:
    first, second = hold_side_by_side(kids, LONG)
    assert first.proc.poll() is None  # not deposed: the second was another app
    assert not kids.events("save_requested")
    for child, name in zip((first, second), LONG, strict=True):
        shown = status(kids, name)
        assert (shown["exit"], shown["app"], shown["pid"]) == (0, name, child.pid)


def test_lookalike_names_are_three_apps_and_status_shows_them_whole(kids: Children) -> None:
    holders = hold_side_by_side(kids, LOOKALIKES)
    assert all(child.proc.poll() is None for child in holders)
    assert not kids.events("save_requested")
    for child, name in zip(holders, LOOKALIKES, strict=True):
        shown = status(kids, name)
        assert (shown["exit"], shown["app"], shown["pid"]) == (0, name, child.pid)
    # Without --app the choice is the user's, offered by the names as given.
    ambiguous = cli(kids, "status")
    assert ambiguous.returncode == 1
    assert "pass --app" in ambiguous.stderr.decode()
    assert "my app, my/app, my_app" in ambiguous.stderr.decode()


def test_status_finds_the_only_app_by_its_whole_name(kids: Children) -> None:
    (holder,) = hold_side_by_side(kids, ("search index (nightly)",))
    shown = status(kids, None)
    assert (shown["exit"], shown["app"], shown["pid"]) == (0, "search index (nightly)", holder.pid)


SERVER = """\
import os, time
place = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
fd = os.open(os.environ["READY_FIFO"], os.O_WRONLY)
os.write(fd, f"{place} {os.getpid()}\\n".encode())
os.close(fd)
parent = os.getppid()
while os.getppid() == parent:  # the wrapper is gone: so are we
    time.sleep(0.1)
"""


class Fifo:
    """A FIFO the wrapped servers announce themselves on: ``<place> <pid>`` lines."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path, 0o600)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self._writer = os.open(path, os.O_WRONLY)  # no EOF while no server has it open
        self.buffer = b""
        self.pids: list[int] = []

    def next_line(self) -> str:
        deadline = time.monotonic() + WAIT
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "no wrapped server announced itself"
            if readable([self.fd], left):
                self.buffer += os.read(self.fd, 4096)
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.pids.append(int(line.split()[1]))
        return line.decode().split()[0]

    def close(self) -> None:
        for pid in self.pids:  # wrapped servers are not the suite's children: end them here
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.close(self.fd)
        os.close(self._writer)


def test_run_names_two_index_scripts_of_one_project_apart(kids: Children) -> None:
    """``node …/filesystem/dist/index.js`` and ``…/memory/…`` used to be one app, ``index``."""
    fifo = Fifo(kids.tmp / "ready.fifo")
    wrappers, names = [], []
    try:
        for place in ("filesystem", "memory"):
            script = kids.tmp / "servers" / place / "dist" / "index.py"
            script.parent.mkdir(parents=True)
            script.write_text(SERVER)
            command = [sys.executable, str(script)]
            argv = [sys.executable, "-m", "highlander.cli", "run", "--", *command]
            wrappers.append(kids.spawn(argv, kids.env(READY_FIFO=str(fifo.path))))
            assert fifo.next_line() == place
            names.append(default_app(command))
        assert all(wrapper.proc.poll() is None for wrapper in wrappers)
        outcomes = [event["outcome"] for event in kids.events("claimed")]
        assert outcomes == ["claimed_free", "claimed_free"]
        assert names[0].startswith("filesystem-")
        assert names[1].startswith("memory-")
        for wrapper, name in zip(wrappers, names, strict=True):
            shown = status(kids, name)
            assert (shown["exit"], shown["app"], shown["pid"]) == (0, name, wrapper.pid)
    finally:
        fifo.close()
