"""Framing and payload encoding: bytes on the wire <-> messages.

A frame is a 4-byte big-endian length followed by that many bytes of body;
the body is the payload (canonical JSON) followed by a 32-byte HMAC-SHA256
tag (computed by :mod:`highlander._core.signing`).  The length is checked against
the cap as soon as its four bytes arrive, before any of the body is kept.

The payload is a JSON object: the message's fields plus three envelope keys,
``type`` (the wire name), ``v`` (protocol version) and ``seq`` (the frame's
sequence number in its direction).  Pure code: no I/O, no clock.
"""

from __future__ import annotations

import enum

from highlander._core.canonical import JSONRejected, canonical_json, parse_json
from highlander._core.errors import LocalProtocolError, Reason, RemoteProtocolError
from highlander._core.messages import MAX_HANDOFF_BYTES, MESSAGE_TYPES, PROTOCOL_VERSION, Message

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, Final

MAC_BYTES: Final = 32


class _Header:
    """The 4-byte big-endian length before each frame body (``struct``'s interface).

    Plain ``int`` conversions: importing ``struct`` costs a newcomer 0.4 ms.
    """

    size: Final = 4

    def pack(self, length: int) -> bytes:
        """The header of a ``length``-byte body."""
        return length.to_bytes(4, "big")

    def unpack_from(self, buffer: bytes | bytearray) -> tuple[int]:
        """The body length a buffer starting with a header announces."""
        return (int.from_bytes(buffer[:4], "big"),)


HEADER: Final = _Header()
#: The default frame cap: a full 64 KiB handoff plus 1 KiB for the envelope and MAC.
DEFAULT_MAX_FRAME: Final = MAX_HANDOFF_BYTES + 1024
_MIN_BODY: Final = len(b"{}") + MAC_BYTES
_ENVELOPE: Final = frozenset({"type", "v", "seq"})


class NeedData(enum.Enum):
    """Sentinel type: the decoder needs more bytes before it can go on."""

    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = NeedData.NEED_DATA


def encode_frame(body: bytes, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """Prefix ``body`` with its length; refuse a body larger than ``max_frame``."""
    if len(body) > max_frame:
        raise LocalProtocolError(
            f"frame body is {len(body)} bytes; the cap is {max_frame}: send less data"
        )
    return HEADER.pack(len(body)) + body


class FrameDecoder:
    """Incremental frame splitter: :meth:`feed` bytes, take bodies with :meth:`next_frame`.

    It never keeps more than one frame's worth of unread body beyond what the
    caller has fed: an announced length above the cap fails at once.
    """

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < _MIN_BODY:
            raise LocalProtocolError(f"max_frame must be >= {_MIN_BODY}, got {max_frame}")
        self.max_frame = max_frame
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Number of bytes received but not yet returned as frames."""
        return len(self._buffer)

    def take_rest(self) -> bytes:
        """Return and forget every byte buffered past the last frame (the unframed stream)."""
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest

    def feed(self, data: bytes) -> None:
        """Append received bytes; raise at once if the next frame's length is invalid."""
        self._buffer += data
        self._check_header()

    def _check_header(self) -> None:
        if len(self._buffer) < HEADER.size:
            return
        (length,) = HEADER.unpack_from(self._buffer)
        if length > self.max_frame:
            raise RemoteProtocolError(
                f"frame length {length} exceeds the cap of {self.max_frame} bytes"
            )
        if length < _MIN_BODY:
            raise RemoteProtocolError(
                f"frame length {length} is shorter than the minimum of {_MIN_BODY} bytes"
            )

    def next_frame(self) -> bytes | NeedData:
        """Return the next complete frame body, or :data:`NEED_DATA`.

        A bad length header raises only when its frame is next: the complete
        frames before it are returned first.
        """
        self._check_header()
        if len(self._buffer) < HEADER.size:
            return NEED_DATA
        (length,) = HEADER.unpack_from(self._buffer)
        end = HEADER.size + length
        if len(self._buffer) < end:
            return NEED_DATA
        body = bytes(self._buffer[HEADER.size : end])
        del self._buffer[:end]
        return body

    def describe_partial(self) -> str:
        """Describe what is buffered, for the error raised at end of stream."""
        if len(self._buffer) < HEADER.size:
            return f"{len(self._buffer)} of {HEADER.size} header bytes"
        (length,) = HEADER.unpack_from(self._buffer)
        return f"{len(self._buffer) - HEADER.size} of {length} body bytes"


def encode_payload(message: Message, seq: int) -> bytes:
    """Return the canonical JSON payload of ``message`` as frame ``seq``."""
    data: dict[str, Any] = message.to_fields()
    data.update(type=message.TYPE, v=PROTOCOL_VERSION, seq=seq)
    return canonical_json(data)


def split_body(body: bytes) -> tuple[bytes, bytes]:
    """Split a frame body into (payload, mac)."""
    return body[:-MAC_BYTES], body[-MAC_BYTES:]


def decode_payload(payload: bytes) -> tuple[int, Message]:
    """Parse a payload into ``(seq, message)``.

    Every defect raises :class:`RemoteProtocolError` naming it: not JSON, not
    an object, another protocol version (reason ``version``), unknown type,
    missing, unknown or mistyped field.
    """
    try:
        data = parse_json(payload)
    except JSONRejected as exc:
        raise RemoteProtocolError(f"malformed payload: {exc}") from exc
    if not isinstance(data, dict):
        raise RemoteProtocolError(f"payload must be a JSON object, got {type(data).__name__}")
    version = data.get("v")
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise RemoteProtocolError(
            f"peer speaks protocol version {version!r}; this Highlander speaks "
            f"{PROTOCOL_VERSION}: run the same Highlander version on both sides",
            reason=Reason.VERSION,
        )
    kind = data.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise RemoteProtocolError(f"unknown message type {kind!r}")
    seq = data.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < 2**63:
        raise RemoteProtocolError(f"{kind} has an invalid sequence number {seq!r}")
    fields = {key: value for key, value in data.items() if key not in _ENVELOPE}
    try:
        return seq, cls.from_fields(fields)
    except LocalProtocolError as exc:
        raise RemoteProtocolError(str(exc)) from None
    except TypeError as exc:  # pragma: no cover - from_fields checks names first
        raise RemoteProtocolError(f"{kind}: {exc}") from None
