"""Attacker clients for tests/processes/test_attacks.py: real Unix sockets driven by the core.

An :class:`Attacker` is a newcomer-role :class:`~highlander._core.connection.Connection`
over a real ``socket.socket(AF_UNIX)``: it can verify and answer like a real
client, or craft, replay, tamper with and truncate frames byte by byte.  Every
byte it writes is kept in :attr:`Attacker.sent`.  Socket timeouts are hang
guards only.

The rest inspects the holder from the outside: the event log, its descriptors
and memory in /proc, and a signed STATUS through ``highlander status --json``.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from typing import Any

from highlander._core.codec import decode_payload, encode_frame, split_body
from highlander._core.connection import Closed, Connection
from highlander._core.errors import ProtocolError
from highlander._core.messages import Hello, Intent, Message, Save, Status, StatusReply
from highlander._core.signing import NO_NONCE, Direction, derive_key, sign
from highlander._core.state import Role
from highlander._host.identity import own_identity
from highlander._host.rendezvous import names_key, project_key, project_paths
from tests.support.proctools import TOKEN, WAIT, Children

#: The child's default app name (tests/programs/child.py).
APP = "child"
#: Hang guard for one socket operation (never a performance assertion).
HANG = 5.0
#: Kinds of the events a holder logs when it rejects a connection.
REJECTIONS = frozenset({"auth_failed", "protocol_error", "timeout"})


# -- keys and paths -------------------------------------------------------------------


def project_key_of(kids: Children) -> bytes:
    """The project key of the test's project (its realpath, as Highlander resolves it)."""
    return project_key(os.path.realpath(kids.project))


def key_for(kids: Children, token: str | bytes = TOKEN) -> bytes:
    """The HMAC key a client with ``token`` derives for the test's project."""
    raw = token.encode() if isinstance(token, str) else token
    return derive_key(raw.strip(), project_key_of(kids))


def paths_of(kids: Children, app: str = APP) -> Any:
    """The project's files (socket, lock, state, events) in the test's runtime dir."""
    kids.runtime.mkdir(mode=0o700, exist_ok=True)
    secret = names_key(str(kids.runtime))
    return project_paths(str(kids.runtime), app, os.path.realpath(kids.project), secret=secret)


# -- raw frames -------------------------------------------------------------------------


def read_exact(sock: socket.socket, count: int) -> bytes:
    """Read ``count`` bytes; fewer only if the peer closed the stream first."""
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def read_frame(sock: socket.socket) -> bytes:
    """Read one whole frame (header and body) as raw bytes; ``EOFError`` at end of stream."""
    header = read_exact(sock, 4)
    if len(header) < 4:
        raise EOFError(f"stream ended after {len(header)} header bytes")
    body = read_exact(sock, int.from_bytes(header, "big"))
    if len(body) < int.from_bytes(header, "big"):
        raise EOFError("stream ended inside a frame")
    return header + body


def read_to_eof(sock: socket.socket, timeout: float = HANG) -> bytes:
    """Everything the peer sends until it closes; ``TimeoutError`` if it does not close."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def peek_message(frame: bytes) -> tuple[int, Message]:
    """Parse a frame's payload without checking its MAC (what any eavesdropper can read)."""
    payload, _ = split_body(frame[4:])
    return decode_payload(payload)


def resign(
    frame: bytes, key: bytes, direction: Direction, inc: bytes, new: bytes, seq: int
) -> bytes:
    """The same payload as ``frame``, signed with ``key`` (what a forger would send)."""
    payload, _ = split_body(frame[4:])
    return encode_frame(payload + sign(key, direction, inc, new, seq, payload))


# -- an attacking newcomer --------------------------------------------------------------


class Attacker:
    """A newcomer-role client of the holder at ``path``, signing with ``key``."""

    def __init__(self, path: str, key: bytes) -> None:
        self.key = key
        self.sent = bytearray()
        self.hello_frame = b""
        self.hello: Hello | None = None
        self.conn = Connection(
            Role.NEWCOMER, key=key, nonce=secrets.token_bytes(16), now=time.monotonic()
        )
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(HANG)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise

    def __enter__(self) -> Attacker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def read_hello(self, *, forge: bool = False) -> Hello:
        """Read the holder's HELLO and feed it to the core.

        With ``forge`` (a client without the right key), the HELLO's MAC is
        ignored: the frame is re-signed with our own key so that our core
        accepts it and learns the holder's nonce, as an attacker would.
        """
        frame = read_frame(self.sock)
        self.hello_frame = frame
        if forge:
            _, claimed = peek_message(frame)
            assert isinstance(claimed, Hello)
            inc = bytes.fromhex(claimed.nonce)
            frame = resign(frame, self.key, Direction.INCUMBENT_TO_NEWCOMER, inc, NO_NONCE, 0)
        hello = self.receive(frame)
        assert isinstance(hello, Hello), hello
        self.hello = hello
        return hello

    def receive(self, data: bytes) -> Message | Closed:
        self.conn.receive_data(data)
        event = self.conn.next_event(time.monotonic())
        assert isinstance(event, Message | Closed), event
        return event

    def save_frame(self, intent: Intent = Intent.SUCCEED, app: str = APP) -> bytes:
        """The signed SAVE this client would send now, as ``app`` (advances its core)."""
        me = own_identity()
        assert self.conn.peer_nonce is not None
        nonces = self.conn.local_nonce.hex(), self.conn.peer_nonce.hex()
        save = Save(me.pid, me.start_time, *nonces, intent, app)
        return self.conn.send(save, time.monotonic())

    def status_frame(self) -> bytes:
        """The signed STATUS this client would send now (advances its core)."""
        assert self.conn.peer_nonce is not None
        query = Status(nonce=self.conn.local_nonce.hex(), echo=self.conn.peer_nonce.hex())
        return self.conn.send(query, time.monotonic())

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)
        self.sent += data

    def rest(self, timeout: float = HANG) -> bytes:
        """What the holder sends until it closes the connection (must close within ``timeout``)."""
        return read_to_eof(self.sock, timeout)


