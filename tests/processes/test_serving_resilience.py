"""A holder's serving loop survives what one connection or a scarce resource does to it.

Issue #10, item 6 (second bullet), on real holder processes
(tests/programs/child.py): descriptors exhausted under a low
``RLIMIT_NOFILE``, an unexpected error in one conversation, a listener that
cannot accept any more, and a secret file made unsafe before the first
conversation.  In every case the holder either keeps serving (and a
right-token newcomer takes over with the handoff, as usual) or steps down by
itself (``serving_failed``, then ``relinquished`` with outcome
``stepped_down``), so the next newcomer claims a free project.  It is never
left deaf, and so never signalled: no ``terminated`` or ``killed`` event, ever.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import pytest

from highlander._core.messages import StatusReply
from tests.support.attacktools import (
    HANG,
    Attacker,
    fd_count,
    key_for,
    paths_of,
    read_frame,
    read_to_eof,
)
from tests.support.proctools import Child, Children


def _soft_nofile(pid: int) -> int:
    """Process ``pid``'s soft RLIMIT_NOFILE, as the kernel reports it."""
    with open(f"/proc/{pid}/limits", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError(f"no descriptor limit for pid {pid}")


def _warm_up(kids: Children) -> None:
    """One signed STATUS: the key is derived and the crypto loaded before descriptors run out."""
    with Attacker(paths_of(kids).socket, key_for(kids)) as warm:
        warm.read_hello()
        warm.send(warm.status_frame())
        assert isinstance(warm.receive(read_frame(warm.sock)), StatusReply)
        assert warm.rest() == b""


def _wait_event(kids: Children, kind: str, **match: Any) -> dict[str, Any]:
    """Wait (bounded: a hang guard) for an event of ``kind`` whose fields contain ``match``."""
    deadline = time.monotonic() + HANG
    while True:
        for event in kids.events(kind):
            if all(str(want) in str(event.get(name)) for name, want in match.items()):
                return event
        if time.monotonic() > deadline:
            raise AssertionError(f"no {kind} event with {match}: {kids.events()}")
        time.sleep(0.02)


def _assert_nobody_signalled(kids: Children) -> None:
    signalled = [e for e in kids.events() if e["event"] in ("terminated", "killed", "hung")]
    assert signalled == [], signalled


def _take_over(kids: Children, holder: Child) -> None:
    """A right-token newcomer takes over with the handoff; the holder leaves with status 0."""
    newcomer = kids.start()
    took = newcomer.wait_for("ready")
    assert took["outcome"] == "succeeded" and took["generation"] == 2, took
    assert took["handoff"]["from"] == holder.pid, took
    holder.wait_for("deposed")
    status, out, err = holder.finish()
    assert status == 0, err.decode()
    assert out == b""
    _assert_nobody_signalled(kids)


def _steps_down_then_free(kids: Children, holder: Child, env: dict[str, str] | None = None) -> None:
    """The holder stepped down by itself; the next newcomer claims a free project."""
    holder.wait_for("deposed", timeout=HANG)
    status, out, err = holder.finish()
    assert status == 0, err.decode()
    assert out == b""
    relinquished = kids.events("relinquished")
    assert [e["outcome"] for e in relinquished] == ["stepped_down"], relinquished
    assert not os.path.lexists(paths_of(kids).socket), "the socket file was left behind"
    newcomer = kids.start(env=env) if env is not None else kids.start()
    took = newcomer.wait_for("ready")
    assert took["outcome"] == "claimed_free" and took["is_holder"] is True, took
    _assert_nobody_signalled(kids)


# -- descriptors exhausted ------------------------------------------------------------------

#: The holder's soft RLIMIT_NOFILE: about ten descriptors at rest, so a dozen
#: idle connections exhaust it.
NOFILE = 24


def test_descriptor_exhaustion_backs_off_and_keeps_serving(kids: Children) -> None:
    holder = kids.start(nofile=NOFILE)
    assert holder.wait_for("ready")["outcome"] == "claimed_free"
    _warm_up(kids)
    limit = _soft_nofile(holder.pid)
    assert limit == NOFILE
    path = paths_of(kids).socket
    socks: list[socket.socket] = []
    try:
        # More idle connections than the holder may have descriptors: those it
        # cannot accept stay queued, and accept() fails with EMFILE.
        for _ in range(limit):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(HANG)
            sock.connect(path)
            socks.append(sock)
        overload = _wait_event(kids, "overload", reason="descriptors")
        assert overload["pid"] == holder.pid, overload
        assert fd_count(holder.pid) <= limit
        assert holder.proc.poll() is None, "the holder died"
    finally:
        for sock in socks:
            sock.close()
    assert kids.events("serving_failed") == []
    _take_over(kids, holder)


# -- an unexpected error in one conversation -------------------------------------------------


def test_unexpected_error_in_one_conversation_is_contained(kids: Children) -> None:
    holder = kids.start(fault="conversation-once")
    assert holder.wait_for("ready")["outcome"] == "claimed_free"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as victim:
        victim.settimeout(HANG)
        victim.connect(paths_of(kids).socket)
        assert read_to_eof(victim) == b"", "the failed conversation said something"
    failed = _wait_event(kids, "connection_failed", reason="injected fault")
    assert failed["pid"] == holder.pid and failed["peer_pid"] == os.getpid(), failed
    assert kids.events("serving_failed") == []
    _take_over(kids, holder)


# -- the serving loop cannot go on ------------------------------------------------------------


def test_a_listener_that_cannot_accept_makes_the_holder_step_down(kids: Children) -> None:
    holder = kids.start(fault="accept")
    assert holder.wait_for("ready")["outcome"] == "claimed_free"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as knock:
        knock.settimeout(HANG)
        knock.connect(paths_of(kids).socket)  # wakes the accept loop, which fails
        failed = _wait_event(kids, "serving_failed", reason="listener is broken")
    assert failed["pid"] == holder.pid, failed
    _steps_down_then_free(kids, holder)


@pytest.mark.parametrize("how", ["world-readable", "symlink"])
def test_unsafe_secret_at_the_first_conversation_makes_the_holder_step_down(
    kids: Children, how: str
) -> None:
    env = kids.env()
    del env["HIGHLANDER_TOKEN"]  # keyed by the per-user secret file
    holder = kids.start(env=env)
    assert holder.wait_for("ready")["outcome"] == "claimed_free"
    secret = kids.runtime / "secret"
    assert not secret.exists(), "the key is derived at the first conversation, not before"
    if how == "world-readable":
        secret.write_text(os.urandom(32).hex() + "\n")
        secret.chmod(0o644)
    else:
        elsewhere = kids.tmp / "elsewhere-secret"
        elsewhere.write_text(os.urandom(32).hex() + "\n")
        elsewhere.chmod(0o600)
        secret.symlink_to(elsewhere)

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as first:
        first.settimeout(HANG)
        first.connect(paths_of(kids).socket)
        assert read_to_eof(first) == b"", "the holder spoke without a usable key"
    failed = _wait_event(kids, "serving_failed", reason="secret file")
    assert failed["pid"] == holder.pid, failed

    secret.unlink()  # the owner repairs it; the next newcomer creates a private one
    _steps_down_then_free(kids, holder, env)
