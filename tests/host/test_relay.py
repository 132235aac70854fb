"""The share-mode relay (highlander/_relay.py): what it keeps of a session, and the real program.

The pure part (:class:`Setup`, the codec) is checked directly and against
the standard ``json`` module; the program itself runs for real, started as
``become_relay`` starts it (:func:`highlander._relay.command`), between pipes
on its stdio and one end of a socketpair playing the holder's session.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from highlander import _relay, _resume
from highlander._resume import PRIVATE, RESTARTED, RESUME, Setup, dump, parse

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25"},
}
RESULT = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {"listChanged": True}}}


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


# No NaN (NaN != NaN); infinities are written as json writes them.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(json_values)
def test_dump_writes_what_json_reads_back(value: object) -> None:
    assert json.loads(dump(value)) == value


@given(st.dictionaries(st.text(), json_values))
def test_parse_reads_what_json_writes(value: dict[str, object]) -> None:
    assert parse(json.dumps(value).encode() + b"\n") == value


@pytest.mark.parametrize("raw", [b"[1, 2]\n", b"{bad\n", b'{"a": 1} {"b": 2}\n', b"\xff\n", b"\n"])
def test_what_is_not_one_message_is_not_parsed(raw: bytes) -> None:
    assert parse(raw) is None  # passed on untouched, never judged


def initialized_setup() -> Setup:
    setup = Setup()
    setup.from_client(INIT)
    setup.from_server({"jsonrpc": "2.0", "id": 0, "result": RESULT})
    setup.from_client({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return setup


def test_only_requests_the_server_has_not_answered_are_abandoned() -> None:
    setup = initialized_setup()
    for ident in (1, "1", 2):
        setup.from_client({"jsonrpc": "2.0", "id": ident, "method": "tools/call"})
    setup.from_server({"jsonrpc": "2.0", "id": 2, "result": {}})
    setup.from_client({"jsonrpc": "2.0", "id": 7, "result": {}})  # our answer to the server
    errors = [json.loads(raw) for raw in setup.abandon()]
    assert [e["id"] for e in errors] == [1, "1"]  # 1 and "1" are two requests
    assert {(e["error"]["code"], e["error"]["message"]) for e in errors} == {RESTARTED}
    assert setup.abandon() == []


def test_the_replay_is_the_setup_under_private_ids_and_never_a_call() -> None:
    setup = initialized_setup()
    level = {"jsonrpc": "2.0", "id": 3, "method": "logging/setLevel", "params": {"level": "debug"}}
    setup.from_client(level)
    for uri in ("a://x", "a://y"):
        sub = {"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe", "params": {"uri": uri}}
        setup.from_client(sub)
    setup.from_client(
        {"jsonrpc": "2.0", "id": 5, "method": "resources/unsubscribe", "params": {"uri": "a://x"}}
    )
    setup.from_client({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "x"}})
    again = Setup(parse(setup.dumps().encode()))  # what a restarted server is given
    steps = again.replay()
    assert [s["method"] for s in steps] == [
        "initialize", "notifications/initialized", "logging/setLevel", "resources/subscribe",
    ]  # fmt: skip
    assert [s.get("id") for s in steps] == [f"{PRIVATE}0", None, f"{PRIVATE}2", f"{PRIVATE}3"]
    assert steps[0]["params"] == INIT["params"] and steps[3]["params"] == {"uri": "a://y"}
    assert again.pending == {}  # the calls in flight stay behind, answered by the error


def test_a_new_server_is_compared_with_the_one_the_client_initialized_with() -> None:
    setup = initialized_setup()
    same = {
        "jsonrpc": "2.0",
        "id": f"{PRIVATE}0",
        "result": {**RESULT, "serverInfo": {"name": "new"}},
    }
    told = setup.answered(same)
    assert told is not None and [json.loads(n)["method"] for n in told] == [
        "notifications/tools/list_changed"
    ]
    other = {**same, "result": {**RESULT, "protocolVersion": "2026-07-28"}}
    assert setup.answered(other) is None
    fewer = {**same, "result": {**RESULT, "capabilities": {}}}
    assert setup.answered(fewer) is None
    assert setup.answered({"jsonrpc": "2.0", "id": f"{PRIVATE}2", "result": {}}) == []


def test_restarts_are_bounded_within_a_window() -> None:
    setup = Setup()
    assert all(setup.may_restart(float(t)) for t in range(_resume.MAX_RESTARTS))
    assert not setup.may_restart(float(_resume.MAX_RESTARTS))
    assert setup.may_restart(_resume.WINDOW + _resume.MAX_RESTARTS + 1.0)  # the old ones aged out


class Running:
    """The relay program between the test's pipes and one end of a socketpair."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.holder, theirs = socket.socketpair()
        self.holder.settimeout(10)
        self.proc = subprocess.Popen(
            _relay.command(theirs.fileno(), b""),  # as become_relay starts it
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=[theirs.fileno()],
            env={**os.environ, **(env or {})},
        )  # fmt: skip
        theirs.close()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout

    def send(self, data: bytes) -> None:
        self.stdin.write(data)
        self.stdin.flush()

    def received(self, size: int) -> bytes:
        got = b""
        while len(got) < size:
            chunk = self.holder.recv(size - len(got))
            assert chunk, got
            got += chunk
        return got

    def finish(self) -> tuple[int, bytes]:
        self.stdin.close()
        out = self.stdout.read()
        return self.proc.wait(timeout=10), out

    def end(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        self.holder.close()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for relay in started:
        relay.end()


def test_a_line_split_across_writes_and_a_huge_one_arrive_whole(running: list[Running]) -> None:
    relay = Running()
    running.append(relay)
    request = line({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "y" * 10}})
    relay.send(request[:10])
    relay.holder.settimeout(0.3)
    with pytest.raises(TimeoutError):
        relay.holder.recv(1)  # half a line is never forwarded
    relay.holder.settimeout(10)
    relay.send(request[10:])
    assert relay.received(len(request)) == request
    huge = line({"jsonrpc": "2.0", "id": 2, "method": "big", "params": {"x": "z" * (1 << 20)}})
    relay.send(huge)
    assert relay.received(len(huge)) == huge
    answer = line({"jsonrpc": "2.0", "id": 2, "result": {"x": "w" * (1 << 20)}})
    relay.holder.sendall(answer)
    assert relay.stdout.read(len(answer)) == answer


