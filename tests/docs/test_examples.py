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
import socket
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


def _line_with(proc: subprocess.Popen[bytes], text: str) -> str:
    """Read ``proc``'s stdout until a line containing ``text`` (bounded by WAIT per line)."""
    assert proc.stdout is not None
    while True:
        readable, _, _ = select.select([proc.stdout], [], [], WAIT)
        assert readable, f"no {text!r} from pid {proc.pid} in time"
        line = proc.stdout.readline().decode()
        assert line, f"pid {proc.pid} ended before {text!r}"
        if text in line:
            return line


def test_the_etcd_indexer_hands_its_index_from_one_host_to_the_other(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    example = EXAMPLES / "etcd_indexer"
    base = {k: v for k, v in os.environ.items() if not k.startswith("HIGHLANDER_")}
    started: list[subprocess.Popen[bytes]] = []

    def run(script: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, str(example / script), *args],
            cwd=tmp_path,
            env={**base, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        started.append(proc)
        return proc

    try:
        etcd = run("local_etcd.py", "--port", str(port))
        backend = _line_with(etcd, "HIGHLANDER_BACKEND=").strip().split("=", 1)[1]
        shared = {
            "HIGHLANDER_BACKEND": backend,
            "HIGHLANDER_PROJECT_ID": "example.com/acme/indexer",
            "HIGHLANDER_TOKEN": "example-token-the-same-on-every-host",
            "INDEXER_PERIOD": "0.2",
            "HIGHLANDER_RUNTIME_DIR": str(tmp_path / "rt"),
        }
        laptop = run("indexer.py", HIGHLANDER_HOST_ID="laptop", **shared)
        assert "holding generation 1 (claimed_free)" in _line_with(laptop, "holding")
        _line_with(laptop, "indexed 3 files; summary written")
        devbox = run("indexer.py", HIGHLANDER_HOST_ID="devbox", **shared)
        took = _line_with(devbox, "holding")
        assert "holding generation 2 (succeeded), with" in took and "on laptop" in took
        handed = int(_line_with(laptop, "handing over an index of").split(" of ")[1].split()[0])
        assert f"with {handed} files indexed on laptop" in took
        _line_with(laptop, "deposed")
        assert laptop.wait(timeout=WAIT) == 0
        _line_with(devbox, f"indexed {handed + 1} files; summary written")
    finally:
        for proc in reversed(started):  # the indexers first, then etcd (it deletes its data)
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=WAIT)
            if proc.stdout is not None:
                proc.stdout.close()
