"""Messages are valid by construction: every bad field raises, naming the field."""

from __future__ import annotations

import enum
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from highlander._core.canonical import canonical_json
from highlander._core.errors import LocalProtocolError, Reason
from highlander._core.messages import (
    MAX_HANDOFF_BYTES,
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

NONCE_A = "ab" * 16
NONCE_B = "0123456789abcdef" * 2

#: One valid set of constructor arguments per message type.
VALID: dict[type[Message], dict[str, Any]] = {
    Hello: {
        "pid": 4242,
        "start_time": 123_456,
        "exe": "/usr/bin/python3",
        "app": "demo-app",
        "generation": 7,
        "since_ms": 1_000,
        "nonce": NONCE_A,
        "build": "1.4.2",
        "fingerprint": "0f" * 16,
        "shares": True,
    },
    Attach: {
        "pid": 4343,
        "start_time": 0,
        "nonce": NONCE_B,
        "echo": NONCE_A,
        "app": "demo-app",
        "build": "1.4.2",
        "fingerprint": "0f" * 16,
    },
    Attached: {"generation": 7, "sessions": 1},
    Save: {
        "pid": 4343,
        "start_time": 0,
        "nonce": NONCE_B,
        "echo": NONCE_A,
        "intent": Intent.SUCCEED,
        "app": "demo-app",
    },
    ProgressReport: {"counter": 0, "done": 1, "total": 2, "note": "flushing"},
    Saved: {"handoff": {"tasks": [1, 2.5, None, True, "é"], "nested": {"k": {}}}, "generation": 7},
    AckSuccession: {},
    Busy: {"pid": 1, "start_time": 0},
    Refused: {"reason": Reason.MODE, "detail": "exclusive mode"},
    Status: {"nonce": NONCE_B, "echo": NONCE_A},
    StatusReply: {
        "app": "demo-app",
        "pid": 4242,
        "generation": 7,
        "mode": "exclusive",
        "since_ms": 1_000,
        "busy": False,
    },
}

#: Valid non-default values that exercise limits and optional fields.
VALID_EDGES: list[tuple[type[Message], dict[str, Any]]] = [
    (Hello, {"pid": 2**63 - 1}),
    (Hello, {"exe": ""}),
    (Hello, {"build": "", "fingerprint": "", "shares": False}),
    (Hello, {"build": "b" * 128}),
    (Attach, {"build": "", "fingerprint": ""}),
    (Attached, {"sessions": 2**63 - 1}),
    (Hello, {"exe": "x" * 4096, "app": "é" * 4096}),
    (Save, {"intent": Intent.STOP}),
    (Save, {"nonce": NONCE_A}),  # the same value as echo is not a field error
    (ProgressReport, {"done": None, "total": None, "note": ""}),
    (ProgressReport, {"done": 5, "total": 5}),
    (ProgressReport, {"done": 9, "total": None}),
    (ProgressReport, {"done": None, "total": 0}),
    (ProgressReport, {"note": "n" * 1024}),
    (Saved, {"handoff": None}),
    (Saved, {"handoff": {}}),
    (Refused, {"detail": "d" * 1024}),
    (Refused, {"reason": Reason.VERSION, "detail": ""}),
    (StatusReply, {"mode": "m" * 16, "busy": True}),
]

BAD_NONCES: list[Any] = [
    "AB" * 16,  # uppercase
    "Ab" * 16,  # mixed case
    "ab" * 15,  # 15 bytes
    "ab" * 17,  # 17 bytes
    "ab" * 15 + "a",  # odd length
    "zz" * 16,  # not hex
    "ab" * 15 + "g0",
    "ab" * 7 + "z" + "a" + "ab" * 8,  # not hex in the middle only
    "ab" * 15 + "a\n",  # a trailing newline
    "\u0663" * 32,  # digits, but not ASCII ones
    "",
    "ab" * 16 + "\n",  # trailing newline must not pass a `$`-style match
    " " + "ab" * 16,
    "0x" + "ab" * 15,
    bytes(16),  # raw bytes instead of hex text
    None,
    int("ab" * 16, 16),
]

#: (message type, field, bad value) -> must raise LocalProtocolError naming the field.
INVALID: list[tuple[type[Message], str, Any]] = [
    # integers: bool is not an int on the wire; negatives; floats; strings; None; > 63 bits
    *[
        (cls, name, bad)
        for cls, names in [
            (Hello, ["pid", "start_time", "generation", "since_ms"]),
            (Save, ["pid", "start_time"]),
            (ProgressReport, ["counter"]),
            (Saved, ["generation"]),
            (Busy, ["pid", "start_time"]),
            (StatusReply, ["pid", "generation", "since_ms"]),
            (Attach, ["pid", "start_time"]),
            (Attached, ["generation", "sessions"]),
        ]
        for name in names
        for bad in [True, False, -1, 1.0, "1", None, 2**63]
    ],
    # pid 0 is nobody
    (Hello, "pid", 0),
    (Save, "pid", 0),
    (Busy, "pid", 0),
    (StatusReply, "pid", 0),
    (Attach, "pid", 0),
    (Attached, "sessions", 0),
    # optional integers: None is fine, the rest is not
    *[
        (ProgressReport, name, bad)
        for name in ["done", "total"]
        for bad in [True, -1, 1.5, "3", 2**63]
    ],
    # nonces
    *[
        (cls, name, bad)
        for cls, names in [
            (Hello, ["nonce"]),
            (Save, ["nonce", "echo"]),
            (Status, ["nonce", "echo"]),
            (Attach, ["nonce", "echo"]),
        ]
        for name in names
        for bad in BAD_NONCES
    ],
    # text
    (Hello, "app", ""),
    (Hello, "app", None),
    (Hello, "app", b"demo"),
    (Hello, "app", "a" * 4097),
    (Hello, "exe", None),
    (Hello, "exe", 5),
    (Hello, "exe", "e" * 4097),
    (ProgressReport, "note", "n" * 1025),
    (ProgressReport, "note", None),
    (Refused, "detail", "d" * 1025),
    (Refused, "detail", None),
    (StatusReply, "app", ""),
    (Save, "app", ""),
    (Save, "app", None),
    (Save, "app", "a" * 4097),
    (StatusReply, "mode", ""),
    (StatusReply, "mode", "m" * 17),
    (StatusReply, "mode", None),
    (Hello, "build", "b" * 129),
    (Hello, "fingerprint", None),
    (Attach, "app", ""),
    (Attach, "build", None),
    (Attach, "fingerprint", "f" * 129),
    # booleans
    (Hello, "shares", 1),
    (Hello, "shares", None),
    (StatusReply, "busy", 1),
    (StatusReply, "busy", 0),
    (StatusReply, "busy", None),
    (StatusReply, "busy", "false"),
    # enums: the raw wire string, an unknown value, another enum, None
    (Save, "intent", "succeed"),
    (Save, "intent", "abdicate"),
    (Save, "intent", Reason.AUTH),
    (Save, "intent", None),
    (Refused, "reason", "auth"),
    (Refused, "reason", "bored"),
    (Refused, "reason", Intent.STOP),
    (Refused, "reason", None),
    # handoff: not a dict, or not JSON
    (Saved, "handoff", []),
    (Saved, "handoff", "state"),
    (Saved, "handoff", 0),
    (Saved, "handoff", [("a", 1)]),
    (Saved, "handoff", {"a": float("nan")}),
    (Saved, "handoff", {"a": float("inf")}),
    (Saved, "handoff", {"a": [1, float("-inf")]}),
    (Saved, "handoff", {"a": object()}),
    (Saved, "handoff", {"a": b"bytes"}),
    (Saved, "handoff", {"a": {1, 2}}),
]


def _build(cls: type[Message], **overrides: Any) -> Message:
    return cls(**{**VALID[cls], **overrides})


def _param_id(value: Any) -> str:
    # Readable, and plain text: a bytes value's repr makes an id that pytest cannot
    # select again by node id (its backslashes are escaped once more).
    if isinstance(value, type):
        return value.__name__
    text = f"bytes{len(value)}" if isinstance(value, bytes) else repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def test_valid_table_covers_every_message_type() -> None:
    assert set(VALID) == set(MESSAGE_TYPES.values())
    assert {cls.TYPE: cls for cls in VALID} == MESSAGE_TYPES


@pytest.mark.parametrize("cls", list(VALID), ids=lambda c: c.TYPE)
def test_valid_construction(cls: type[Message]) -> None:
    message = _build(cls)
    for name, value in VALID[cls].items():
        assert getattr(message, name) == value
    assert cls.field_names() == frozenset(VALID[cls])


@pytest.mark.parametrize(("cls", "overrides"), VALID_EDGES, ids=_param_id)
def test_valid_edge_values(cls: type[Message], overrides: dict[str, Any]) -> None:
    message = _build(cls, **overrides)
    for name, value in overrides.items():
        assert getattr(message, name) == value


@pytest.mark.parametrize("cls", list(VALID), ids=lambda c: c.TYPE)
def test_messages_are_frozen(cls: type[Message]) -> None:
    message = _build(cls)
    for name in VALID[cls]:
        with pytest.raises(AttributeError, match="immutable"):
            setattr(message, name, VALID[cls][name])
        with pytest.raises(AttributeError, match="immutable"):
            delattr(message, name)


@pytest.mark.parametrize(("cls", "name", "bad"), INVALID, ids=_param_id)
def test_invalid_field_rejected_naming_it(cls: type[Message], name: str, bad: Any) -> None:
    with pytest.raises(LocalProtocolError) as info:
        _build(cls, **{name: bad})
    text = str(info.value)
    assert f"{cls.TYPE} field {name!r}" in text


def test_integer_error_says_what_it_got() -> None:
    with pytest.raises(LocalProtocolError, match=r"'pid' must be an integer, got bool"):
        _build(Hello, pid=True)
    with pytest.raises(LocalProtocolError, match=r"'pid' must be >= 1, got 0"):
        _build(Hello, pid=0)
    with pytest.raises(LocalProtocolError, match=r"'generation' must be >= 0, got -3"):
        _build(Hello, generation=-3)
    with pytest.raises(LocalProtocolError, match=r"'since_ms' must fit in 63 bits"):
        _build(Hello, since_ms=2**63)


def test_nonce_error_says_lowercase_hex() -> None:
    with pytest.raises(LocalProtocolError, match=r"'echo' must be 32 lowercase hex digits"):
        _build(Save, echo=NONCE_A.upper())


@given(
    st.text(alphabet=st.sampled_from("0123456789abcdefABCDEFgz \n\u0663"), min_size=30, max_size=34)
    | st.text(min_size=32, max_size=32)
    | st.binary(min_size=16, max_size=16).map(bytes.hex)
)
def test_a_nonce_is_exactly_thirty_two_lowercase_hex_digits(value: str) -> None:
    valid = re.fullmatch("[0-9a-f]{32}", value) is not None
    try:
        _build(Save, echo=value)
    except LocalProtocolError:
        assert not valid, value
    else:
        assert valid, value


def test_done_greater_than_total_names_done() -> None:
    with pytest.raises(LocalProtocolError) as info:
        ProgressReport(counter=1, done=3, total=2)
    assert str(info.value) == "PROGRESS field 'done' (3) exceeds total (2)"


def test_too_long_note_says_the_limit() -> None:
    with pytest.raises(LocalProtocolError, match=r"'note' is 1025 characters; the limit is 1024"):
        ProgressReport(counter=0, note="n" * 1025)


def test_unknown_enum_value_lists_the_valid_ones() -> None:
    with pytest.raises(LocalProtocolError) as info:
        _build(Save, intent="abdicate")
    assert "must be one of succeed, stop" in str(info.value)
    assert "'abdicate'" in str(info.value)


def test_progress_defaults() -> None:
    report = ProgressReport(counter=3)
    assert (report.done, report.total, report.note) == (None, None, "")


def _handoff_of_size(size: int, char: str = "x") -> dict[str, Any]:
    overhead = len(canonical_json({"a": ""}))
    width = len(char.encode("utf-8"))
    assert (size - overhead) % width == 0
    handoff = {"a": char * ((size - overhead) // width)}
    assert len(canonical_json(handoff)) == size
    return handoff


def test_handoff_of_exactly_64_kib_accepted() -> None:
    handoff = _handoff_of_size(MAX_HANDOFF_BYTES)
    assert MAX_HANDOFF_BYTES == 65536
    assert Saved(handoff=handoff, generation=0).handoff == handoff


def test_handoff_one_byte_over_64_kib_rejected() -> None:
    with pytest.raises(LocalProtocolError) as info:
        Saved(handoff=_handoff_of_size(MAX_HANDOFF_BYTES + 1), generation=0)
    text = str(info.value)
    assert "SAVED field 'handoff'" in text
    assert "65537 bytes" in text
    assert "limit is 65536" in text


def test_handoff_size_counts_utf8_bytes_not_characters() -> None:
    # 3-byte characters: far fewer than 65536 characters, but more than 65536 bytes.
    handoff = _handoff_of_size(MAX_HANDOFF_BYTES + 1, char="€")
    assert len(handoff["a"]) < MAX_HANDOFF_BYTES
    with pytest.raises(LocalProtocolError, match="'handoff'"):
        Saved(handoff=handoff, generation=0)


def test_handoff_nan_error_says_why() -> None:
    with pytest.raises(LocalProtocolError) as info:
        Saved(handoff={"ratio": float("nan")}, generation=0)
    assert "SAVED field 'handoff' is not JSON-serialisable" in str(info.value)


def test_handoff_with_non_string_key_rejected() -> None:
    # Regression: canonical_json promises to reject non-string keys, but
    # json.dumps silently turns 1 into "1", so this handoff is accepted and
    # does not survive the round trip (the peer receives {"1": "one"}).
    with pytest.raises(LocalProtocolError, match="'handoff'"):
        Saved(handoff={1: "one"}, generation=0)  # type: ignore[dict-item]


def test_handoff_with_lone_surrogate_rejected() -> None:
    # Regression: a lone surrogate passes json.dumps but fails the UTF-8
    # encode that canonical_json does outside its try block, so a
    # UnicodeEncodeError escapes instead of LocalProtocolError.
    with pytest.raises(LocalProtocolError, match="'handoff'"):
        Saved(handoff={"name": "\ud800"}, generation=0)


# -- to_fields / from_fields --------------------------------------------------------


@pytest.mark.parametrize("cls", list(VALID), ids=lambda c: c.TYPE)
def test_to_fields_from_fields_round_trip(cls: type[Message]) -> None:
    message = _build(cls)
    data = message.to_fields()
    assert set(data) == set(VALID[cls])
    for value in data.values():
        assert not isinstance(value, enum.Enum)  # enums travel as their string values
    assert canonical_json(data)  # JSON-ready
    again = cls.from_fields(data)
    assert type(again) is cls
    assert again == message


def test_to_fields_enum_values_are_strings() -> None:
    assert _build(Save).to_fields()["intent"] == "succeed"
    assert _build(Refused).to_fields()["reason"] == "mode"
    assert ProgressReport(counter=1).to_fields() == {
        "counter": 1,
        "done": None,
        "total": None,
        "note": "",
    }


@pytest.mark.parametrize(
    ("cls", "name"),
    [(cls, name) for cls, kwargs in VALID.items() for name in kwargs],
    ids=_param_id,
)
def test_from_fields_missing_field_named(cls: type[Message], name: str) -> None:
    data = _build(cls).to_fields()
    del data[name]
    with pytest.raises(LocalProtocolError) as info:
        cls.from_fields(data)
    assert str(info.value) == f"{cls.TYPE} is missing field {name!r}"


def test_from_fields_missing_optional_field_is_still_missing() -> None:
    # Defaults are a constructor convenience; the wire form must be complete.
    with pytest.raises(LocalProtocolError, match="PROGRESS is missing field 'note'"):
        ProgressReport.from_fields({"counter": 1, "done": None, "total": None})


@pytest.mark.parametrize("cls", list(VALID), ids=lambda c: c.TYPE)
@pytest.mark.parametrize("extra", ["zzz", "type", "seq", "v"])
def test_from_fields_unknown_field_named(cls: type[Message], extra: str) -> None:
    data = _build(cls).to_fields()
    data[extra] = 1
    with pytest.raises(LocalProtocolError) as info:
        cls.from_fields(data)
    assert str(info.value) == f"{cls.TYPE} has unknown field {extra!r}"


@pytest.mark.parametrize(
    ("cls", "name", "bad"),
    [
        (Save, "intent", "abdicate"),
        (Save, "intent", None),
        (Save, "intent", ["succeed"]),
        (Refused, "reason", "bored"),
        (Refused, "reason", "AUTH"),
        (Refused, "reason", 1),
    ],
    ids=_param_id,
)
def test_from_fields_bad_enum_value_named(cls: type[Message], name: str, bad: Any) -> None:
    data = _build(cls).to_fields()
    data[name] = bad
    with pytest.raises(LocalProtocolError) as info:
        cls.from_fields(data)
    assert f"{cls.TYPE} field {name!r} must be one of" in str(info.value)


def test_from_fields_validates_values() -> None:
    data = _build(Hello).to_fields()
    data["nonce"] = NONCE_A.upper()
    with pytest.raises(LocalProtocolError, match="HELLO field 'nonce'"):
        Hello.from_fields(data)


def test_from_fields_does_not_mutate_its_argument() -> None:
    data = _build(Save).to_fields()
    before = dict(data)
    Save.from_fields(data)
    assert data == before


def test_constructor_names_what_is_wrong_with_its_arguments() -> None:
    busy = Busy(7, 11)  # positional, in declaration order
    assert (busy.pid, busy.start_time) == (7, 11)
    assert busy == Busy(pid=7, start_time=11) and hash(busy) == hash(Busy(7, 11))
    assert busy != Busy(7, 12) and repr(busy) == "Busy(pid=7, start_time=11)"
    with pytest.raises(TypeError, match="Busy takes 2 fields, 3 were given"):
        Busy(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="Busy got field 'pid' twice"):
        Busy(1, pid=2)  # type: ignore[call-arg, misc]
    with pytest.raises(TypeError, match="Busy got field 'colour' that it does not have"):
        Busy(1, 2, colour="red")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="Busy is missing field 'start_time'"):
        Busy(1)  # type: ignore[call-arg]
    assert ProgressReport(3).note == ""  # a declared default
    assert Busy.FIELDS == ("pid", "start_time") and AckSuccession.FIELDS == ()
