"""Framing and payload decoding: exact frames out, every defect named."""

from __future__ import annotations

import json
from typing import Any

import pytest

from highlander._core.canonical import canonical_json
from highlander._core.codec import (
    DEFAULT_MAX_FRAME,
    HEADER,
    MAC_BYTES,
    NEED_DATA,
    FrameDecoder,
    decode_payload,
    encode_frame,
    encode_payload,
    split_body,
)
from highlander._core.errors import LocalProtocolError, Reason, RemoteProtocolError
from highlander._core.messages import (
    MAX_HANDOFF_BYTES,
    AckSuccession,
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

NONCE_A = "ab" * 16
NONCE_B = "cd" * 16
MIN_BODY = 2 + MAC_BYTES  # b"{}" plus the tag

SAMPLES: list[Message] = [
    Hello(
        pid=4242,
        start_time=123_456,
        exe="/usr/bin/python3",
        app="démo",
        generation=7,
        since_ms=1_000,
        nonce=NONCE_A,
    ),
    Save(pid=4343, start_time=9, nonce=NONCE_B, echo=NONCE_A, intent=Intent.STOP, app="a"),
    ProgressReport(counter=3, done=3, total=10, note='copying\n"quotes" \u2603'),
    ProgressReport(counter=0),
    Saved(handoff={"b": [1, 2.5, None, True], "a": {"nested": "é"}}, generation=7),
    Saved(handoff=None, generation=0),
    AckSuccession(),
    Busy(pid=77, start_time=5),
    Refused(reason=Reason.THRASH, detail="too many successions"),
    Status(nonce=NONCE_B, echo=NONCE_A),
    StatusReply(app="demo", pid=4242, generation=7, mode="exclusive", since_ms=1, busy=True),
]


def _sample_id(message: Message) -> str:
    return message.TYPE


def _body(message: Message, seq: int = 0) -> bytes:
    """A frame body: payload plus a stand-in tag (the codec does not check MACs)."""
    return encode_payload(message, seq) + bytes(range(MAC_BYTES))


def _frame(message: Message, seq: int = 0) -> bytes:
    return encode_frame(_body(message, seq))


def _drain(decoder: FrameDecoder) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        body = decoder.next_frame()
        if body is NEED_DATA:
            return bodies
        assert isinstance(body, bytes)
        bodies.append(body)


def _payload(**data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def _wire(message: Message, **changes: Any) -> dict[str, Any]:
    """The wire dict of ``message`` as frame 0, with ``changes`` applied (None deletes)."""
    data: dict[str, Any] = json.loads(encode_payload(message, 0))
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    return data


# -- payload round trip ---------------------------------------------------------------


@pytest.mark.parametrize("message", SAMPLES, ids=_sample_id)
@pytest.mark.parametrize("seq", [0, 1, 2**63 - 1])
def test_payload_round_trip(message: Message, seq: int) -> None:
    payload = encode_payload(message, seq)
    assert decode_payload(payload) == (seq, message)


@pytest.mark.parametrize("message", SAMPLES, ids=_sample_id)
def test_payload_is_canonical_json_with_envelope(message: Message) -> None:
    payload = encode_payload(message, 5)
    data = json.loads(payload)
    assert data["type"] == message.TYPE
    assert data["v"] == 1
    assert data["seq"] == 5
    assert set(data) == set(message.to_fields()) | {"type", "v", "seq"}
    assert payload == canonical_json(data)


def test_payload_bytes_are_exact() -> None:
    payload = encode_payload(Busy(pid=77, start_time=5), 2)
    assert payload == b'{"pid":77,"seq":2,"start_time":5,"type":"BUSY","v":1}'
    assert encode_payload(AckSuccession(), 0) == b'{"seq":0,"type":"ACK_SUCCESSION","v":1}'


# -- frames -----------------------------------------------------------------------------


@pytest.mark.parametrize("message", SAMPLES, ids=_sample_id)
def test_frame_round_trip(message: Message) -> None:
    body = _body(message, 3)
    frame = encode_frame(body)
    assert frame[:4] == len(body).to_bytes(4, "big")
    decoder = FrameDecoder()
    decoder.feed(frame)
    assert _drain(decoder) == [body]
    assert decoder.buffered == 0
    payload, tag = split_body(body)
    assert tag == bytes(range(MAC_BYTES))
    assert decode_payload(payload) == (3, message)


@pytest.mark.parametrize("message", SAMPLES, ids=_sample_id)
def test_frame_fed_byte_by_byte(message: Message) -> None:
    body = _body(message)
    frame = encode_frame(body)
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(frame)):
        decoder.feed(frame[i : i + 1])
        got.extend(_drain(decoder))
        if i < len(frame) - 1:
            assert got == []
            assert decoder.buffered == i + 1
    assert got == [body]
    assert decoder.buffered == 0


@pytest.mark.parametrize("message", SAMPLES, ids=_sample_id)
@pytest.mark.parametrize("tail", [1, 3, 4, 5, 20])
def test_frame_with_trailing_partial_frame(message: Message, tail: int) -> None:
    body = _body(message)
    following = _frame(SAMPLES[0], 1)
    decoder = FrameDecoder()
    decoder.feed(encode_frame(body) + following[:tail])
    assert _drain(decoder) == [body]
    assert decoder.buffered == tail
    decoder.feed(following[tail:])
    assert _drain(decoder) == [following[4:]]
    assert decoder.buffered == 0


def test_all_frames_concatenated_then_split_at_every_offset() -> None:
    bodies = [_body(m, i) for i, m in enumerate(SAMPLES)]
    stream = b"".join(encode_frame(b) for b in bodies)
    for cut in range(0, len(stream), 97):
        decoder = FrameDecoder()
        decoder.feed(stream[:cut])
        got = _drain(decoder)
        decoder.feed(stream[cut:])
        got.extend(_drain(decoder))
        assert got == bodies
        assert decoder.buffered == 0


def test_next_frame_needs_data_on_empty_and_partial_header() -> None:
    decoder = FrameDecoder()
    assert decoder.next_frame() is NEED_DATA
    decoder.feed(b"\x00\x00")
    assert decoder.next_frame() is NEED_DATA
    assert decoder.describe_partial() == "2 of 4 header bytes"
    decoder.feed(HEADER.pack(100)[2:] + b"{" * 10)
    assert decoder.next_frame() is NEED_DATA
    assert decoder.describe_partial() == "10 of 100 body bytes"


def test_length_header_exactly_at_cap_accepted() -> None:
    decoder = FrameDecoder(max_frame=100)
    body = b"{}" + b"x" * 98
    decoder.feed(HEADER.pack(100))
    assert decoder.buffered == 4
    decoder.feed(body)
    assert _drain(decoder) == [body]


@pytest.mark.parametrize("cap", [MIN_BODY, 100, DEFAULT_MAX_FRAME])
def test_oversize_length_rejected_after_four_header_bytes(cap: int) -> None:
    decoder = FrameDecoder(max_frame=cap)
    header = HEADER.pack(cap + 1)
    for byte in header[:3]:
        decoder.feed(bytes([byte]))
    assert decoder.buffered == 3
    with pytest.raises(RemoteProtocolError) as info:
        decoder.feed(header[3:])
    assert str(info.value) == f"frame length {cap + 1} exceeds the cap of {cap} bytes"
    assert decoder.buffered == 4


def test_oversize_length_rejected_whole_header_at_once() -> None:
    decoder = FrameDecoder(max_frame=4096)
    with pytest.raises(RemoteProtocolError, match="exceeds the cap of 4096 bytes"):
        decoder.feed(HEADER.pack(2**32 - 1))
    assert decoder.buffered == 4


def test_oversize_length_rejected_after_a_good_frame() -> None:
    decoder = FrameDecoder(max_frame=4096)
    good = _frame(SAMPLES[0])
    decoder.feed(good)
    assert _drain(decoder) == [good[4:]]
    with pytest.raises(RemoteProtocolError, match="frame length 4097 exceeds the cap"):
        decoder.feed(HEADER.pack(4097))
    assert decoder.buffered == 4


@pytest.mark.parametrize("length", [0, 1, MIN_BODY - 1])
def test_undersize_length_rejected(length: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError) as info:
        decoder.feed(HEADER.pack(length))
    assert str(info.value) == (
        f"frame length {length} is shorter than the minimum of {MIN_BODY} bytes"
    )


def test_minimum_length_accepted() -> None:
    decoder = FrameDecoder()
    decoder.feed(HEADER.pack(MIN_BODY) + b"{}" + bytes(MAC_BYTES))
    assert _drain(decoder) == [b"{}" + bytes(MAC_BYTES)]


def test_decoder_cap_below_minimum_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError, match=f"max_frame must be >= {MIN_BODY}"):
        FrameDecoder(max_frame=MIN_BODY - 1)


