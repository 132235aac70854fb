"""Attacks on real holder processes, through real Unix sockets.

Every attack runs against a real holder (tests/programs/child.py, token
``proctools.TOKEN``).  The attacking clients live in this process: the
sans-IO core (:class:`highlander._core.connection.Connection`, newcomer role)
over a real ``AF_UNIX`` socket, so frames can be crafted, replayed, tampered
with and truncated byte by byte (tests/support/attacktools.py).  For each attack the
test checks that:

* the attack is rejected (the holder answers nothing after HELLO and closes);
* the holder is untouched: alive, same descriptors as before, and still the
  holder (a signed ``highlander status --json`` answers, or a right-token
  newcomer takes over with outcome ``succeeded``);
* the holder logged exactly one new event, naming the reason (the idle
  flood, closed before any deadline, is the exception: it must log nothing).

A client of another uid is covered by
tests/processes/test_guards.py::test_another_uid_is_dropped_before_hello (exactly one
``auth_failed`` naming the uid, holder deposable afterwards): not repeated here.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import pytest

from highlander._core.codec import DEFAULT_MAX_FRAME, encode_frame, split_body
from highlander._core.connection import Connection
from highlander._core.deadlines import Timeouts
from highlander._core.errors import SignatureError
from highlander._core.messages import Hello, StatusReply
from highlander._core.signing import derive_key
from highlander._core.state import Role
from highlander._host.rendezvous import project_key
from highlander._shell.serving_guard import MAX_CONNECTIONS
from tests.support.attacktools import (
    FAKE_INCUMBENT,
    HANG,
    REJECTIONS,
    Attacker,
    cli_status,
    fd_count,
    key_for,
    paths_of,
    peek_message,
    project_key_of,
    read_frame,
    rss_kib,
    signed_status,
    wait_fds_at_most,
    wait_new_events,
)
from tests.support.proctools import TOKEN, WAIT, Child, Children
from tests.support.proctools_extra import Extras, last_stderr_line

MIB = 1024  # KiB per MiB: VmRSS is in KiB
#: The holder's default request deadline (it runs with the default timeouts).
REQUEST_DEADLINE = Timeouts().request


@dataclass
class Holder:
    """A real holder and its resting state (after one signed STATUS warmed it up)."""

    child: Child
    path: str
    key: bytes
    fds: int
    rss: int

    @property
    def pid(self) -> int:
        return self.child.pid


@pytest.fixture
def holder(kids: Children) -> Holder:
    child = kids.start()
    assert child.wait_for("ready")["outcome"] == "claimed_free"
    path, key = paths_of(kids).socket, key_for(kids)
    # One complete signed STATUS first: the serving loop and the lazily loaded
    # crypto are then part of the baselines, and the holder has closed its end.
    with Attacker(path, key) as warm:
        warm.read_hello()
        warm.send(warm.status_frame())
        assert isinstance(warm.receive(read_frame(warm.sock)), StatusReply)
        assert warm.rest() == b""
    return Holder(child, path, key, fd_count(child.pid), rss_kib(child.pid))


# -- checks shared by the attacks ------------------------------------------------------


def rejected_once(
    kids: Children, before: list[dict[str, Any]], holder: Holder, kinds: set[str]
) -> dict[str, Any]:
    """The one event the holder logged for the attack (of one of ``kinds``)."""
    fresh = wait_new_events(kids, before, 1)
    assert len(fresh) == 1, f"expected exactly one new event, got {fresh}"
    (event,) = fresh
    assert event["event"] in kinds, event
    assert event["pid"] == holder.pid, event
    assert event["peer_pid"] == os.getpid(), event  # the kernel's word on who attacked
    return event


def assert_same_descriptors(holder: Holder) -> None:
    """The attack's connections left nothing open in the holder (bounded wait)."""
    left = wait_fds_at_most(holder.pid, holder.fds)
    assert left == holder.fds, f"holder has {left} descriptors, {holder.fds} before the attack"


