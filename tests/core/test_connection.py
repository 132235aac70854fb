"""Whole conversations through two Connections, attacks on them, and their deadlines."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from highlander._core.codec import HEADER, NEED_DATA, encode_frame, encode_payload
from highlander._core.connection import Closed, Connection
from highlander._core.deadlines import Deadline, Phase, Timeouts
from highlander._core.errors import (
    LocalProtocolError,
    Reason,
    RemoteProtocolError,
    SignatureError,
)
from highlander._core.messages import (
    AckSuccession,
    Busy,
    Hello,
    Message,
    ProgressReport,
    Refused,
    Save,
    Saved,
    Status,
    StatusReply,
)
from highlander._core.pair import ConnectionPair
from highlander._core.signing import NO_NONCE, Direction, derive_key, sign
from highlander._core.state import Role, State

if TYPE_CHECKING:
    from tests.support.core import FakeClock, Transcript

NEW, INC = Role.NEWCOMER, Role.INCUMBENT
HANDOFF: dict[str, Any] = {"sessions": ["a", "b"], "cursor": 42, "ratio": 0.5}


def _events(conn: Connection, now: float) -> list[Message | Closed]:
    """Drain ``conn`` until it needs data (or reports Closed)."""
    out: list[Message | Closed] = []
    while True:
        event = conn.next_event(now)
        if event is NEED_DATA:
            return out
        assert isinstance(event, Message | Closed)
        out.append(event)
        if isinstance(event, Closed):
            return out


def _feed(conn: Connection, data: bytes, now: float) -> list[Message | Closed]:
    conn.receive_data(data)
    return _events(conn, now)


def _flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0x01
    return bytes(out)


def _hello_save(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    """Bring ``pair`` to newcomer AWAIT_SAVED / incumbent SAVING."""
    assert pair.send(INC, make_hello(pair.incumbent.local_nonce)) == [
        make_hello(pair.incumbent.local_nonce)
    ]
    save = make_save(pair.newcomer.local_nonce, pair.incumbent.local_nonce)
    assert pair.send(NEW, save) == [save]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.AWAIT_SAVED, State.SAVING)


# -- whole conversations ---------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_full_succession(
    pair: ConnectionPair,
    steps: int,
    handshake: Callable[..., Transcript],
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
) -> None:
    t = handshake(pair, steps, handoff=HANDOFF)
    assert t.received[NEW] == t.sent[INC]
    assert t.received[INC] == t.sent[NEW]
    assert [type(m) for m in t.sent[INC]] == [Hello, *[ProgressReport] * steps, Saved]
    assert [type(m) for m in t.sent[NEW]] == [Save, AckSuccession]
    hello, *reports = t.sent[INC]
    save, ack = t.sent[NEW]
    expected_order = [(INC, hello), (NEW, save), *((INC, m) for m in reports), (NEW, ack)]
    assert [(x.sender, x.message) for x in pair.timeline] == expected_order
    saved = t.received[NEW][-1]
    assert isinstance(saved, Saved)
    assert saved.handoff == HANDOFF
    assert (pair.newcomer.state, pair.incumbent.state) == (State.AWAIT_EXIT, State.DEPOSED)
    assert pair.newcomer.peer_nonce == incumbent_nonce
    assert pair.incumbent.peer_nonce == newcomer_nonce
    assert pair.newcomer.last_progress == steps - 1
    # The incumbent leaves: end of stream is the expected ending for both.
    assert pair.deliver(NEW, b"") == [Closed(expected=True, state=State.AWAIT_EXIT)]
    assert pair.newcomer.state is State.CLOSED
    assert pair.deliver(INC, b"") == [Closed(expected=True, state=State.DEPOSED)]
    assert pair.incumbent.state is State.CLOSED


def _capture_succession(
    key: bytes,
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> list[tuple[Role, bytes]]:
    """Run a succession between two fresh Connections; return every frame sent."""
    sides = {
        NEW: Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0),
        INC: Connection(INC, key=key, nonce=incumbent_nonce, now=0.0),
    }
    script: list[tuple[Role, Message]] = [
        (INC, make_hello(incumbent_nonce)),
        (NEW, make_save(newcomer_nonce, incumbent_nonce)),
        (INC, ProgressReport(counter=0)),
        (INC, ProgressReport(counter=1)),
        (INC, Saved(handoff=HANDOFF, generation=7)),
        (NEW, AckSuccession()),
    ]
    frames: list[tuple[Role, bytes]] = []
    for sender, message in script:
        frame = sides[sender].send(message, 0.0)
        assert _feed(sides[sender.peer], frame, 0.0) == [message]
        frames.append((sender, frame))
    return frames


def test_frames_are_deterministic_and_signed_as_documented(
    key: bytes,
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    args = (key, newcomer_nonce, incumbent_nonce, make_hello, make_save)
    frames = _capture_succession(*args)
    assert frames == _capture_succession(*args)
    seqs = {NEW: 0, INC: 0}
    for sender, frame in frames:
        body = frame[4:]
        assert frame[:4] == HEADER.pack(len(body))
        payload, tag = body[:-32], body[-32:]
        direction = (
            Direction.NEWCOMER_TO_INCUMBENT if sender is NEW else Direction.INCUMBENT_TO_NEWCOMER
        )
        # HELLO is signed before the newcomer's nonce is known.
        new = NO_NONCE if b'"type":"HELLO"' in payload else newcomer_nonce
        assert tag == sign(key, direction, incumbent_nonce, new, seqs[sender], payload)
        assert f'"seq":{seqs[sender]},'.encode() in payload
        seqs[sender] += 1
    assert seqs == {NEW: 2, INC: 4}


def test_status_path(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_status: Callable[..., Status]
) -> None:
    hello = make_hello()
    assert pair.send(INC, hello) == [hello]
    status = make_status()
    assert pair.send(NEW, status) == [status]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.AWAIT_STATUS, State.REPLYING)
    reply = StatusReply(
        app="demo-app", pid=4242, generation=7, mode="exclusive", since_ms=5, busy=False
    )
    assert pair.send(INC, reply) == [reply]
    assert pair.newcomer.state is State.DONE
    assert pair.incumbent.state is State.DONE
    assert pair.deliver(NEW, b"") == [Closed(expected=True, state=State.DONE)]
    assert pair.deliver(INC, b"") == [Closed(expected=True, state=State.DONE)]


def test_status_refused_path(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_status: Callable[..., Status]
) -> None:
    pair.send(INC, make_hello())
    pair.send(NEW, make_status())
    refused = Refused(reason=Reason.INTERNAL, detail="not now")
    assert pair.send(INC, refused) == [refused]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.DONE, State.DONE)


def test_busy_path(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    busy = Busy(pid=999, start_time=1)
    assert pair.send(INC, busy) == [busy]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.DONE, State.DONE)
    assert pair.deliver(NEW, b"") == [Closed(expected=True, state=State.DONE)]


@pytest.mark.parametrize("progress_first", [False, True])
def test_refused_path(
    pair: ConnectionPair,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
    progress_first: bool,
) -> None:
    _hello_save(pair, make_hello, make_save)
    if progress_first:
        assert pair.send(INC, ProgressReport(counter=0)) == [ProgressReport(counter=0)]
    refused = Refused(reason=Reason.THRASH, detail="three successions in a minute")
    assert pair.send(INC, refused) == [refused]
    assert (pair.newcomer.state, pair.incumbent.state) == (State.DONE, State.DONE)
    assert pair.deliver(INC, b"") == [Closed(expected=True, state=State.DONE)]


def test_whole_conversation_byte_by_byte(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    script: list[tuple[Role, Message]] = [
        (INC, make_hello()),
        (NEW, make_save()),
        (INC, ProgressReport(0, 0, 2, "start")),
        (INC, ProgressReport(1, 1, 2, "half")),
        (INC, ProgressReport(1, 1, 2, "heartbeat")),
        (INC, ProgressReport(2, 2, 2, "end")),
        (INC, Saved(handoff=HANDOFF, generation=7)),
        (NEW, AckSuccession()),
    ]
    for sender, message in script:
        data = pair.sides[sender].send(message, pair.clock())
        received: list[Message | Closed] = []
        for i in range(len(data)):
            received.extend(pair.deliver(sender.peer, data[i : i + 1]))
            if i < len(data) - 1:
                assert received == []
        assert received == [message]
    assert pair.newcomer.state is State.AWAIT_EXIT
    assert pair.incumbent.state is State.DEPOSED
    assert pair.deliver(NEW, b"") == [Closed(expected=True, state=State.AWAIT_EXIT)]


def test_incumbent_frames_as_one_blob(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    messages: list[Message] = [
        *(ProgressReport(counter=i, done=i, total=3) for i in range(4)),
        Saved(handoff=HANDOFF, generation=7),
    ]
    blob = b"".join(pair.incumbent.send(m, pair.clock()) for m in messages)
    assert pair.deliver(NEW, blob) == messages
    assert pair.newcomer.state is State.MUST_ACK
    assert pair.newcomer.last_progress == 3
    assert pair.send(NEW, AckSuccession()) == [AckSuccession()]
    assert pair.incumbent.state is State.DEPOSED


def test_blob_then_eof_delivers_everything_before_closed(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    messages: list[Message] = [ProgressReport(counter=0), Busy(pid=5, start_time=6)]
    blob = b"".join(pair.incumbent.send(m, pair.clock()) for m in messages)
    pair.newcomer.receive_data(blob)
    pair.newcomer.receive_data(b"")
    assert _events(pair.newcomer, pair.clock()) == [
        *messages,
        Closed(expected=True, state=State.DONE),
    ]


def test_hello_and_busy_in_one_blob_is_illegal_for_newcomer(
    key: bytes, newcomer_nonce: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    # The newcomer must send SAVE between HELLO and BUSY; BUSY in READY is illegal,
    # even though it is authentic.
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0)
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    blob = incumbent.send(make_hello(), 0.0)
    blob += _signed(
        key,
        Direction.INCUMBENT_TO_NEWCOMER,
        incumbent_nonce,
        newcomer_nonce,
        1,
        Busy(pid=1, start_time=0),
    )
    newcomer.receive_data(blob)
    assert newcomer.next_event(0.0) == make_hello()
    with pytest.raises(RemoteProtocolError) as info:
        newcomer.next_event(0.0)
    assert not isinstance(info.value, SignatureError)
    assert "incumbent sent BUSY, which is illegal while the newcomer is in state READY" in str(
        info.value
    )
    assert newcomer.state is State.ERROR


# -- attacks -----------------------------------------------------------------------------------


def _signed(
    key: bytes,
    direction: Direction,
    inc: bytes,
    new: bytes,
    seq: int,
    message: Message,
    *,
    payload_seq: int | None = None,
) -> bytes:
    """A frame signed by hand, as a peer with ``key`` would (optionally lying about seq)."""
    payload = encode_payload(message, seq if payload_seq is None else payload_seq)
    return encode_frame(payload + sign(key, direction, inc, new, seq, payload))


def _assert_dead(conn: Connection) -> None:
    assert conn.state is State.ERROR
    assert conn.deadline is None
    with pytest.raises(LocalProtocolError, match="already failed"):
        conn.next_event(0.0)


def test_tampered_mac_byte(
    pair: ConnectionPair, key: bytes, newcomer_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    frame = pair.incumbent.send(make_hello(), pair.clock())
    for index in (len(frame) - 1, len(frame) - 32):
        newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0)
        with pytest.raises(SignatureError) as info:
            _feed(newcomer, _flip(frame, index), 0.0)
        assert "bad MAC on HELLO" in str(info.value)
        assert info.value.reason is Reason.AUTH
        _assert_dead(newcomer)


def test_tampered_payload_byte(pair: ConnectionPair, make_hello: Callable[..., Hello]) -> None:
    frame = pair.incumbent.send(make_hello(), pair.clock())
    assert frame.count(b"demo-app") == 1
    tampered = frame.replace(b"demo-app", b"demo-apq")
    with pytest.raises(SignatureError, match="bad MAC on HELLO"):
        pair.deliver(NEW, tampered)
    _assert_dead(pair.newcomer)


def test_tampered_progress_counter(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    frame = pair.incumbent.send(ProgressReport(counter=1), pair.clock())
    tampered = frame.replace(b'"counter":1', b'"counter":9')
    assert tampered != frame
    with pytest.raises(SignatureError, match="bad MAC on PROGRESS"):
        pair.deliver(NEW, tampered)
    _assert_dead(pair.newcomer)


def test_wrong_token_newcomer_rejects_hello(
    newcomer_nonce: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    project = bytes(32)
    incumbent = Connection(INC, key=derive_key(b"token-1", project), nonce=incumbent_nonce, now=0)
    newcomer = Connection(NEW, key=derive_key(b"token-2", project), nonce=newcomer_nonce, now=0)
    with pytest.raises(SignatureError) as info:
        _feed(newcomer, incumbent.send(make_hello(), 0.0), 0.0)
    assert "does not share this HIGHLANDER_TOKEN" in str(info.value)
    _assert_dead(newcomer)


def test_wrong_token_incumbent_rejects_save(
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    project = bytes(32)
    good, bad = derive_key(b"token-1", project), derive_key(b"token-2", project)
    incumbent = Connection(INC, key=good, nonce=incumbent_nonce, now=0)
    incumbent.send(make_hello(), 0.0)
    # A newcomer holding the wrong token, shown a HELLO forged with that token.
    shadow = Connection(INC, key=bad, nonce=incumbent_nonce, now=0)
    newcomer = Connection(NEW, key=bad, nonce=newcomer_nonce, now=0)
    assert _feed(newcomer, shadow.send(make_hello(), 0.0), 0.0) == [make_hello()]
    with pytest.raises(SignatureError, match="bad MAC on SAVE: the peer does not share"):
        _feed(incumbent, newcomer.send(make_save(), 0.0), 0.0)
    _assert_dead(incumbent)


def test_replayed_frame(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    frame = pair.incumbent.send(ProgressReport(counter=0), pair.clock())
    assert pair.deliver(NEW, frame) == [ProgressReport(counter=0)]
    with pytest.raises(SignatureError) as info:
        pair.deliver(NEW, frame)
    assert "replayed frame: PROGRESS has sequence 1, expected 2" in str(info.value)
    _assert_dead(pair.newcomer)


def test_reordered_frame(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    first = pair.incumbent.send(ProgressReport(counter=0), pair.clock())
    second = pair.incumbent.send(ProgressReport(counter=1), pair.clock())
    with pytest.raises(SignatureError) as info:
        pair.deliver(NEW, second)
    assert "reordered frame: PROGRESS has sequence 2, expected 1" in str(info.value)
    _assert_dead(pair.newcomer)
    assert first != second


def test_reflected_save_to_newcomer(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    pair.send(INC, make_hello())
    save_frame = pair.newcomer.send(make_save(), pair.clock())
    with pytest.raises(SignatureError) as info:
        pair.deliver(NEW, save_frame)
    assert "reflected frame: SAVE was sent by this side" in str(info.value)
    _assert_dead(pair.newcomer)


def test_reflected_hello_to_incumbent(
    pair: ConnectionPair, make_hello: Callable[..., Hello]
) -> None:
    hello_frame = pair.incumbent.send(make_hello(), pair.clock())
    with pytest.raises(SignatureError) as info:
        pair.deliver(INC, hello_frame)
    assert "reflected frame: our own HELLO came back to us" in str(info.value)
    _assert_dead(pair.incumbent)


def test_reflected_progress_to_incumbent(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    frame = pair.incumbent.send(ProgressReport(counter=0), pair.clock())
    with pytest.raises(SignatureError, match="reflected frame: PROGRESS was sent by this side"):
        pair.deliver(INC, frame)
    _assert_dead(pair.incumbent)


@pytest.mark.parametrize("request_kind", ["SAVE", "STATUS"])
def test_request_replayed_into_another_session(
    key: bytes,
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    other_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
    make_status: Callable[..., Status],
    request_kind: str,
) -> None:
    # Session 1: a genuine exchange, captured.
    first = ConnectionPair(
        key=key, newcomer_nonce=newcomer_nonce, incumbent_nonce=incumbent_nonce, clock=lambda: 0.0
    )
    first.send(INC, make_hello())
    request = make_save() if request_kind == "SAVE" else make_status()
    captured = first.newcomer.send(request, 0.0)
    assert first.deliver(INC, captured) == [request]
    # Session 2: a new incumbent connection with a fresh nonce gets the old request.
    incumbent = Connection(INC, key=key, nonce=other_nonce, now=0.0)
    incumbent.send(make_hello(other_nonce), 0.0)
    with pytest.raises(SignatureError) as info:
        _feed(incumbent, captured, 0.0)
    text = str(info.value)
    assert f"{request_kind} echoes the nonce of another session" in text
    assert "replayed" in text
    _assert_dead(incumbent)


def test_frame_lying_about_its_seq(
    key: bytes, newcomer_nonce: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    frame = _signed(
        key,
        Direction.INCUMBENT_TO_NEWCOMER,
        incumbent_nonce,
        NO_NONCE,
        0,
        make_hello(),
        payload_seq=5,
    )
    with pytest.raises(RemoteProtocolError) as info:
        _feed(newcomer, frame, 0.0)
    assert "HELLO claims sequence 5 but was signed as 0" in str(info.value)
    _assert_dead(newcomer)


def test_unauthenticated_illegal_message_is_a_protocol_error(
    key: bytes, newcomer_nonce: bytes
) -> None:
    # A frame that carries no nonce cannot be authenticated before HELLO; it is
    # rejected as illegal in this state.
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    frame = encode_frame(encode_payload(ProgressReport(counter=0), 0) + bytes(32))
    with pytest.raises(RemoteProtocolError) as info:
        _feed(newcomer, frame, 0.0)
    assert (
        "incumbent sent PROGRESS, which is illegal while the newcomer is in state AWAIT_HELLO"
        in str(info.value)
    )
    _assert_dead(newcomer)


def test_truncated_frame_then_eof(pair: ConnectionPair, make_hello: Callable[..., Hello]) -> None:
    frame = pair.incumbent.send(make_hello(), pair.clock())
    assert pair.deliver(NEW, frame[:14]) == []
    with pytest.raises(RemoteProtocolError) as info:
        pair.deliver(NEW, b"")
    assert not isinstance(info.value, SignatureError)
    assert f"truncated frame: stream ended after 10 of {len(frame) - 4} body bytes" in str(
        info.value
    )
    _assert_dead(pair.newcomer)


def test_truncated_header_then_eof(key: bytes, newcomer_nonce: bytes) -> None:
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    assert _feed(newcomer, b"\x00\x00", 0.0) == []
    with pytest.raises(RemoteProtocolError, match="stream ended after 2 of 4 header bytes"):
        _feed(newcomer, b"", 0.0)
    _assert_dead(newcomer)


def test_eof_mid_save_is_unexpected(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    pair.send(INC, ProgressReport(counter=0))
    assert pair.deliver(NEW, b"") == [Closed(expected=False, state=State.AWAIT_SAVED)]
    assert pair.newcomer.state is State.CLOSED
    assert pair.newcomer.deadline is None
    with pytest.raises(LocalProtocolError, match="already closed"):
        pair.newcomer.next_event(pair.clock())


@pytest.mark.parametrize(
    ("role", "steps", "state"),
    [
        (NEW, 0, State.AWAIT_HELLO),
        (NEW, 1, State.READY),
        (NEW, 4, State.MUST_ACK),
        (INC, 0, State.SEND_HELLO),
        (INC, 1, State.AWAIT_REQUEST),
        (INC, 2, State.SAVING),
        (INC, 4, State.AWAIT_ACK),
    ],
)
def test_eof_before_an_ending_is_unexpected(
    pair: ConnectionPair,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
    role: Role,
    steps: int,
    state: State,
) -> None:
    script: list[tuple[Role, Message]] = [
        (INC, make_hello()),
        (NEW, make_save()),
        (INC, ProgressReport(counter=0)),
        (INC, Saved(handoff=None, generation=1)),
    ]
    for sender, message in script[:steps]:
        pair.send(sender, message)
    assert pair.sides[role].state is state
    assert pair.deliver(role, b"") == [Closed(expected=False, state=state)]


def test_data_after_eof_is_a_local_error(key: bytes, newcomer_nonce: bytes) -> None:
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    newcomer.receive_data(b"")
    with pytest.raises(LocalProtocolError, match="received data after end of stream"):
        newcomer.receive_data(b"\x00")


def test_progress_counter_going_backwards(
    pair: ConnectionPair,
    key: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    _hello_save(pair, make_hello, make_save)
    assert pair.send(INC, ProgressReport(counter=5)) == [ProgressReport(counter=5)]
    assert pair.send(INC, ProgressReport(counter=5)) == [ProgressReport(counter=5)]
    # Our own incumbent refuses to send it; forge the frame a buggy peer would send.
    assert pair.newcomer.peer_nonce is not None
    payload = encode_payload(ProgressReport(counter=3), 3)
    tag = sign(
        key,
        Direction.INCUMBENT_TO_NEWCOMER,
        pair.newcomer.peer_nonce,
        pair.newcomer.local_nonce,
        3,
        payload,
    )
    with pytest.raises(RemoteProtocolError) as info:
        pair.deliver(NEW, encode_frame(payload + tag))
    assert not isinstance(info.value, SignatureError)
    assert "PROGRESS counter went backwards (3 after 5)" in str(info.value)
    _assert_dead(pair.newcomer)


def test_sending_a_progress_counter_backwards_is_a_local_error(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    pair.send(INC, ProgressReport(counter=5))
    with pytest.raises(LocalProtocolError, match=r"must not go backwards \(3 after 5\)"):
        pair.send(INC, ProgressReport(counter=3))
    assert pair.incumbent.state is State.ERROR


def test_oversize_frame_header_kills_connection(key: bytes, newcomer_nonce: bytes) -> None:
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0, max_frame=4096)
    with pytest.raises(RemoteProtocolError, match="frame length 4097 exceeds the cap of 4096"):
        newcomer.receive_data(HEADER.pack(4097))
    _assert_dead(newcomer)


def test_garbage_payload_kills_connection(key: bytes, incumbent_nonce: bytes) -> None:
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0)
    with pytest.raises(RemoteProtocolError, match="malformed payload"):
        _feed(incumbent, encode_frame(b"not json" + bytes(32)), 0.0)
    _assert_dead(incumbent)


def test_received_surrogate_handoff_is_a_remote_error(key: bytes, newcomer_nonce: bytes) -> None:
    # Regression: any peer, before authentication, can make next_event raise
    # UnicodeEncodeError (not a ProtocolError) and leave the connection out of ERROR.
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=0.0)
    payload = b'{"generation":0,"handoff":{"a":"\\udc80"},"seq":0,"type":"SAVED","v":1}'
    with pytest.raises(RemoteProtocolError):
        _feed(newcomer, encode_frame(payload + bytes(32)), 0.0)
    assert newcomer.state is State.ERROR


# -- illegal sends ----------------------------------------------------------------------------


def test_save_before_hello(pair: ConnectionPair, make_save: Callable[..., Save]) -> None:
    with pytest.raises(LocalProtocolError) as info:
        pair.newcomer.send(make_save(), pair.clock())
    assert str(info.value) == "newcomer cannot send SAVE in state AWAIT_HELLO"
    _assert_dead(pair.newcomer)
    with pytest.raises(LocalProtocolError, match="already failed"):
        pair.newcomer.send(make_save(), pair.clock())


def test_ack_before_saved(
    pair: ConnectionPair, make_hello: Callable[..., Hello], make_save: Callable[..., Save]
) -> None:
    _hello_save(pair, make_hello, make_save)
    with pytest.raises(LocalProtocolError) as info:
        pair.newcomer.send(AckSuccession(), pair.clock())
    assert str(info.value) == "newcomer cannot send ACK_SUCCESSION in state AWAIT_SAVED"
    _assert_dead(pair.newcomer)


def test_progress_before_save(pair: ConnectionPair, make_hello: Callable[..., Hello]) -> None:
    pair.send(INC, make_hello())
    with pytest.raises(
        LocalProtocolError, match="incumbent cannot send PROGRESS in state AWAIT_REQUEST"
    ):
        pair.incumbent.send(ProgressReport(counter=0), pair.clock())
    _assert_dead(pair.incumbent)


def test_hello_with_wrong_nonce(
    pair: ConnectionPair, make_hello: Callable[..., Hello], other_nonce: bytes
) -> None:
    with pytest.raises(LocalProtocolError, match=r"HELLO must carry this connection's nonce"):
        pair.incumbent.send(make_hello(other_nonce), pair.clock())
    _assert_dead(pair.incumbent)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("nonce", "must carry this connection's nonce"),
        ("echo", "must echo the incumbent's HELLO nonce"),
    ],
)
@pytest.mark.parametrize("kind", ["SAVE", "STATUS"])
def test_request_with_wrong_nonce_or_echo(
    pair: ConnectionPair,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
    make_status: Callable[..., Status],
    other_nonce: bytes,
    newcomer_nonce: bytes,
    incumbent_nonce: bytes,
    field: str,
    expected: str,
    kind: str,
) -> None:
    pair.send(INC, make_hello())
    nonces = {"nonce": newcomer_nonce, "echo": incumbent_nonce, field: other_nonce}
    request = make_save(**nonces) if kind == "SAVE" else make_status(**nonces)
    with pytest.raises(LocalProtocolError) as info:
        pair.newcomer.send(request, pair.clock())
    assert f"{kind} {expected}" in str(info.value)
    _assert_dead(pair.newcomer)


def test_send_over_frame_cap(
    key: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0, max_frame=200)
    with pytest.raises(LocalProtocolError, match="the cap is 200"):
        incumbent.send(make_hello(exe="x" * 300), 0.0)
    _assert_dead(incumbent)


def test_send_unencodable_text_is_a_local_error(
    key: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    # Unencodable text cannot even become a message, so nothing reaches send().
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0)
    with pytest.raises(LocalProtocolError, match="HELLO field 'app' is not valid Unicode"):
        make_hello(app="caf\udce9")
    assert incumbent.state is State.SEND_HELLO


@pytest.mark.parametrize("size", [0, 15, 17, 32])
def test_connection_nonce_must_be_16_bytes(key: bytes, size: int) -> None:
    with pytest.raises(LocalProtocolError, match="nonce must be 16 random bytes"):
        Connection(NEW, key=key, nonce=bytes(size), now=0.0)


# -- deadlines ----------------------------------------------------------------------------------


def test_newcomer_waits_for_hello(pair: ConnectionPair, clock: FakeClock) -> None:
    assert clock.now() == 100.0
    assert pair.newcomer.deadline == Deadline(Phase.HELLO, 101.0)
    assert pair.newcomer.overdue(100.0) is None
    assert pair.newcomer.overdue(100.999) is None
    assert pair.newcomer.overdue(101.0) == Deadline(Phase.HELLO, 101.0)
    assert pair.newcomer.overdue(500.0) == Deadline(Phase.HELLO, 101.0)
    assert pair.newcomer.deadline.remaining(100.25) == 0.75
    assert pair.newcomer.deadline.remaining(102.0) == -1.0


def test_incumbent_deadlines(
    pair: ConnectionPair,
    clock: FakeClock,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    incumbent = pair.incumbent
    assert (incumbent.state, incumbent.deadline) == (State.SEND_HELLO, None)
    assert incumbent.overdue(1e9) is None  # SEND_HELLO owes the first move itself
    clock.advance(0.5)
    pair.send(INC, make_hello())
    assert (incumbent.state, incumbent.deadline) == (
        State.AWAIT_REQUEST,
        Deadline(Phase.REQUEST, 102.5),
    )
    assert pair.incumbent.overdue(102.4) is None
    assert pair.incumbent.overdue(102.5) == Deadline(Phase.REQUEST, 102.5)
    assert pair.newcomer.deadline is None  # READY: the newcomer owes the next move
    clock.advance(1)
    pair.send(NEW, make_save())
    assert pair.incumbent.deadline is None  # SAVING: the incumbent owes the next move
    clock.advance(1)
    pair.send(INC, Saved(handoff=None, generation=1))
    assert pair.incumbent.deadline == Deadline(Phase.ACK, 104.5)
    clock.advance(1)
    pair.send(NEW, AckSuccession())
    assert pair.incumbent.state is State.DEPOSED
    assert pair.incumbent.deadline is None


def test_stall_progress_and_exit_deadlines(
    pair: ConnectionPair,
    clock: FakeClock,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    clock.advance(0.5)
    pair.send(INC, make_hello())
    assert pair.newcomer.deadline is None
    clock.advance(0.5)  # t = 101
    pair.send(NEW, make_save())
    assert pair.newcomer.deadline == Deadline(Phase.STALL, 104.0)
    assert pair.newcomer.overdue(103.9) is None
    assert pair.newcomer.overdue(104.0) == Deadline(Phase.STALL, 104.0)

    # Sent at 102, received at 103: the deadline counts from receipt.
    clock.advance(1)
    frame = pair.incumbent.send(ProgressReport(counter=0), clock.now())
    clock.advance(1)
    assert pair.deliver(NEW, frame) == [ProgressReport(counter=0)]
    assert pair.newcomer.deadline == Deadline(Phase.STALL, 106.0)

    # A repeated counter is a heartbeat, not progress: the deadline stays.
    clock.advance(2)  # t = 105
    pair.send(INC, ProgressReport(counter=0, note="still here"))
    assert pair.newcomer.deadline == Deadline(Phase.STALL, 106.0)
    assert pair.newcomer.overdue(106.0) == Deadline(Phase.STALL, 106.0)

    # An advancing counter extends it from now.
    clock.advance(0.5)  # t = 105.5
    pair.send(INC, ProgressReport(counter=1))
    assert pair.newcomer.deadline == Deadline(Phase.STALL, 108.5)
    assert pair.newcomer.overdue(106.0) is None

    clock.advance(1)  # t = 106.5
    pair.send(INC, Saved(handoff=HANDOFF, generation=7))
    assert pair.newcomer.state is State.MUST_ACK
    assert pair.newcomer.deadline is None
    clock.advance(1)  # t = 107.5
    pair.send(NEW, AckSuccession())
    assert pair.newcomer.deadline == Deadline(Phase.EXIT, 111.5)
    assert pair.newcomer.overdue(111.4) is None
    assert pair.newcomer.overdue(111.5) == Deadline(Phase.EXIT, 111.5)


def test_advancing_forever_hits_the_ceiling(
    pair: ConnectionPair,
    clock: FakeClock,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    pair.send(INC, make_hello())
    clock.advance(1)  # SAVE at t = 101: ceiling at 111
    pair.send(NEW, make_save())
    seen: list[Deadline | None] = []
    for counter in range(12):
        clock.advance(1)
        pair.send(INC, ProgressReport(counter=counter))
        seen.append(pair.newcomer.deadline)
    assert seen[:6] == [Deadline(Phase.STALL, 102.0 + i + 3) for i in range(6)]
    # From t = 108 on, now + stall reaches the ceiling, which no progress moves.
    assert seen[6:] == [Deadline(Phase.CEILING, 111.0)] * 6
    assert pair.newcomer.overdue(110.99) is None
    assert pair.newcomer.overdue(111.0) == Deadline(Phase.CEILING, 111.0)


def test_status_reply_deadline(
    pair: ConnectionPair,
    clock: FakeClock,
    make_hello: Callable[..., Hello],
    make_status: Callable[..., Status],
) -> None:
    pair.send(INC, make_hello())
    clock.advance(2)
    pair.send(NEW, make_status())
    assert pair.newcomer.deadline == Deadline(Phase.REPLY, 103.0)
    assert pair.incumbent.deadline is None


def test_default_timeouts(key: bytes, newcomer_nonce: bytes, incumbent_nonce: bytes) -> None:
    newcomer = Connection(NEW, key=key, nonce=newcomer_nonce, now=50.0)
    assert newcomer.deadline == Deadline(Phase.HELLO, 50.0 + Timeouts().hello)


def test_no_deadline_after_error(pair: ConnectionPair, make_save: Callable[..., Save]) -> None:
    with pytest.raises(LocalProtocolError):
        pair.newcomer.send(make_save(), pair.clock())
    assert pair.newcomer.deadline is None
    assert pair.newcomer.overdue(1e9) is None