def test_encode_frame_cap() -> None:
    assert encode_frame(b"x" * DEFAULT_MAX_FRAME)[:4] == HEADER.pack(DEFAULT_MAX_FRAME)
    with pytest.raises(LocalProtocolError) as info:
        encode_frame(b"x" * (DEFAULT_MAX_FRAME + 1))
    assert f"frame body is {DEFAULT_MAX_FRAME + 1} bytes; the cap is {DEFAULT_MAX_FRAME}" in str(
        info.value
    )
    with pytest.raises(LocalProtocolError, match="the cap is 64"):
        encode_frame(b"x" * 65, max_frame=64)


def test_largest_legal_saved_fits_default_cap() -> None:
    handoff = {"a": "x" * (MAX_HANDOFF_BYTES - len(b'{"a":""}'))}
    message = Saved(handoff=handoff, generation=2**63 - 1)
    body = encode_payload(message, 2**63 - 1) + bytes(MAC_BYTES)
    frame = encode_frame(body)
    decoder = FrameDecoder()
    decoder.feed(frame)
    assert _drain(decoder) == [body]
    assert decode_payload(split_body(body)[0]) == (2**63 - 1, message)


# -- the 64 KiB + 1 handoff ------------------------------------------------------------------


def _oversized_saved_payload() -> bytes:
    handoff = {"a": "x" * (MAX_HANDOFF_BYTES + 1 - len(b'{"a":""}'))}
    assert len(canonical_json(handoff)) == MAX_HANDOFF_BYTES + 1
    return canonical_json({"type": "SAVED", "v": 1, "seq": 0, "generation": 0, "handoff": handoff})


