"""A handoff only goes to the same app: SAVE names the newcomer's app, both sides check.

The pure part (messages, codec, the incumbent's decision) runs without
processes.  Two apps no longer meet on one socket by their names, so the
real-process tests put them there on purpose, as a hash collision or a
peer that names files its own way would: a raw client of the holder's
token sends SAVE as another app, and an in-process newcomer of another
app is pointed at the holder's socket.  Waits are bounded; nothing is timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from highlander import OtherAppError, Reason
from highlander._commands.inspect import look
from highlander._core.codec import decode_payload
from highlander._core.errors import RemoteProtocolError
from highlander._core.messages import Hello, Intent, Refused, Save
from highlander._core.state import State
from highlander._host.waiting import BLOCKING, run_blocking
from highlander._shell.admission import other_app
from highlander._shell.newcomer import acquire
from tests.support.attacktools import Attacker, key_for, paths_of, read_frame, signed_status
from tests.support.core import ConnectionPair
from tests.support.proctools import WAIT, Children

# -- pure ---------------------------------------------------------------------------


def test_a_save_without_its_app_is_a_protocol_error() -> None:
    payload = (
        b'{"echo":"000102030405060708090a0b0c0d0e0f","intent":"succeed",'
        b'"nonce":"101112131415161718191a1b1c1d1e1f","pid":4343,"seq":0,'
        b'"start_time":1299999,"type":"SAVE","v":1}'
    )
    with pytest.raises(RemoteProtocolError, match="missing field 'app'"):
        decode_payload(payload)


@pytest.mark.parametrize("intent", list(Intent))
def test_the_incumbent_refuses_another_apps_save_whatever_it_asks(
    tmp_path: Path, make_save: Callable[..., Save], intent: Intent
) -> None:
    settings = look(app="alpha", project=str(tmp_path), runtime_dir=str(tmp_path / "rt"), env={})
    assert other_app(settings, make_save(app="alpha", intent=intent)) is None
    for stranger in ("beta", "Alpha", "alpha ", "alpha/x"):
        refusal = other_app(settings, make_save(app=stranger, intent=intent))
        assert refusal is not None
        assert refusal.reason is Reason.OTHER_APP
        assert "'alpha'" in refusal.detail
        assert repr(stranger) in refusal.detail
        assert "--app" in refusal.detail


def test_other_app_refusal_ends_both_sides_of_the_conversation(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    pair.send(pair.incumbent.role, make_hello(pair.incumbent.local_nonce))
    save = make_save(pair.newcomer.local_nonce, pair.incumbent.local_nonce, app="beta")
    assert pair.send(pair.newcomer.role, save) == [save]
    refused = Refused(Reason.OTHER_APP, "this holder is app 'shop-mcp', not 'beta'")
    assert pair.send(pair.incumbent.role, refused) == [refused]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.DONE, State.DONE)


# -- real processes ---------------------------------------------------------------------


def _wait_for_events(kids: Children, kind: str, count: int) -> list[dict[str, object]]:
    """The holder logs after it answers: wait (bounded) for ``count`` events of ``kind``."""
    deadline = time.monotonic() + WAIT
    found = kids.events(kind)
    while len(found) < count and time.monotonic() < deadline:
        time.sleep(0.02)
        found = kids.events(kind)
    return found


def test_a_real_holder_hands_nothing_to_another_app(kids: Children) -> None:
    saves = kids.tmp / "saves.log"
    holder = kids.start(app="alpha", save_witness=str(saves))
    assert holder.wait_for("ready")["is_holder"]
    path = paths_of(kids, "alpha").socket
    for intent in Intent:  # neither a takeover nor a stop
        with Attacker(path, key_for(kids)) as client:
            client.read_hello()
            client.send(client.save_frame(intent, app="beta"))
            answer = client.receive(read_frame(client.sock))
        assert isinstance(answer, Refused), answer
        assert answer.reason is Reason.OTHER_APP
        assert "'alpha'" in answer.detail
        assert "--app" in answer.detail
    refusals = _wait_for_events(kids, "refused", 2)
    assert [event["reason"] for event in refusals] == ["other_app", "other_app"]
    assert not saves.exists()  # the save hook never ran
    assert not kids.events("save_requested")
    # Untouched: it still answers, and its own app still takes over with the handoff.
    reply = signed_status(path, key_for(kids))
    assert reply is not None
    assert reply.pid == holder.pid
    successor = kids.start(app="alpha")
    took = successor.wait_for("ready")
    assert took["outcome"] == "succeeded"
    assert took["handoff"]["from"] == holder.pid
    holder.wait_for("deposed")


def test_a_newcomer_that_reaches_another_app_says_how_to_fix_it(kids: Children) -> None:
    holder = kids.start(app="alpha")
    assert holder.wait_for("ready")["is_holder"]
    settings = kids.settings("beta")
    settings.paths = paths_of(kids, "alpha")  # two apps on one socket
    with pytest.raises(OtherAppError) as info:
        run_blocking(acquire(settings, BLOCKING, timeout=WAIT))
    message = str(info.value)
    assert "'alpha'" in message
    assert "'beta'" in message
    assert "pass a distinct --app" in message
    assert holder.proc.poll() is None
    assert not kids.events("save_requested")
    reply = signed_status(settings.paths.socket, key_for(kids))
    assert reply is not None
    assert reply.pid == holder.pid