def assert_still_serving(
    kids: Children, holder: Holder, before: list[dict[str, Any]], rejection: dict[str, Any]
) -> None:
    """Alive, same descriptors, answers a signed STATUS; logged only the rejection.

    (A STATUS query itself is not logged: read-only commands leave no trace, #13.)
    """
    assert holder.child.proc.poll() is None, "the holder died"
    assert_same_descriptors(holder)
    status = cli_status(kids)
    assert status["held"] is True and status["answers"] is True, status
    assert status["problem"] is None, status
    assert status["pid"] == holder.pid and status["generation"] == 1, status
    fresh = wait_new_events(kids, before, 1)
    assert fresh == [rejection], fresh


def assert_deposable(
    kids: Children, holder: Holder, before: list[dict[str, Any]], rejection: dict[str, Any]
) -> None:
    """Alive, same descriptors, and a right-token newcomer takes over as usual."""
    assert holder.child.proc.poll() is None, "the holder died"
    assert_same_descriptors(holder)
    newcomer = kids.start()
    took = newcomer.wait_for("ready")
    assert took["outcome"] == "succeeded" and took["generation"] == 2, took
    assert took["handoff"]["from"] == holder.pid
    holder.child.wait_for("deposed")
    status, out, err = holder.child.finish()
    assert status == 0, err.decode()
    assert out == b""
    rejections = [e for e in wait_new_events(kids, before, 2) if e["event"] in REJECTIONS]
    assert rejections == [rejection]


# -- 1, 2. a SAVE signed without the right key -----------------------------------------

WRONG_KEYS = {
    # No token at all: nothing to derive a key from; a random one stands in.
    "no-token": lambda kids: secrets.token_bytes(32),
    "wrong-token": lambda kids: key_for(kids, "another-token-0123456789"),
    # The right token, but the key of another project (keys are per project).
    "other-project": lambda kids: derive_key(TOKEN.encode(), project_key("/elsewhere")),
}


@pytest.mark.parametrize("which", sorted(WRONG_KEYS))
def test_save_without_the_right_key_is_refused(kids: Children, holder: Holder, which: str) -> None:
    key = WRONG_KEYS[which](kids)
    before = kids.events()
    with Attacker(holder.path, key) as attacker:
        attacker.read_hello(forge=True)  # ignores HELLO's MAC to learn the nonce
        attacker.send(attacker.save_frame())
        assert attacker.rest() == b"", "the holder answered an unauthentic SAVE"
    # Without the key, the holder cannot even be authenticated: HELLO fails to verify.
    honest = Connection(Role.NEWCOMER, key=key, nonce=secrets.token_bytes(16), now=0.0)
    honest.receive_data(attacker.hello_frame)
    with pytest.raises(SignatureError, match="bad MAC on HELLO"):
        honest.next_event(0.0)

    event = rejected_once(kids, before, holder, {"auth_failed"})
    assert "bad MAC on SAVE" in event["reason"], event
    assert_still_serving(kids, holder, before, event)


# -- 3. a STATUS replayed from an earlier exchange -------------------------------------


@pytest.mark.parametrize("edit", ["verbatim", "echo-rewritten"])
def test_replayed_request_is_refused(kids: Children, holder: Holder, edit: str) -> None:
    # Connection 1: a right-token client's real STATUS exchange, captured byte for byte.
    with Attacker(holder.path, holder.key) as client:
        client.read_hello()
        captured = client.status_frame()
        client.send(captured)
        assert isinstance(client.receive(read_frame(client.sock)), StatusReply)
        assert client.rest() == b""
    first_nonce = client.conn.peer_nonce
    assert first_nonce is not None

    # Connection 2: an eavesdropper without the token replays it after the new HELLO.
    before = kids.events()
    with Attacker(holder.path, secrets.token_bytes(32)) as replayer:
        hello_frame = read_frame(replayer.sock)
        _, hello = peek_message(hello_frame)
        assert isinstance(hello, Hello) and hello.nonce != first_nonce.hex()
        replay = captured
        if edit == "echo-rewritten":  # point the echo at this session; the MAC stays
            replay = captured.replace(first_nonce.hex().encode(), hello.nonce.encode())
            assert replay != captured and len(replay) == len(captured)
        replayer.send(replay)
        assert replayer.rest() == b"", "the holder answered a replayed STATUS"

    event = rejected_once(kids, before, holder, {"auth_failed"})
    if edit == "verbatim":
        assert "echoes the nonce of another session" in event["reason"], event
    else:
        assert "bad MAC on STATUS" in event["reason"], event
    assert_still_serving(kids, holder, before, event)


