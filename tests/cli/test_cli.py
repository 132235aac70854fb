"""The ``highlander`` command against real holders, and ``highlander run`` byte for byte."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.proctools import WAIT, Children


def cli(
    kids: Children, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args],
        env=env or kids.env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )


def test_status_of_a_live_holder_and_of_none(kids: Children) -> None:
    none = cli(kids, "status", "--app", "child")
    assert none.returncode == 3
    assert b"no holder" in none.stdout

    holder = kids.start()
    holder.wait_for("ready")
    human = cli(kids, "status")  # the app is found from the project's state
    assert human.returncode == 0, human.stderr
    text = human.stdout.decode()
    assert f"pid {holder.pid}" in text
    assert "generation  1" in text and "answers     yes" in text

    data = json.loads(cli(kids, "status", "--json").stdout)
    assert data["held"] is True
    assert data["pid"] == holder.pid
    assert data["generation"] == 1
    assert data["mode"] == "auto"
    assert data["socket"].endswith(".sock")
    assert [e["event"] for e in data["last_events"]][:1] == ["claimed"]


def test_stop_shows_progress_and_reports_the_handoff(kids: Children) -> None:
    holder = kids.start(steps=3, step_delay=0.02)
    holder.wait_for("ready")
    stopped = cli(kids, "stop", "--json")
    assert stopped.returncode == 0, stopped.stderr
    data = json.loads(stopped.stdout)
    assert data["stopped"] == holder.pid
    assert data["handoff"]["counter"] == 1
    progress = [line for line in stopped.stderr.decode().splitlines() if line.startswith("saving")]
    assert progress[0].startswith("saving #0")
    assert any("3/3 step 2" in line for line in progress)
    assert holder.finish()[0] == 0
    assert not list(kids.runtime.glob("*.sock")), "a stopped holder removes its socket"
    assert cli(kids, "status", "--app", "child").returncode == 3
    assert cli(kids, "stop", "--app", "child").returncode == 3


def test_events_json_parses(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    kids.start().wait_for("ready")
    out = cli(kids, "events", "--json", "-n", "50", "--app", "child")
    assert out.returncode == 0
    events = json.loads(out.stdout)  # one document: the list (#13)
    kinds = [e["event"] for e in events]
    for kind in ("claimed", "hello", "save_requested", "saved", "acked", "relinquished"):
        assert kind in kinds
    assert all(isinstance(e["ts"], float) and e["app"] == "child" for e in events)


def test_doctor_flags_an_unsafe_runtime_dir(kids: Children, tmp_path: Path) -> None:
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir(mode=0o755)
    unsafe.chmod(0o755)
    out = cli(kids, "doctor", env=kids.env(HIGHLANDER_RUNTIME_DIR=str(unsafe)))
    assert out.returncode == 1
    lines = out.stdout.decode().splitlines()
    bad = [i for i, line in enumerate(lines) if line.startswith("FAIL") and "runtime dir" in line]
    assert bad, lines
    assert f"chmod 700 {unsafe}" in lines[bad[0] + 1]

    good = cli(kids, "doctor", "--json")
    assert good.returncode == 0
    checks = {f["check"]: f["verdict"] for f in json.loads(good.stdout)}
    assert checks["pidfd"] == "OK" and checks["token"] == "OK" and checks["/proc"] == "OK"


def test_token_prints_a_token_and_valid_snippets(kids: Children) -> None:
    out = cli(kids, "token", "--json", "--app", "notes")
    data = json.loads(out.stdout)
    assert len(data["token"]) >= 40
    for where, text in data["snippets"].items():
        config = json.loads(text)
        servers = config.get("mcpServers") or config["servers"]
        env = servers["notes"]["env"]
        assert "HIGHLANDER_TOKEN" in env, where
    vscode = json.loads(next(t for w, t in data["snippets"].items() if "VS Code" in w))
    assert vscode["inputs"][0]["password"] is True


# -- highlander run ---------------------------------------------------------------

PAYLOAD = (
    b'{"jsonrpc":"2.0","id":1,"result":{"text":"caf\xc3\xa9 \\u0000 \\r\\n tab\\t"}}\n'
    + b'{"jsonrpc":"2.0","method":"notify","params":{"blob":"'
    + b"x" * 100_000
    + b'"}}\n'
    + bytes(range(1, 10))
    + b"\r\n"
)

ECHO_CHILD = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(int(os.environ.get("ON_TERM", "0"))))
sys.stdout.buffer.write(sys.stdin.buffer.read())
sys.stdout.buffer.flush()
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def run_cmd(*cmd: str) -> list[str]:
    return [sys.executable, "-m", "highlander.cli", "run", "--app", "wrapped", "--", *cmd]


def test_run_passes_stdio_byte_for_byte_and_returns_the_status(kids: Children) -> None:
    env = kids.env(EXIT="7")
    done = subprocess.run(
        run_cmd(sys.executable, "-c", ECHO_CHILD),
        input=PAYLOAD,
        env=env,
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert done.stdout == PAYLOAD
    assert done.returncode == 7
    assert [e["event"] for e in kids.events()] == ["claimed", "command_exited", "released"]


def test_run_exit_status_of_a_signalled_child(kids: Children) -> None:
    done = subprocess.run(
        run_cmd(sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        env=kids.env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 128 + signal.SIGKILL


WINDING_CHILD = """
import json, os, signal, sys, time
fd = int(os.environ["HIGHLANDER_PROGRESS_FD"])
def term(*_):
    for step in ("flushing", "closing"):
        os.write(fd, (step + "\\n").encode())
        time.sleep(0.05)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