def signed_status(path: str, key: bytes) -> StatusReply | None:
    """One right-token STATUS exchange in this process; ``None`` if it was not answered."""
    try:
        with Attacker(path, key) as client:
            client.read_hello()
            client.send(client.status_frame())
            reply = client.receive(read_frame(client.sock))
    except (OSError, EOFError, ProtocolError):
        return None
    return reply if isinstance(reply, StatusReply) else None


# -- the holder from the outside ---------------------------------------------------------


def cli_status(kids: Children) -> dict[str, Any]:
    """``highlander status --json`` with the right token: a signed STATUS to the holder."""
    done = subprocess.run(
        [sys.executable, "-m", "highlander.cli", "status", "--json", "--app", APP],
        env=kids.env(),
        capture_output=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr.decode()
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def fd_count(pid: int) -> int:
    """How many descriptors process ``pid`` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    """Process ``pid``'s resident set size (VmRSS) in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def wait_fds_at_most(pid: int, limit: int, timeout: float = HANG) -> int:
    """Wait (bounded) until ``pid`` has at most ``limit`` descriptors; return the last count."""
    deadline = time.monotonic() + timeout
    count = fd_count(pid)
    while count > limit and time.monotonic() < deadline:
        time.sleep(0.02)
        count = fd_count(pid)
    return count


def new_events(kids: Children, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events logged since the snapshot ``before`` (which must still be the log's start)."""
    now = kids.events()
    assert now[: len(before)] == before, "the event log was rewritten"
    return now[len(before) :]


def wait_new_events(
    kids: Children, before: list[dict[str, Any]], count: int, timeout: float = HANG
) -> list[dict[str, Any]]:
    """Wait (bounded) until at least ``count`` events were logged since ``before``."""
    deadline = time.monotonic() + timeout
    fresh = new_events(kids, before)
    while len(fresh) < count and time.monotonic() < deadline:
        time.sleep(0.02)
        fresh = new_events(kids, before)
    return fresh


# -- a fake incumbent ---------------------------------------------------------------------

#: A process that is not Highlander and has no token, posing as the project's holder.
#: argv: socket path, lock path, behaviour, "lock" or "nolock", project key (hex),
#: a captured HELLO frame (hex, for "replay").  Behaviours, per connection:
#: ``garbage`` (bytes that are no frame), ``wrong-key`` (a well-formed HELLO in its own
#: name, signed with a key derived from another token), ``forged`` (the same HELLO with
#: a MAC of random bytes), ``replay`` (a real holder's HELLO, captured earlier),
#: ``silent`` (says nothing).  It reports every byte each connection sent it, and any
#: catchable signal it receives.  Runs under Extras.helper (``report`` is predefined).
FAKE_INCUMBENT = """
import fcntl, hashlib, hmac, json, os, signal, socket, sys, time

path, lock_path, behaviour, lock_mode, project_hex, replay_hex = sys.argv[1:7]

def caught(signum, frame):
    report(event="signalled", signal=signum)

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
            signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGCONT):
    signal.signal(sig, caught)

if lock_mode == "lock":
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
if os.path.lexists(path):
    os.unlink(path)  # a dead holder's stale socket file
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(16)

def hkdf(token, salt):
    prk = hmac.digest(salt, token, "sha256")
    return hmac.digest(prk, b"highlander/v1\\x01", "sha256")

def hello_frame(mac_key):
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    start_time = int(stat[stat.rindex(b")") + 2:].split()[19])
    nonce = os.urandom(16)
    fields = {
        "app": "child", "build": "", "exe": os.readlink("/proc/self/exe"),
        "fingerprint": "", "generation": 1, "nonce": nonce.hex(), "pid": os.getpid(),
        "seq": 0, "shares": False, "since_ms": int(time.time() * 1000),
        "start_time": start_time, "type": "HELLO", "v": 1,
    }
    payload = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    if mac_key is None:
        mac = os.urandom(32)
    else:
        data = bytes((1, 2)) + nonce + bytes(16) + (0).to_bytes(8, "big") + payload
        mac = hmac.digest(mac_key, data, "sha256")
    body = payload + mac
    return len(body).to_bytes(4, "big") + body

def greeting():
    if behaviour == "garbage":
        return b"GET / HTTP/1.1\\r\\nHost: highlander\\r\\n\\r\\n" + bytes(range(256))
    if behaviour == "wrong-key":
        return hello_frame(hkdf(b"not-the-token", bytes.fromhex(project_hex)))
    if behaviour == "forged":
        return hello_frame(None)
    if behaviour == "replay":
        return bytes.fromhex(replay_hex)
    return b""

report(event="ready")
while True:
    conn, _ = server.accept()
    conn.settimeout(20)
    got, sent_ok = b"", True
    try:
        conn.sendall(greeting())
    except OSError:
        sent_ok = False
    try:
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass  # the newcomer reset the connection: what it sent is in got
    conn.close()
    report(event="connection", received=got.hex(), sent_ok=sent_ok)
"""