def test_handoff_over_64_kib_rejected_at_construction() -> None:
    handoff = json.loads(_oversized_saved_payload())["handoff"]
    with pytest.raises(LocalProtocolError, match="SAVED field 'handoff' is 65537 bytes"):
        Saved(handoff=handoff, generation=0)


def test_handoff_over_64_kib_rejected_when_received() -> None:
    body = _oversized_saved_payload() + bytes(MAC_BYTES)
    decoder = FrameDecoder(max_frame=4 * MAX_HANDOFF_BYTES)
    decoder.feed(HEADER.pack(len(body)) + body)
    (received,) = _drain(decoder)
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(split_body(received)[0])
    assert not isinstance(info.value, LocalProtocolError)
    assert "SAVED field 'handoff' is 65537 bytes" in str(info.value)


# -- garbage payloads ----------------------------------------------------------------------

HELLO = SAMPLES[0]

GARBAGE: list[tuple[str, bytes, str]] = [
    ("empty", b"", "malformed payload"),
    ("not-json", b"hello there", "malformed payload"),
    ("truncated-json", b'{"type":"HELLO"', "malformed payload"),
    ("trailing-data", b'{"v":1}{"v":1}', "malformed payload"),
    ("not-utf8", b'{"type":"\xff\xfe"}', "not UTF-8"),
    ("overlong-utf8", b'{"type":"\xc0\xaf"}', "not UTF-8"),
    ("utf16", '{"v":1}'.encode("utf-16"), "not UTF-8"),
    ("array", b"[1,2,3]", "payload must be a JSON object, got list"),
    ("string", b'"HELLO"', "payload must be a JSON object, got str"),
    ("number", b"1", "payload must be a JSON object, got int"),
    ("null", b"null", "payload must be a JSON object, got NoneType"),
    ("duplicate-key", b'{"v":1,"v":1,"type":"ACK_SUCCESSION","seq":0}', "duplicate key 'v'"),
    (
        "nested-duplicate-key",
        b'{"generation":0,"handoff":{"a":1,"a":2},"seq":0,"type":"SAVED","v":1}',
        "duplicate key 'a'",
    ),
    ("nan", b'{"v":NaN}', "non-finite number NaN"),
    ("infinity", b'{"v":Infinity}', "non-finite number Infinity"),
    ("minus-infinity", b'{"v":-Infinity}', "non-finite number -Infinity"),
    ("overflow", b'{"v":1e999}', "overflows a double"),
    ("negative-overflow", b'{"v":-1e999}', "overflows a double"),
    ("nested-nan", b'{"handoff":{"x":[NaN]}}', "non-finite number NaN"),
    ("deep-arrays", b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
    ("deep-objects", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nested too deeply"),
    ("huge-int", b'{"v":1' + b"0" * 5000 + b"}", "malformed payload"),
    ("unknown-type", _payload(type="NOPE", v=1, seq=0), "unknown message type 'NOPE'"),
    ("missing-type", _payload(v=1, seq=0), "unknown message type None"),
    ("type-not-string", _payload(type=["HELLO"], v=1, seq=0), "unknown message type ['HELLO']"),
    ("lowercase-type", _payload(type="hello", v=1, seq=0), "unknown message type 'hello'"),
    (
        "missing-field",
        canonical_json(_wire(HELLO, pid=None)),
        "HELLO is missing field 'pid'",
    ),
    (
        "unknown-field",
        canonical_json(_wire(HELLO, colour="blue")),
        "HELLO has unknown field 'colour'",
    ),
    (
        "mistyped-field",
        canonical_json(_wire(HELLO, pid="4242")),
        "HELLO field 'pid' must be an integer, got str",
    ),
    (
        "float-field",
        canonical_json(_wire(HELLO, pid=4242.0)),
        "HELLO field 'pid' must be an integer, got float",
    ),
    (
        "bool-field",
        canonical_json(_wire(HELLO, generation=True)),
        "HELLO field 'generation' must be an integer, got bool",
    ),
    (
        "bad-nonce",
        canonical_json(_wire(HELLO, nonce=NONCE_A.upper())),
        "HELLO field 'nonce' must be 32 lowercase hex digits",
    ),
    (
        "bad-enum",
        canonical_json(_wire(SAMPLES[1], intent="abdicate")),
        "SAVE field 'intent' must be one of succeed, stop, got 'abdicate'",
    ),
    (
        "unhashable-enum",
        canonical_json(_wire(SAMPLES[1], intent=["stop"])),
        "SAVE field 'intent' must be one of",
    ),
    (
        "bad-handoff",
        canonical_json(_wire(SAMPLES[5], handoff=[1])),
        "SAVED field 'handoff' must be a JSON object",
    ),
    (
        "bool-seq",
        canonical_json(_wire(HELLO, seq=True)),
        "HELLO has an invalid sequence number True",
    ),
    ("negative-seq", canonical_json(_wire(HELLO, seq=-1)), "invalid sequence number -1"),
    ("float-seq", canonical_json(_wire(HELLO, seq=1.0)), "invalid sequence number 1.0"),
    ("string-seq", canonical_json(_wire(HELLO, seq="0")), "invalid sequence number '0'"),
    ("missing-seq", canonical_json(_wire(HELLO, seq=None)), "invalid sequence number None"),
    ("huge-seq", canonical_json(_wire(HELLO, seq=2**63)), "invalid sequence number"),
]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [(payload, expected) for _, payload, expected in GARBAGE],
    ids=[name for name, _, _ in GARBAGE],
)
def test_garbage_payload_rejected_naming_the_problem(payload: bytes, expected: str) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(payload)
    assert expected in str(info.value)
    assert info.value.reason is not Reason.VERSION


@pytest.mark.parametrize(
    ("version", "shown"),
    [(2, "2"), (0, "0"), ("1", "'1'"), (None, "None"), ([1], "[1]")],
)
def test_wrong_version_rejected_with_reason_version(version: Any, shown: str) -> None:
    data = _wire(HELLO)
    data["v"] = version
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(canonical_json(data))
    assert info.value.reason is Reason.VERSION
    assert f"peer speaks protocol version {shown}; this Highlander speaks 1" in str(info.value)


def test_missing_version_rejected_with_reason_version() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(canonical_json(_wire(HELLO, v=None)))
    assert info.value.reason is Reason.VERSION


@pytest.mark.parametrize("version", [True, 1.0], ids=["true", "float"])
def test_version_must_be_the_integer_one(version: Any) -> None:
    # Regression: decode_payload compares with `!=`, so JSON `true` and `1.0`
    # pass as version 1 (True == 1 == 1.0), although seq rejects bool/float.
    data = _wire(HELLO)
    data["v"] = version
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(canonical_json(data))
    assert info.value.reason is Reason.VERSION


def test_version_checked_before_type() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(_payload(type="NOPE", v=2, seq=0))
    assert info.value.reason is Reason.VERSION


def test_payload_with_lone_surrogate_rejected() -> None:
    # Regression: the JSON escape \ud800 parses to a lone surrogate; Saved's
    # size check then calls canonical_json, whose .encode("utf-8") raises
    # UnicodeEncodeError, which decode_payload does not catch.
    payload = b'{"generation":0,"handoff":{"a":"\\ud800"},"seq":0,"type":"SAVED","v":1}'
    with pytest.raises(RemoteProtocolError, match="handoff"):
        decode_payload(payload)


def test_encode_payload_of_unencodable_text_is_a_local_error() -> None:
    # Regression (same root cause): a HELLO with a lone surrogate in `app`
    # constructs fine, then encoding it raises UnicodeEncodeError instead of
    # a ProtocolError.
    with pytest.raises(LocalProtocolError):
        hello = Hello(
            pid=1, start_time=0, exe="", app="\udcff", generation=0, since_ms=0, nonce=NONCE_A
        )
        encode_payload(hello, 0)
