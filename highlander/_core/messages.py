"""The protocol's messages: immutable records, validated at construction.

A message that exists is valid: every constructor checks its fields and
raises :class:`LocalProtocolError` naming the field.  The codec turns the
same failure in a received message into a :class:`RemoteProtocolError`.

Wire form (see docs/protocol.md): each message is a JSON object whose fields
are exactly the class's fields, plus the envelope keys added by the codec.

Messages are :class:`~highlander._core.values.Value` records rather than
dataclasses: a newcomer imports this module on its critical path, and
``dataclasses`` (with the ``inspect`` it loads) plus ten generated classes
cost it about 9 ms.
Enums travel as their string values; optional fields travel as ``null``.
Pure code: no I/O, no clock.
"""

from __future__ import annotations

import enum

from highlander._core.canonical import JSONRejected, canonical_json
from highlander._core.errors import LocalProtocolError, Reason
from highlander._core.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, ClassVar

PROTOCOL_VERSION = 1
NONCE_BYTES = 16
MAX_HANDOFF_BYTES = 64 * 1024
MAX_TEXT = 4096
MAX_NOTE = 1024
MAX_BUILD = 128
#: A nonce's digits.  Checked with ``str.strip``, not a regular expression:
#: compiling one costs a newcomer 0.13 ms on its critical path.
_HEX_DIGITS = "0123456789abcdef"


class Intent(enum.StrEnum):
    """What a SAVE asks for: hand over and leave (``succeed``) or just leave."""

    SUCCEED = "succeed"
    STOP = "stop"


def _fail(message: type[Message], name: str, problem: str) -> LocalProtocolError:
    return LocalProtocolError(f"{message.TYPE} field {name!r} {problem}")


