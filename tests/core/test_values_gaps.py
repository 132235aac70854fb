"""Names, values and records of the core that mutation testing found unpinned (issue #19).

What users and the shell read: enum values shown in errors and events, the
errors' reasons, the hints that name the fix; and the record types' rules.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from highlander._core.commit import Answer
from highlander._core.deadlines import Deadline, Phase
from highlander._core.errors import (
    AuthenticationError,
    ModeRefusedError,
    OtherAppError,
    ProtocolError,
    Reason,
    SaveFailedError,
    SuccessionRefused,
    ThrashError,
    UnsafeFileError,
    UnsafeRuntimeDirError,
    VersionMismatchError,
)
from highlander._core.messages import MAX_HANDOFF_BYTES, Hello, Refused, Saved, StatusReply
from highlander._core.pair import Transmission
from highlander._core.state import Role, State
from highlander._core.values import Value


def test_states_are_shown_by_their_names() -> None:
    # Errors say "in state AWAIT_HELLO"; docs/protocol.md uses the same names.
    assert {state.value for state in State} == {state.name for state in State}
    assert all(state.value == state.name for state in State)


def test_answers_are_shown_by_their_documented_names() -> None:
    # The newcomer's abort says why with the answer's value (highlander/_handover.py).
    assert [answer.value for answer in Answer] == ["refused", "closed", "send_failed", "silent"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (AuthenticationError, Reason.AUTH),
        (VersionMismatchError, Reason.VERSION),
        (ModeRefusedError, Reason.MODE),
        (ThrashError, Reason.THRASH),
        (OtherAppError, Reason.OTHER_APP),
        (SaveFailedError, Reason.INTERNAL),
    ],
)
def test_each_refusal_carries_its_reason_and_message(error: Any, reason: Reason) -> None:
    refused = error("the message")
    assert isinstance(refused, SuccessionRefused)
    assert (refused.reason, str(refused)) == (reason, "the message")


def test_error_details_are_kept() -> None:
    assert str(ProtocolError("what")) == "what"
    assert ProtocolError("what").reason is Reason.INTERNAL
    plain = UnsafeRuntimeDirError("a symlink")
    assert (str(plain), plain.squatted) == ("a symlink", False)
    assert UnsafeRuntimeDirError("x", squatted=True).squatted is True
    planted = UnsafeFileError("a FIFO", path="/run/x.lock")
    assert (str(planted), planted.path, planted.squatted) == ("a FIFO", "/run/x.lock", False)


def test_a_handoff_too_large_is_told_to_hand_over_a_path() -> None:
    with pytest.raises(Exception, match=r"hand over a path to a file instead of the data$"):
        Saved(handoff={"a": "x" * MAX_HANDOFF_BYTES}, generation=0)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Hello(**{**_HELLO, "app": 5}), "HELLO field 'app' must be a string, got int"),
        (lambda: Hello(**{**_HELLO, "app": ""}), "HELLO field 'app' must not be empty"),
        (
            lambda: Hello(**{**_HELLO, "app": "a\ud800"}),
            "HELLO field 'app' is not valid Unicode (lone surrogate)",
        ),
        (
            lambda: StatusReply("a", 1, 0, "m", 0, busy=1),
            "STATUS_REPLY field 'busy' must be a boolean, got int",
        ),
        (lambda: StatusReply("a", 1, 0, "m" * 17, 0, busy=True), "STATUS_REPLY field 'mode' is 17"),
        (lambda: Refused(reason="late"), "REFUSED field 'reason' must be one of auth, version"),
    ],
)
def test_field_errors_say_what_is_wrong(build: Any, message: str) -> None:
    with pytest.raises(Exception) as info:
        build()
    assert str(info.value).startswith(message)


_HELLO: dict[str, Any] = {
    "pid": 1,
    "start_time": 0,
    "exe": "",
    "app": "a",
    "generation": 0,
    "since_ms": 0,
    "nonce": "ab" * 16,
}


def test_a_refused_detail_defaults_to_empty() -> None:
    assert Refused(reason=Reason.LATE).detail == ""
    assert Refused(reason=Reason.LATE).to_fields() == {"reason": "late", "detail": ""}


def test_values_of_different_types_are_never_equal() -> None:
    deadline = Deadline(Phase.HELLO, 1.0)
    assert (deadline == 1.0) is False
    assert deadline.__eq__(Deadline(Phase.HELLO, 1.0)) is True
    assert deadline.__eq__(("hello", 1.0)) is NotImplemented


class _Point(Value):
    x: int
    y: int = 2


class _Point3(_Point):
    z: int = 3


class _Moved(_Point):
    x: int = 5  # a field declared again moves to the end, with its new default


class _Tagged(Value):
    KIND: typing.ClassVar[str] = "tagged"  # spelt typing.ClassVar: still not a field
    x: int


def test_value_records_build_replace_and_inherit_fields() -> None:
    assert _Point.FIELDS == ("x", "y")
    assert _Point3.FIELDS == ("x", "y", "z")
    assert _Point3(1)._asdict() == {"x": 1, "y": 2, "z": 3}
    assert (_Moved.FIELDS, _Moved()._asdict()) == (("y", "x"), {"y": 2, "x": 5})
    assert _Tagged.FIELDS == ("x",)
    assert _Point3(1)._replace(z=9) == _Point3(1, 2, 9)
    assert _Point3(1)._replace(y=0)._asdict() == {"x": 1, "y": 0, "z": 3}
    assert repr(_Point(1)) == "_Point(x=1, y=2)"
    with pytest.raises(TypeError, match=r"^_Point is missing field 'x'$"):
        _Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^_Point got field 'x' twice$"):
        _Point(1, x=1)  # type: ignore[misc]
    with pytest.raises(TypeError, match=r"^_Point got field 'w' that it does not have$"):
        _Point(1, w=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^_Point takes 2 fields, 3 were given$"):
        _Point(1, 2, 3)  # type: ignore[call-arg]


def test_a_transmission_is_a_frozen_record() -> None:
    sent = Transmission(Role.NEWCOMER, Refused(reason=Reason.LATE), 10, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sent.size = 11  # type: ignore[misc]
    assert not hasattr(sent, "__dict__")  # slots: one per frame of a long conversation
