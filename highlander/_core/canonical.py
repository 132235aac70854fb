"""Canonical JSON: the one byte encoding of message payloads and handoffs.

Keys sorted, no whitespace, UTF-8, no NaN or infinities.  Parsing is strict:
duplicate keys and non-finite numbers are rejected, so one payload has one
meaning.  Pure code.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any


class JSONRejected(ValueError):  # noqa: N818 - internal, never escapes the codec
    """The bytes are not strict JSON; the message says why."""


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as canonical JSON bytes.

    Raises :class:`JSONRejected` for values JSON cannot carry (non-finite
    floats, non-string keys, arbitrary objects, nesting too deep).
    """
    try:
        _check_keys(value)
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        # UnicodeEncodeError (a lone surrogate) is a ValueError too.
        raise JSONRejected(f"not JSON-serialisable: {exc}") from exc


def _check_keys(value: Any, depth: int = 0) -> None:
    """Refuse non-string keys: json.dumps would silently turn ``{1: x}`` into ``{"1": x}``."""
    if depth > 256:
        raise JSONRejected("nested too deeply")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise JSONRejected(f"object key {key!r} is not a string")
            _check_keys(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_keys(item, depth + 1)


def _reject_constant(name: str) -> Any:
    raise JSONRejected(f"non-finite number {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JSONRejected(f"number {text[:20]} overflows a double")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise JSONRejected(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(data: bytes) -> Any:
    """Parse strict JSON bytes; raise :class:`JSONRejected` with the cause."""
    try:
        text = data.decode("utf-8")
        return json.loads(
            text,
            object_pairs_hook=_no_duplicates,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except JSONRejected:
        raise
    except UnicodeDecodeError as exc:
        raise JSONRejected(f"not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except RecursionError as exc:
        raise JSONRejected("nested too deeply") from exc
    except ValueError as exc:
        raise JSONRejected(str(exc)) from exc