report = os.open(os.environ["REPORT_FIFO"], os.O_WRONLY)
os.write(report, (json.dumps({
    "pid": os.getpid(),
    "handoff": json.loads(os.environ["HIGHLANDER_HANDOFF"]),
    "generation": int(os.environ["HIGHLANDER_GENERATION"]),
}) + "\\n").encode())
while True:
    time.sleep(60)
"""


def _wrapped(kids: Children, name: str) -> tuple[subprocess.Popen[bytes], int]:
    """A wrapped child that reports over a FIFO (the wrapper passes no other fds on)."""
    fifo = kids.tmp / f"{name}.fifo"
    os.mkfifo(fifo)
    read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    kids.keep.append(read_end)
    # Our own idle writer keeps the FIFO from reading as EOF before the child opens it.
    kids.keep.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    proc = subprocess.Popen(
        run_cmd(sys.executable, "-c", WINDING_CHILD),
        env=kids.env(REPORT_FIFO=str(fifo)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    return proc, read_end


def _ready(fd: int) -> dict[str, object]:
    line = b""
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([fd], [], [], WAIT)
        assert readable, "the wrapped child never reported"
        line += os.read(fd, 65536)
    report: dict[str, object] = json.loads(line.splitlines()[0])
    return report


def test_run_hands_over_between_wrapped_commands(kids: Children) -> None:
    first, first_fd = _wrapped(kids, "a")
    second: subprocess.Popen[bytes] | None = None
    try:
        a = _ready(first_fd)
        assert a["handoff"] is None and a["generation"] == 1
        second, second_fd = _wrapped(kids, "b")
        b = _ready(second_fd)
        assert b["generation"] == 2
        assert b["handoff"] == {
            "command": [sys.executable, "-c", WINDING_CHILD],
            "exit_status": 0,
        }
        out, _ = first.communicate(timeout=WAIT)
        assert first.returncode == 0
        assert out == b""
        notes = [e["note"] for e in kids.events("progress")]
        assert notes[0] == "saving" and "flushing" in notes and "closing" in notes
        assert not os.path.exists(f"/proc/{a['pid']}")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.communicate(timeout=WAIT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate(timeout=WAIT)


class _JsonLines:
    """JSON lines from a child's stdout, read as they come (each wait is a hang guard)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""
        self.seen: list[dict[str, Any]] = []

    def until(self, done: Callable[[list[dict[str, Any]]], bool]) -> None:
        while not done(self.seen):
            readable, _, _ = select.select([self.fd], [], [], WAIT)
            assert readable, f"nothing new within {WAIT} s; saw {self.seen}"
            chunk = os.read(self.fd, 65536)
            assert chunk, f"the follower ended; saw {self.seen}"
            *lines, self.buffer = (self.buffer + chunk).split(b"\n")
            self.seen += [json.loads(line) for line in lines]


def _claims(events: list[dict[str, Any]]) -> list[int]:
    return [e["pid"] for e in events if e["event"] == "claimed"]


def test_events_follow_prints_what_happens_next_once(kids: Children) -> None:
    first = kids.start()
    first.wait_for("ready")
    argv = [
        sys.executable,
        "-m",
        "highlander.cli",
        "events",
        "--follow",
        "--json",
        "--app",
        "child",
    ]
    follower = kids.spawn(argv, kids.env())
    assert follower.proc.stdout is not None
    lines = _JsonLines(follower.proc.stdout.fileno())
    lines.until(lambda seen: _claims(seen) == [first.pid])  # the history
    second = kids.start()
    second.wait_for("ready")
    lines.until(lambda seen: len(_claims(seen)) >= 2)  # what happened next
    assert _claims(lines.seen) == [first.pid, second.pid]
    keys = [(e["ts"], e["pid"], e["event"]) for e in lines.seen]
    assert len(keys) == len(set(keys)), "an event was printed twice"
    assert {"hello", "save_requested", "saved", "acked", "relinquished"} <= {
        e["event"] for e in lines.seen
    }


def test_reading_new_events_takes_whole_lines_only(tmp_path: Path) -> None:
    from highlander._host.event_log import read_new_events, snapshot_events

    path = str(tmp_path / "x.events.jsonl")
    assert read_new_events(path, 0) == ([], 0)  # no file yet
    with open(path, "wb") as handle:
        handle.write(b'{"event": "a"}\n[1, 2]\n\x00torn\n{"event": "b"}\n{"event": "c"')
    events, offset = read_new_events(path, 0)
    assert [e["event"] for e in events] == ["a", "b"]  # not a list, not garbage, not half a line
    assert offset == len(b'{"event": "a"}\n[1, 2]\n\x00torn\n{"event": "b"}\n')
    with open(path, "ab") as handle:
        handle.write(b', "more": 1}\n')
    events, offset2 = read_new_events(path, offset)
    assert events == [{"event": "c", "more": 1}]  # the rest of the line, once whole
    assert read_new_events(path, offset2) == ([], offset2)
    os.replace(path, path + ".1")  # rotated: the new file is shorter than the offset
    with open(path, "wb") as handle:
        handle.write(b'{"event": "d"}\n')
    assert [e["event"] for e in read_new_events(path, offset2)[0]] == ["d"]
    history, end = snapshot_events(path)
    assert [e["event"] for e in history] == ["a", "b", "c", "d"]
    assert end == len(b'{"event": "d"}\n')
