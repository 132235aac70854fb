"""Property tests of the core: hostile bytes, message round trips, random walks."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from highlander._core.codec import (
    HEADER,
    MAC_BYTES,
    NEED_DATA,
    FrameDecoder,
    decode_payload,
    encode_payload,
)
from highlander._core.connection import Closed, Connection
from highlander._core.errors import (
    LocalProtocolError,
    ProtocolError,
    Reason,
    RemoteProtocolError,
)
from highlander._core.messages import (
    MAX_NOTE,
    MESSAGE_TYPES,
    AckSuccession,
    Attach,
    Attached,
    Busy,
    Hello,
    Intent,
    Message,
    ProgressReport,
    Refused,
    Save,
    Saved,
    Status,
    StatusReply,
)
from highlander._core.signing import derive_key
from highlander._core.state import TRANSITIONS, Move, Role, State, StateMachine

KEY = derive_key(b"test-token", hashlib.sha256(b"/project").digest())
NONCES = {Role.NEWCOMER: bytes.fromhex("11" * 16), Role.INCUMBENT: bytes.fromhex("22" * 16)}
MAX_FRAME = 4096
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies: valid messages -------------------------------------------------------------

ints63 = st.integers(min_value=0, max_value=2**63 - 1)
nonces = st.binary(min_size=16, max_size=16).map(bytes.hex)
texts = st.text(max_size=40)
nonempty = st.text(min_size=1, max_size=40)
positive = st.integers(min_value=1, max_value=2**63 - 1)
optional_ints = st.none() | ints63
handoff_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def progress_reports(draw: st.DrawFn) -> ProgressReport:
    done, total = draw(optional_ints), draw(optional_ints)
    if done is not None and total is not None and done > total:
        done, total = total, done
    return ProgressReport(
        counter=draw(ints63), done=done, total=total, note=draw(st.text(max_size=MAX_NOTE))
    )


MESSAGES: dict[str, st.SearchStrategy[Message]] = {
    "HELLO": st.builds(
        Hello,
        pid=positive,
        start_time=ints63,
        exe=texts,
        app=nonempty,
        generation=ints63,
        since_ms=ints63,
        nonce=nonces,
        build=st.text(max_size=128),
        fingerprint=st.text(max_size=128),
        shares=st.booleans(),
    ),
    "ATTACH": st.builds(
        Attach,
        pid=positive,
        start_time=ints63,
        nonce=nonces,
        echo=nonces,
        app=nonempty,
        build=st.text(max_size=128),
        fingerprint=st.text(max_size=128),
    ),
    "ATTACHED": st.builds(Attached, generation=ints63, sessions=positive),
    "SAVE": st.builds(
        Save,
        pid=positive,
        start_time=ints63,
        nonce=nonces,
        echo=nonces,
        intent=st.sampled_from(Intent),
        app=nonempty,
    ),
    "PROGRESS": progress_reports(),
    "SAVED": st.builds(
        Saved,
        handoff=st.none() | st.dictionaries(texts, handoff_values, max_size=6),
        generation=ints63,
    ),
    "ACK_SUCCESSION": st.just(AckSuccession()),
    "BUSY": st.builds(Busy, pid=positive, start_time=ints63),
    "REFUSED": st.builds(
        Refused, reason=st.sampled_from(Reason), detail=st.text(max_size=MAX_NOTE)
    ),
    "STATUS": st.builds(Status, nonce=nonces, echo=nonces),
    "STATUS_REPLY": st.builds(
        StatusReply,
        app=nonempty,
        pid=positive,
        generation=ints63,
        mode=st.text(min_size=1, max_size=16),
        since_ms=ints63,
        busy=st.booleans(),
    ),
}
any_message = st.one_of(*MESSAGES.values())


# -- (a) hostile bytes ---------------------------------------------------------------------

# Text includes lone surrogates on purpose: JSON can carry them as \udXXX escapes.
any_text = st.text(st.characters(exclude_categories=()), max_size=12)
json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    any_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(any_text, inner, max_size=3),
    max_leaves=8,
)
field_names = st.sampled_from(
    sorted({name for cls in MESSAGE_TYPES.values() for name in cls.field_names()})
)


@st.composite
def plausible_payloads(draw: st.DrawFn) -> bytes:
    """Payloads shaped like messages: a valid message with some fields broken."""
    if draw(st.sampled_from(range(10))) == 9:
        return json.dumps({"type": "NOPE", "v": 1, "seq": 0}).encode()
    message = draw(any_message)
    data: dict[str, Any] = message.to_fields()
    for name in draw(st.lists(st.sampled_from(sorted(data) or ["extra"]), max_size=2)):
        if draw(st.booleans()):
            data[name] = draw(json_values)
        else:
            data.pop(name, None)
    data.update(draw(st.dictionaries(field_names, json_values, max_size=1)))
    data["type"] = message.TYPE
    data["v"] = draw(st.sampled_from([1, 1, 1, 1, 2, None]))
    data["seq"] = draw(st.sampled_from([0, 0, 0, 1, 2, -1, True]))
    return json.dumps(data).encode()


@st.composite
def framed(draw: st.DrawFn) -> bytes:
    """A well-framed body (payload + junk tag), or raw noise with a plausible header."""
    if draw(st.sampled_from(range(4))) < 3:
        payload = draw(plausible_payloads())
    else:
        payload = draw(st.binary(min_size=2, max_size=200))
    body = payload + draw(st.binary(min_size=MAC_BYTES, max_size=MAC_BYTES))
    return HEADER.pack(len(body)) + body


streams = st.one_of(
    st.lists(framed(), min_size=1, max_size=3).map(b"".join),
    st.lists(framed() | st.binary(max_size=64), min_size=1, max_size=4).map(b"".join),
    st.binary(max_size=2 * MAX_FRAME),
)


@st.composite
def chunked(draw: st.DrawFn) -> list[bytes]:
    """A stream cut into arbitrary non-empty chunks."""
    data = draw(streams)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=8)))
    bounds = [0, *(c for c in cuts if c < len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _surrogate_frame() -> list[bytes]:
    payload = b'{"generation":0,"handoff":{"a":"\\ud800"},"seq":0,"type":"SAVED","v":1}'
    body = payload + bytes(MAC_BYTES)
    return [HEADER.pack(len(body)) + body]


@FUZZ
@given(role=st.sampled_from(list(Role)), chunks=chunked(), eof=st.booleans())
@example(role=Role.NEWCOMER, chunks=[HEADER.pack(MAX_FRAME + 1)], eof=False)
@example(role=Role.INCUMBENT, chunks=[b"\x00\x00\x00\x22", b"{}", bytes(32)], eof=True)
# The lone-surrogate frame that escapes as UnicodeEncodeError (library bug).
@example(role=Role.NEWCOMER, chunks=_surrogate_frame(), eof=False)
def test_hostile_bytes_raise_only_protocol_errors(
    role: Role, chunks: list[bytes], eof: bool
) -> None:
    conn = Connection(role, key=KEY, nonce=NONCES[role], now=0.0, max_frame=MAX_FRAME)
    if role is Role.INCUMBENT:
        conn.send(
            Hello(
                pid=1,
                start_time=0,
                exe="",
                app="fuzz",
                generation=0,
                since_ms=0,
                nonce=NONCES[role].hex(),
            ),
            0.0,
        )
    error: BaseException | None = None
    try:
        for chunk in [*chunks, *([b""] if eof else [])]:
            conn.receive_data(chunk)
            while True:
                event = conn.next_event(1.0)
                if event is NEED_DATA or isinstance(event, Closed):
                    break
            if event is NEED_DATA:
                assert conn._decoder.buffered <= 4 + MAX_FRAME
            if isinstance(event, Closed):
                break
    except Exception as exc:  # the property is about which errors escape
        error = exc
    if error is not None:
        assert isinstance(error, ProtocolError), repr(error)
        assert conn.state is State.ERROR
        assert conn.deadline is None
    else:
        # Nothing can be authentic: the stream either still waits or has ended.
        assert conn.state in {State.AWAIT_HELLO, State.AWAIT_REQUEST, State.CLOSED}


@FUZZ
@given(chunks=chunked())
def test_decoder_buffer_stays_bounded(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame=MAX_FRAME)
    stream = b"".join(chunks)
    bodies: list[bytes] = []
    consumed = 0
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (body := decoder.next_frame()) is not NEED_DATA:
                assert isinstance(body, bytes)
                assert MAC_BYTES + 2 <= len(body) <= MAX_FRAME
                bodies.append(body)
            assert decoder.buffered <= 4 + MAX_FRAME
    except RemoteProtocolError as exc:
        assert "frame length" in str(exc)
        return
    # Without an error, the bodies are exactly the stream's frames, in order.
    for body in bodies:
        assert stream[consumed : consumed + 4] == HEADER.pack(len(body))
        assert stream[consumed + 4 : consumed + 4 + len(body)] == body
        consumed += 4 + len(body)
    assert decoder.buffered == len(stream) - consumed


# -- (b) message round trips --------------------------------------------------------------


def test_message_strategies_cover_every_type() -> None:
    assert set(MESSAGES) == set(MESSAGE_TYPES)


@FUZZ
@given(message=any_message, seq=ints63)
def test_messages_round_trip_through_payload(message: Message, seq: int) -> None:
    payload = encode_payload(message, seq)
    assert decode_payload(payload) == (seq, message)
    # Canonical: re-encoding the decoded message gives the same bytes.
    assert encode_payload(decode_payload(payload)[1], seq) == payload


@FUZZ
@given(message=any_message)
def test_from_fields_inverts_to_fields(message: Message) -> None:
    assert type(message).from_fields(message.to_fields()) == message


# -- (c) random walks through the state machine -----------------------------------------------

steps = st.tuples(st.sampled_from(list(Move)), st.sampled_from(sorted(MESSAGE_TYPES)))


@FUZZ
@given(role=st.sampled_from(list(Role)), data=st.data())
def test_random_walks_follow_the_table(role: Role, data: st.DataObject) -> None:
    machine = StateMachine(role)
    for _ in range(data.draw(st.integers(1, 12), label="length")):
        legal = sorted(
            (e.value, k) for (r, s, e, k) in TRANSITIONS if r is role and s is machine.state
        )
        if legal and data.draw(st.integers(0, 3), label="follow") > 0:
            name, kind = data.draw(st.sampled_from(legal), label="legal step")
            event = Move(name)
        else:
            event, kind = data.draw(steps, label="any step")
        before = machine.state
        key = (role, before, event, kind)
        if key in TRANSITIONS:
            target = machine.next_state(event, kind)
            assert target is TRANSITIONS[key]
            machine.move(target)
            continue
        expected: type[ProtocolError]
        if before is State.ERROR or event is Move.SENT:
            expected = LocalProtocolError
        else:
            expected = RemoteProtocolError
        try:
            machine.next_state(event, kind)
        except ProtocolError as exc:
            assert isinstance(exc, expected)
            if expected is RemoteProtocolError:
                assert not isinstance(exc, LocalProtocolError)
        else:
            raise AssertionError(f"{key} is not in TRANSITIONS but was accepted")
        assert machine.state is State.ERROR
