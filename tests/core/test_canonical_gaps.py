"""Canonical JSON rules no other test pinned (issue #19: mutants of them survived).

Each test names the mutation it catches: the key check reaching nested
objects and list elements, the exact depth cap, and the messages.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from highlander._core.canonical import JSONRejected, canonical_json, parse_json

#: The deepest nesting canonical_json accepts (the cap in _check_keys).
DEPTH_CAP = 256


def _nested_lists(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _nested_dicts(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({"a": {1: "x"}}, "1"),  # a nested object (mutant: the dict branch does not recurse)
        ([{2: "y"}], "2"),  # a list element (mutant: the list branch does not recurse)
        (({3: "z"},), "3"),  # a tuple element (mutant: tuples left unchecked)
        ({"a": [[{"b": {None: 1}}]]}, "None"),
    ],
)
def test_non_string_keys_are_rejected_at_any_depth(value: Any, key: str) -> None:
    # json.dumps would turn the key into a string silently: {"1": "x"}.
    with pytest.raises(
        JSONRejected, match=rf"^not JSON-serialisable: object key {key} is not a string$"
    ):
        canonical_json(value)


@pytest.mark.parametrize("nest", [_nested_lists, _nested_dicts])
def test_depth_cap_is_exactly_256_levels(nest: Any) -> None:
    # Catches `>=`, 257, starting at depth 1 and `depth - 1` in _check_keys.
    closing = b"]" if nest is _nested_lists else b"}"
    assert canonical_json(nest(DEPTH_CAP)).endswith(b"0" + closing * DEPTH_CAP)
    with pytest.raises(JSONRejected, match=r"^not JSON-serialisable: nested too deeply$"):
        canonical_json(nest(DEPTH_CAP + 1))


def test_a_deep_caller_stack_gets_json_rejected_not_recursion_error() -> None:
    # A caller already deep in its stack can hit the recursion limit inside the
    # 256 levels; that is the caller's value being too deep, not a crash.
    value = _nested_lists(200)
    limit = sys.getrecursionlimit()
    depth = len(_frames())
    sys.setrecursionlimit(depth + 100)
    try:
        with pytest.raises(JSONRejected, match=r"^not JSON-serialisable: "):
            canonical_json(value)
    finally:
        sys.setrecursionlimit(limit)


def _frames() -> list[object]:
    frames = []
    frame = sys._getframe()
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back  # type: ignore[assignment]
    return frames


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"NaN", "non-finite number NaN is not allowed"),
        (b"[-Infinity]", "non-finite number -Infinity is not allowed"),
        (b'"\xff"', "not UTF-8: invalid start byte at byte 1"),
        (b"1" + b"0" * 400 + b".5", "number 10000000000000000000 overflows a double"),
        (b'{"a":1,"a":2}', "duplicate key 'a'"),
    ],
)
def test_parse_errors_say_exactly_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(JSONRejected) as caught:
        parse_json(data)
    assert str(caught.value) == message
