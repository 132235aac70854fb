"""The examples' successions, through :mod:`highlander.testing` as a user's tests would run them.

Real processes: a holder running the example's own ``save`` (or the plain
example under ``highlander run``) and a newcomer that takes over, in a
sandbox of the test's own (#13 item 18).  tests/cli/test_mcp_e2e.py drives the
same examples with the MCP SDK's client.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from highlander.testing import WAIT, Sandbox
from tests.support.paths import EXAMPLES


def _path(*first: Path) -> str:
    return os.pathsep.join([*(str(p) for p in first), *(p for p in sys.path if p)])


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def _initialized(server: subprocess.Popen[bytes]) -> None:
    """Ask the server to initialize and read its answer: it serves (its SIGTERM handler is in)."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    server.stdin.flush()
    readable, _, _ = select.select([server.stdout], [], [], WAIT)
    assert readable, "the server did not answer initialize"
    assert json.loads(server.stdout.readline())["id"] == 1


def test_the_mcp_servers_save_hands_over_a_snapshot(highlander_sandbox: Sandbox) -> None:
    env = highlander_sandbox.env(PYTHONPATH=_path(EXAMPLES))
    done = highlander_sandbox.succession("mcp_server:save", app="notes", env=env)
    snapshot = highlander_sandbox.project / ".notes-snapshot.json"
    assert done.handoff == {"notes": {}, "snapshot": str(snapshot)}
    assert (done.outcome, done.generation, done.holder_status) == ("succeeded", 2, 0)
    assert json.loads(snapshot.read_text()) == {}
    assert "event='relinquished'" in done.holder_stderr


def test_the_plain_server_under_run_keeps_its_notes(highlander_sandbox: Sandbox) -> None:
    snapshot = highlander_sandbox.project / ".notes-snapshot.json"
    snapshot.write_text(json.dumps({"k": "a note from before"}))
    argv = [sys.executable, "-m", "highlander.cli", "run", "--app", "notes", "--"]
    argv += [sys.executable, str(EXAMPLES / "mcp_server_plain.py")]
    env = highlander_sandbox.env(PYTHONPATH=_path())
    first = highlander_sandbox.start(argv, env=env)
    highlander_sandbox.wait_for_event("claimed", first.pid)
    _initialized(first)
    second = highlander_sandbox.start(argv, env=env)
    claimed = highlander_sandbox.wait_for_event("claimed", second.pid)
    assert claimed["outcome"] == "succeeded"
    out, _ = first.communicate(timeout=WAIT)
    assert (first.returncode, out) == (0, b""), (
        "the first left with its child's status, stdout clean"
    )
    assert json.loads(snapshot.read_text()) == {"k": "a note from before"}

    out, _ = second.communicate(input=b"", timeout=WAIT)  # the client closes stdin
    assert (second.returncode, out) == (0, b"")
    assert highlander_sandbox.wait_for_event("released", second.pid)


def test_the_sandbox_is_what_the_process_and_its_children_see(highlander_sandbox: Sandbox) -> None:
    for name, value in highlander_sandbox.variables().items():
        assert os.environ[name] == value
    assert Path.home() == highlander_sandbox.home
    assert "HIGHLANDER_MODE" not in highlander_sandbox.env()


def test_importing_highlander_or_its_testing_module_does_not_import_pytest() -> None:
    code = (
        "import sys, highlander, highlander.cli, highlander.testing\n"
        "from highlander import Highlander\n"
        "assert 'pytest' not in sys.modules, 'pytest imported'\n"
        "assert not hasattr(highlander.testing, 'highlander_sandbox')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=WAIT, check=False
    )
    assert done.returncode == 0, done.stderr.decode()


def test_the_sandbox_ends_what_it_started_by_pid(tmp_path: Path) -> None:
    sandbox = Sandbox.create(tmp_path)
    sleeper = sandbox.start([sys.executable, "-c", "import time; time.sleep(600)"])
    sandbox.close()
    assert sleeper.returncode == -9
    assert not sandbox.runtime_dir.exists()