# -- 4. a right-token SAVE altered in transit ------------------------------------------


@pytest.mark.parametrize("part", ["mac", "payload"])
def test_tampered_save_is_refused(kids: Children, holder: Holder, part: str) -> None:
    before = kids.events()
    with Attacker(holder.path, holder.key) as client:
        client.read_hello()
        frame = client.save_frame()
        if part == "mac":
            tampered = frame[:-1] + bytes([frame[-1] ^ 0x01])
        else:  # turn "hand over to me" into "stop", keeping the MAC
            payload, mac = split_body(frame[4:])
            altered = payload.replace(b'"intent":"succeed"', b'"intent":"stop"')
            assert altered != payload
            tampered = encode_frame(altered + mac)
        client.send(tampered)
        assert client.rest() == b"", "the holder answered a tampered SAVE"

    event = rejected_once(kids, before, holder, {"auth_failed"})
    assert "bad MAC on SAVE" in event["reason"], event
    assert_deposable(kids, holder, before, event)


# -- 5. the holder's own HELLO sent back to it -----------------------------------------


@pytest.mark.parametrize("where", ["same-connection", "other-connection"])
def test_reflected_hello_is_refused(kids: Children, holder: Holder, where: str) -> None:
    before = kids.events()
    reflected = b""
    if where == "other-connection":
        with Attacker(holder.path, holder.key) as other:  # closed at once: nothing logged
            reflected = read_frame(other.sock)
    with Attacker(holder.path, holder.key) as attacker:
        own = read_frame(attacker.sock)
        attacker.send(reflected or own)
        assert attacker.rest() == b"", "the holder answered its own HELLO"

    event = rejected_once(kids, before, holder, {"auth_failed", "protocol_error"})
    if where == "same-connection":
        assert "reflected" in event["reason"], event
    assert_still_serving(kids, holder, before, event)


# -- 6. a length header announcing 10 MB --------------------------------------------------


def test_oversize_length_header_is_refused_before_buffering(kids: Children, holder: Holder) -> None:
    announced = 10 * 1024 * 1024
    assert announced > DEFAULT_MAX_FRAME
    rss_before = rss_kib(holder.pid)
    before = kids.events()
    with Attacker(holder.path, holder.key) as attacker:
        attacker.read_hello()
        attacker.send(struct.pack(">I", announced))
        sent = time.monotonic()
        assert attacker.rest() == b"", "the holder answered an oversize header"
        closed_after = time.monotonic() - sent
    # Dropped on the header itself, not at the request deadline.
    assert closed_after < REQUEST_DEADLINE / 2, f"closed after {closed_after:.2f} s"
    grown = rss_kib(holder.pid) - rss_before
    assert grown < 4 * MIB, f"holder RSS grew by {grown} KiB for a header announcing 10 MB"

    event = rejected_once(kids, before, holder, {"protocol_error"})
    assert f"frame length {announced} exceeds the cap" in event["reason"], event
    assert_still_serving(kids, holder, before, event)


# -- 7. slowloris: half a frame, then silence ---------------------------------------------