def test_a_lost_holder_gets_the_call_in_flight_one_error_and_nothing_more(
    running: list[Running],
) -> None:
    relay = Running()  # no command to start again: the relay then leaves
    running.append(relay)
    relay.send(line(INIT))
    relay.received(len(line(INIT)))
    relay.holder.sendall(line({"jsonrpc": "2.0", "id": 0, "result": RESULT}))
    call = line({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "slow"}})
    relay.send(call)
    relay.received(len(call))
    relay.holder.close()  # the holder goes; our client stays until it heard back
    said = [relay.stdout.readline(), relay.stdout.readline()]
    status, out = relay.finish()
    assert status == 0
    lines = [json.loads(raw) for raw in [*said, *out.splitlines()]]
    assert lines[0]["id"] == 0  # the initialize answer, passed on
    assert lines[1:] == [
        {"jsonrpc": "2.0", "id": 9, "error": {"code": RESTARTED[0], "message": RESTARTED[1]}}
    ]


def test_the_relay_starts_its_server_again_in_its_own_process_with_the_setup(
    tmp_path: Path, running: list[Running]
) -> None:
    seen = tmp_path / "seen.json"
    program = (
        "import os, sys, json\n"
        "keep = [os.getpid(), os.environ['HIGHLANDER_RESUME'], os.getcwd()]\n"
        "json.dump(keep, open(sys.argv[1], 'w'))\n"
    )
    command = {"argv": [sys.executable, "-c", program, str(seen)], "cwd": str(tmp_path)}
    relay = Running({_relay.COMMAND: json.dumps(command)})
    running.append(relay)
    relay.send(line(INIT))
    relay.received(len(line(INIT)))
    relay.holder.sendall(line({"jsonrpc": "2.0", "id": 0, "result": RESULT}))
    relay.stdout.readline()
    relay.holder.close()
    relay.proc.wait(timeout=10)
    pid, resume, cwd = json.loads(seen.read_text())
    assert pid == relay.proc.pid and cwd == str(tmp_path)
    again = Setup(json.loads(resume))
    assert again.initialize == INIT and again.result == RESULT and len(again.restarts) == 1


def test_a_resumed_relay_replays_the_setup_and_keeps_the_answers(running: list[Running]) -> None:
    setup = initialized_setup()
    relay = Running({RESUME: setup.dumps()})
    running.append(relay)
    with relay.holder.makefile("rb") as reader:
        replayed = [json.loads(reader.readline()) for _ in range(2)]
    assert [r["method"] for r in replayed] == ["initialize", "notifications/initialized"]
    assert replayed[0]["id"] == f"{PRIVATE}0"
    relay.holder.sendall(line({"jsonrpc": "2.0", "id": f"{PRIVATE}0", "result": RESULT}))
    told = json.loads(relay.stdout.readline())
    assert told == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def test_a_resumed_relay_leaves_a_server_the_client_did_not_negotiate_with(
    running: list[Running],
) -> None:
    relay = Running({RESUME: initialized_setup().dumps()})
    running.append(relay)
    with relay.holder.makefile("rb") as reader:
        reader.readline()
    other = {**RESULT, "protocolVersion": "2026-07-28"}
    relay.holder.sendall(line({"jsonrpc": "2.0", "id": f"{PRIVATE}0", "result": other}))
    assert relay.proc.wait(timeout=10) == 0
    assert relay.stdout.read() == b""  # the client sees its server leave, nothing else


def test_a_line_that_never_ends_does_not_grow_the_relay_for_ever(running: list[Running]) -> None:
    """Past MAX_LINE without a newline the relay leaves (its client sees its server exit)."""
    relay = Running()
    running.append(relay)
    chunk = b"x" * (1 << 20)
    with contextlib.suppress(BrokenPipeError):
        for _ in range(_relay.MAX_LINE // len(chunk) + 2):
            relay.send(chunk)
    assert relay.proc.wait(timeout=30) == 0
    assert relay.holder.recv(1) == b""  # the end of the session, and nothing of the line