def _int(message: Message, name: str, *, minimum: int = 0, optional: bool = False) -> None:
    value = getattr(message, name)
    if value is None and optional:
        return
    # bool is an int subclass; a true/false on the wire is a mistyped field.
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(type(message), name, f"must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise _fail(type(message), name, f"must be >= {minimum}, got {value}")
    if value >= 2**63:
        raise _fail(type(message), name, "must fit in 63 bits")


def _text(message: Message, name: str, *, limit: int = MAX_TEXT, empty: bool = False) -> None:
    value = getattr(message, name)
    if not isinstance(value, str):
        raise _fail(type(message), name, f"must be a string, got {type(value).__name__}")
    if not value and not empty:
        raise _fail(type(message), name, "must not be empty")
    if len(value) > limit:
        raise _fail(type(message), name, f"is {len(value)} characters; the limit is {limit}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _fail(type(message), name, "is not valid Unicode (lone surrogate)") from None


def _bool(message: Message, name: str) -> None:
    value = getattr(message, name)
    if not isinstance(value, bool):
        raise _fail(type(message), name, f"must be a boolean, got {type(value).__name__}")


def _nonce(message: Message, name: str) -> None:
    value = getattr(message, name)
    if not isinstance(value, str) or len(value) != 2 * NONCE_BYTES or value.strip(_HEX_DIGITS):
        raise _fail(type(message), name, f"must be {2 * NONCE_BYTES} lowercase hex digits")


def _enum(message: Message, name: str, kind: type[enum.Enum]) -> None:
    value = getattr(message, name)
    if not isinstance(value, kind):
        valid = ", ".join(str(member.value) for member in kind)
        raise _fail(type(message), name, f"must be one of {valid}, got {value!r}")


class Message(Value):
    """Base of all protocol messages.

    ``TYPE`` is the wire name; :data:`MESSAGE_TYPES` maps it back to the
    class.  A subclass declares its fields as annotations (a value is the
    default) and checks them in ``_validate`` (see :mod:`highlander._core.values`).
    """

    TYPE: ClassVar[str]
    ENUMS: ClassVar[dict[str, type[enum.Enum]]] = {}

    def to_fields(self) -> dict[str, Any]:
        """Return the message's fields as JSON-ready values (enums as strings)."""
        out: dict[str, Any] = {}
        for field in self.FIELDS:
            value = getattr(self, field)
            out[field] = value.value if isinstance(value, enum.Enum) else value
        return out

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """Return the names of the fields this message carries on the wire."""
        return frozenset(cls.FIELDS)

    @classmethod
    def from_fields(cls, data: dict[str, Any]) -> Message:
        """Build the message from wire fields; raise :class:`LocalProtocolError` if invalid.

        The field set must match exactly: a missing or an unknown field is an
        error that names it.
        """
        expected = cls.field_names()
        missing = sorted(expected - data.keys())
        if missing:
            raise LocalProtocolError(f"{cls.TYPE} is missing field {missing[0]!r}")
        unknown = sorted(data.keys() - expected)
        if unknown:
            raise LocalProtocolError(f"{cls.TYPE} has unknown field {unknown[0]!r}")
        values = dict(data)
        for name, kind in cls.ENUMS.items():
            try:
                values[name] = kind(values[name])
            except ValueError:
                valid = ", ".join(str(member.value) for member in kind)
                raise LocalProtocolError(
                    f"{cls.TYPE} field {name!r} must be one of {valid}, got {values[name]!r}"
                ) from None
        return cls(**values)


class Hello(Message):
    """The incumbent's identity claim, sent first on every connection.

    The newcomer checks every field against what the kernel says about the
    peer before it sends anything else.
    """

    TYPE: ClassVar[str] = "HELLO"
    pid: int
    start_time: int
    exe: str
    app: str
    generation: int
    since_ms: int
    nonce: str
    #: The holder's build and configuration fingerprint (:mod:`highlander._core.sharing`).
    build: str = ""
    fingerprint: str = ""
    #: Whether it serves attached sessions (ATTACH can succeed).
    shares: bool = False

    def _validate(self) -> None:
        _int(self, "pid", minimum=1)
        _int(self, "start_time")
        _text(self, "exe", empty=True)
        _text(self, "app")
        _int(self, "generation")
        _int(self, "since_ms")
        _nonce(self, "nonce")
        _text(self, "build", limit=MAX_BUILD, empty=True)
        _text(self, "fingerprint", limit=MAX_BUILD, empty=True)
        _bool(self, "shares")


class Save(Message):
    """The newcomer asks the incumbent to save and leave.

    ``echo`` repeats the incumbent's HELLO nonce; ``nonce`` is the newcomer's
    own, so every later frame is bound to both.  ``app`` is the newcomer's
    app, whole: an incumbent of another app refuses (``other_app``), so a
    handoff only ever goes to the same app.
    """

    TYPE: ClassVar[str] = "SAVE"
    ENUMS: ClassVar[dict[str, type[enum.Enum]]] = {"intent": Intent}
    pid: int
    start_time: int
    nonce: str
    echo: str
    intent: Intent
    app: str

    def _validate(self) -> None:
        _int(self, "pid", minimum=1)
        _int(self, "start_time")
        _nonce(self, "nonce")
        _nonce(self, "echo")
        _enum(self, "intent", Intent)
        _text(self, "app")


class Attach(Message):
    """The newcomer asks to be served as one more session of the holder's server.

    Sent instead of SAVE when the holder shares (HELLO ``shares``) and runs
    the same configuration (``fingerprint``) and a build not older than the
    newcomer's (``build``): the holder checks all three again.  After
    ATTACHED the connection carries the client's JSON-RPC, unframed.
    ``echo`` and ``nonce`` bind it to this conversation, as SAVE's do.
    """

    TYPE: ClassVar[str] = "ATTACH"
    pid: int
    start_time: int
    nonce: str
    echo: str
    app: str
    build: str
    fingerprint: str

    def _validate(self) -> None:
        _int(self, "pid", minimum=1)
        _int(self, "start_time")
        _nonce(self, "nonce")
        _nonce(self, "echo")
        _text(self, "app")
        _text(self, "build", limit=MAX_BUILD, empty=True)
        _text(self, "fingerprint", limit=MAX_BUILD, empty=True)


class Attached(Message):
    """The holder serves the newcomer's client from now on, on this connection.

    ``generation`` is the reign that serves it; ``sessions`` counts the
    attached sessions it serves now, this one included.  The last frame of
    the conversation: what follows on the stream is JSON-RPC.
    """

    TYPE: ClassVar[str] = "ATTACHED"
    generation: int
    sessions: int

    def _validate(self) -> None:
        _int(self, "generation")
        _int(self, "sessions", minimum=1)


class ProgressReport(Message):
    """The incumbent's save is moving: ``counter`` grows with every step.

    Only a counter that advances extends the newcomer's watchdog.  ``done``
    and ``total`` are optional units of work; ``note`` is for humans.
    """

    TYPE: ClassVar[str] = "PROGRESS"
    counter: int
    done: int | None = None
    total: int | None = None
    note: str = ""

    def _validate(self) -> None:
        _int(self, "counter")
        _int(self, "done", optional=True)
        _int(self, "total", optional=True)
        _text(self, "note", limit=MAX_NOTE, empty=True)
        if self.done is not None and self.total is not None and self.done > self.total:
            raise _fail(type(self), "done", f"({self.done}) exceeds total ({self.total})")


class Saved(Message):
    """The incumbent's state is safe; ``handoff`` is what the newcomer inherits.

    ``handoff`` is a JSON object of at most 64 KiB (canonical encoding) or
    ``None``; ``generation`` is the reign that ends.
    """

    TYPE: ClassVar[str] = "SAVED"
    handoff: dict[str, Any] | None
    generation: int

    def _validate(self) -> None:
        _int(self, "generation")
        if self.handoff is None:
            return
        if not isinstance(self.handoff, dict):
            raise _fail(type(self), "handoff", "must be a JSON object (dict) or None")
        try:
            size = len(canonical_json(self.handoff))
        except JSONRejected as exc:
            raise _fail(type(self), "handoff", f"is {exc}") from exc
        if size > MAX_HANDOFF_BYTES:
            raise _fail(
                type(self),
                "handoff",
                f"is {size} bytes as JSON; the limit is {MAX_HANDOFF_BYTES}: "
                "hand over a path to a file instead of the data",
            )


class AckSuccession(Message):
    """The newcomer has the handoff: the incumbent may now leave."""

    TYPE: ClassVar[str] = "ACK_SUCCESSION"


class Busy(Message):
    """A succession is already running, for the newcomer named here.

    The receiver retries against whoever holds the project next.
    """

    TYPE: ClassVar[str] = "BUSY"
    pid: int
    start_time: int

    def _validate(self) -> None:
        _int(self, "pid", minimum=1)
        _int(self, "start_time")


class Refused(Message):
    """The incumbent will not serve the request, for a fixed ``reason``."""

    TYPE: ClassVar[str] = "REFUSED"
    ENUMS: ClassVar[dict[str, type[enum.Enum]]] = {"reason": Reason}
    reason: Reason
    detail: str = ""

    def _validate(self) -> None:
        _enum(self, "reason", Reason)
        _text(self, "detail", limit=MAX_NOTE, empty=True)


class Status(Message):
    """A read-only query: who holds the project and how it is doing."""

    TYPE: ClassVar[str] = "STATUS"
    nonce: str
    echo: str

    def _validate(self) -> None:
        _nonce(self, "nonce")
        _nonce(self, "echo")


class StatusReply(Message):
    """The holder's answer to STATUS; changes nothing."""

    TYPE: ClassVar[str] = "STATUS_REPLY"
    app: str
    pid: int
    generation: int
    mode: str
    since_ms: int
    busy: bool

    def _validate(self) -> None:
        _text(self, "app")
        _int(self, "pid", minimum=1)
        _int(self, "generation")
        _text(self, "mode", limit=16)
        _int(self, "since_ms")
        _bool(self, "busy")


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Save,
        Attach,
        Attached,
        ProgressReport,
        Saved,
        AckSuccession,
        Busy,
        Refused,
        Status,
        StatusReply,
    )
}