def test_slow_peer_is_dropped_at_the_request_deadline(kids: Children, holder: Holder) -> None:
    before = kids.events()
    with Attacker(holder.path, holder.key) as slow:
        connected = time.monotonic()
        slow.read_hello()
        frame = slow.status_frame()
        slow.send(frame[: 4 + (len(frame) - 4) // 2])

        # Meanwhile the holder serves everyone else.
        status = cli_status(kids)
        assert status["answers"] is True and status["pid"] == holder.pid, status
        assert holder.child.proc.poll() is None

        rest = slow.rest(timeout=REQUEST_DEADLINE + WAIT)
        dropped_after = time.monotonic() - connected
    assert rest == b"", "the holder answered half a frame"
    assert REQUEST_DEADLINE - 0.5 <= dropped_after < REQUEST_DEADLINE + 3, dropped_after

    fresh = wait_new_events(kids, before, 1)
    assert [e["event"] for e in fresh] == ["timeout"], fresh
    timeout = fresh[0]
    assert timeout["phase"] == "request" and timeout["pid"] == holder.pid, timeout
    assert timeout["peer_pid"] == os.getpid(), timeout
    assert holder.child.proc.poll() is None
    assert_same_descriptors(holder)
    assert signed_status(holder.path, holder.key) is not None


# -- 8. 200 idle connections at once ---------------------------------------------------------

FLOOD = 200


def _open_idle(path: str) -> socket.socket:
    """Connect and send nothing; a full backlog (EAGAIN) is retried for a bounded time."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HANG)
    deadline = time.monotonic() + HANG
    while True:
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            if time.monotonic() > deadline:
                sock.close()
                raise
            time.sleep(0.005)


def _greeted_then_open(socks: list[socket.socket]) -> tuple[int, int]:
    """Every socket gets its HELLO; count those the holder has since closed (evicted)."""
    pending, greeted = list(socks), 0
    deadline = time.monotonic() + HANG
    while pending and time.monotonic() < deadline:
        readable, _, _ = select.select(pending, [], [], 0.1)
        for sock in readable:
            pending.remove(sock)
            if sock.recv(1, socket.MSG_PEEK):
                greeted += 1
    assert not pending, f"{len(pending)} connections were never greeted"
    evicted = 0
    for sock in socks:
        # Drain the HELLO; a closed connection then reads as end of stream.
        sock.setblocking(False)
        try:
            while sock.recv(65536):
                pass
            evicted += 1
        except BlockingIOError:
            pass
    return greeted, evicted


def test_flood_of_idle_connections_is_bounded(kids: Children, holder: Holder) -> None:
    before = kids.events()
    socks: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            socks.append(_open_idle(holder.path))
        greeted, evicted = _greeted_then_open(socks)
        fds_held = fd_count(holder.pid)
        grown = rss_kib(holder.pid) - holder.rss
        # A right-token STATUS while they are held (bounded retries; a hang guard).
        answered_while_held = None
        retry_until = time.monotonic() + 2.0
        while answered_while_held is None and time.monotonic() < retry_until:
            answered_while_held = signed_status(holder.path, holder.key)
    finally:
        for sock in socks:
            sock.close()

    # Every connection was greeted; idle ones were evicted, oldest first, so
    # never more than MAX_CONNECTIONS stay open in the holder.
    assert greeted == FLOOD
    assert evicted >= FLOOD - MAX_CONNECTIONS, evicted
    assert fds_held - holder.fds <= MAX_CONNECTIONS + 4, (fds_held, holder.fds)
    assert grown < 20 * MIB, f"holder RSS grew by {grown} KiB"
    assert answered_while_held is not None, "the holder did not answer during the flood"

    assert holder.child.proc.poll() is None
    assert_same_descriptors(holder)
    status = cli_status(kids)
    assert status["answers"] is True and status["pid"] == holder.pid, status
    fresh = wait_new_events(kids, before, 1)
    kinds = [e["event"] for e in fresh]
    assert "overload" in kinds and set(kinds) <= {"overload"}, fresh


# -- 10. a fake incumbent: no Highlander, no token ------------------------------------------

FAKE_CASES = [
    ("nolock", "garbage"),
    ("nolock", "wrong-key"),
    ("nolock", "forged"),
    ("lock", "garbage"),
    ("lock", "wrong-key"),
    ("lock", "forged"),
    ("lock", "silent"),
    ("lock", "replay"),
]


def _capture_real_hello(kids: Children) -> tuple[str, int]:
    """Start a real holder, record a genuine HELLO of it, then kill it (it is our child)."""
    real = kids.start()
    real.wait_for("ready")
    with Attacker(paths_of(kids).socket, key_for(kids)) as eavesdropper:
        frame = read_frame(eavesdropper.sock)
    os.kill(real.pid, signal.SIGKILL)
    real.proc.wait(timeout=WAIT)
    return frame.hex(), real.pid


@pytest.mark.parametrize(("lock", "behaviour"), FAKE_CASES, ids=[f"{a}-{b}" for a, b in FAKE_CASES])
def test_fake_incumbent_learns_nothing_and_signals_nobody(
    kids: Children, extras: Extras, lock: str, behaviour: str
) -> None:
    kids.runtime.mkdir(mode=0o700, exist_ok=True)
    kids.runtime.chmod(0o700)
    paths = paths_of(kids)
    replay, real_pid = ("", 0)
    if behaviour == "replay":
        replay, real_pid = _capture_real_hello(kids)
    fake = extras.helper(
        FAKE_INCUMBENT,
        paths.socket,
        paths.lock,
        behaviour,
        lock,
        project_key_of(kids).hex(),
        replay,
    )
    fake.wait_for("ready")
    inode = os.lstat(paths.socket).st_ino
    before = kids.events()

    # A short HELLO deadline only matters for the silent fake (it saves 1.5 s).
    newcomer = kids.start(timeouts={"hello": 0.5})
    status, out, err = newcomer.finish()
    assert status == 1, f"the newcomer did not fail clearly: {err.decode()}"
    assert out == b""
    assert newcomer.heard == [], "the newcomer went on as if it held the project"
    last = last_stderr_line(err)
    assert last.startswith("highlander: "), err.decode()

    fresh = wait_new_events(kids, before, 1)
    assert len(fresh) == 1, fresh
    (event,) = fresh
    assert event["pid"] == newcomer.pid, event
    if lock == "nolock":  # the lock was free: a listener without it is no holder
        expected_event, says = "foreign_listener", "not a Highlander holder"
    elif behaviour == "garbage":
        expected_event, says = "protocol_error", "exceeds the cap"
    elif behaviour == "silent":
        expected_event, says = "timeout", "without answering"
    elif behaviour == "replay":
        expected_event, says = "identity_mismatch", f"HELLO claims pid {real_pid}"
    else:
        expected_event, says = "auth_failed", "does not share this token"
    assert event["event"] == expected_event, event
    assert says in last, last
    if behaviour != "garbage" or lock == "nolock":
        # (The garbage error names neither the peer nor the socket: the codec's
        # message is passed on bare by highlander/_shell/client.py, greet.)
        assert f"pid {fake.pid}" in last, last

    # What the fake got: nothing at all on any connection (nothing is sent before
    # HELLO is verified, and nothing after a HELLO that fails).
    tries = 3 if behaviour == "replay" else 1  # a mismatch is retried (a handover in flight)
    connections = [fake.wait_for("connection", timeout=HANG) for _ in range(tries)]
    assert [c["received"] for c in connections] == [""] * tries, connections

    assert fake.proc.poll() is None, "the fake incumbent was killed"
    assert not [r for r in fake.heard if r.get("event") == "signalled"], fake.heard
    assert [e for e in kids.events() if e["event"] in ("terminated", "killed")] == []
    assert os.lstat(paths.socket).st_ino == inode, "the fake's socket path was replaced"
