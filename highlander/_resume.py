"""What a share-mode relay keeps of its client's session, to survive the holder going.

Pure and standard library only (the relay, :mod:`highlander._relay`, runs
with ``python -I -S`` and imports it by file; the holder's MCP integration,
:mod:`highlander.mcp`, imports it as ``highlander._resume``): a JSON codec
on ``_json``'s C scanner (``json`` would import ``re``: 1.2 MB of the
relay's ~9), and :class:`Setup`, the client's session setup, the server's
answer to ``initialize`` and the requests in flight, with the rules for
replaying it to a new server (docs/mcp.md, "When the holder goes").
"""

from __future__ import annotations

#: The session setup a restarted server replays (JSON, :meth:`Setup.dumps`).
RESUME = "HIGHLANDER_RESUME"
#: The id prefix of replayed requests, whose answers nobody but us sees.
PRIVATE = "highlander-resume-"
#: The JSON-RPC error a request in flight gets when the holder goes.
RESTARTED = (-32000, "server restarted: the project's server changed hands; send it again")
#: At most this many restarts within :data:`WINDOW` seconds; then the relay leaves.
MAX_RESTARTS = 5
WINDOW = 60.0
_LISTS = ("tools", "resources", "prompts")

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable


class _Strict:
    """The parser settings ``_json.make_scanner`` reads (those of ``json.loads``)."""

    strict = False
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name: str) -> float:
        return float(name.lower().replace("infinity", "inf"))


def _codec() -> tuple[Callable[[str, int], tuple[object, int]], Callable[[str], str]]:
    """``_json``'s C scanner and quoting; on another interpreter, the module, at its cost."""
    try:
        import _json  # noqa: PLC0415

        return _json.make_scanner(_Strict()), _json.encode_basestring_ascii  # type: ignore[arg-type]
    except (ImportError, AttributeError):
        import json  # noqa: PLC0415

        return json.JSONDecoder().raw_decode, json.dumps


_scan, _quote = _codec()


def parse(line: bytes) -> dict[str, object] | None:
    """One JSON-RPC line as a dict; ``None`` if it is not one (it passes through untouched)."""
    try:
        text = line.decode("utf-8")
        start = len(text) - len(text.lstrip())
        value, end = _scan(text, start)
    except Exception:  # any line we cannot read is passed on, never judged
        return None
    if not isinstance(value, dict) or text[end:].strip():
        return None
    return value


def dump(value: object) -> str:
    """``value`` (what :func:`parse` returns) as compact JSON."""
    if isinstance(value, str):
        return _quote(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        # As ``json`` writes them (and :func:`parse` reads them back).
        special = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
        return special.get(repr(value), repr(value))
    if isinstance(value, dict):
        return "{" + ",".join(f"{_quote(str(k))}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(dump(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")


def _key(ident: object) -> str:
    return dump(ident)  # 1 and "1" are different ids


def private(ident: object) -> bool:
    """Whether ``ident`` is the id of a replayed request (its answer is ours)."""
    return isinstance(ident, str) and ident.startswith(PRIVATE)


def error_line(ident: object, code: int, message: str) -> bytes:
    """A JSON-RPC error answer to request ``ident``, as a line."""
    body = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
    return dump(body).encode() + b"\n"


class Setup:
    """What the relay keeps of its client's session: setup, the server's answer, in flight."""

    def __init__(self, state: dict[str, object] | None = None) -> None:
        """Empty, or as :meth:`dumps` left it in a previous incarnation."""
        state = state or {}
        self.initialize: dict[str, object] | None = state.get("initialize")  # type: ignore[assignment]
        self.initialized = bool(state.get("initialized"))
        self.level: dict[str, object] | None = state.get("level")  # type: ignore[assignment]
        self.subscribed: dict[str, dict[str, object]] = dict(state.get("subscribed") or {})  # type: ignore[call-overload]
        #: The ``InitializeResult`` the client saw.
        self.result: dict[str, object] | None = state.get("result")  # type: ignore[assignment]
        self.restarts: list[float] = list(state.get("restarts") or [])  # type: ignore[call-overload]
        #: The client's requests the server has not answered: key -> id.
        self.pending: dict[str, object] = {}

    def dumps(self) -> str:
        """The state a restarted server needs (for :data:`RESUME`)."""
        return dump({
            "initialize": self.initialize, "initialized": self.initialized,
            "level": self.level, "subscribed": self.subscribed, "result": self.result,
            "restarts": self.restarts,
        })  # fmt: skip

    def from_client(self, message: dict[str, object]) -> None:
        """Note a message our client sent."""
        method, ident = message.get("method"), message.get("id")
        if not isinstance(method, str):
            return  # an answer to the server's request: nothing to keep
        if ident is not None:
            self.pending[_key(ident)] = ident
        params = message.get("params")
        uri = params.get("uri") if isinstance(params, dict) else None
        if method == "initialize":
            self.initialize, self.result = message, None
        elif method == "notifications/initialized":
            self.initialized = True
        elif method == "logging/setLevel":
            self.level = message
        elif method == "resources/subscribe" and isinstance(uri, str):
            self.subscribed[uri] = message
        elif method == "resources/unsubscribe" and isinstance(uri, str):
            self.subscribed.pop(uri, None)

    def from_server(self, message: dict[str, object]) -> None:
        """Note a message the server sent our client."""
        if "method" in message or "id" not in message:
            return  # a request or a notification to the client
        ident = message["id"]
        self.pending.pop(_key(ident), None)
        init = self.initialize
        if init is not None and init.get("id") == ident and isinstance(message.get("result"), dict):
            self.result = message["result"]  # type: ignore[assignment]

    def abandon(self) -> list[bytes]:
        """The error answers to every request in flight (they are never sent again)."""
        lines = [error_line(ident, *RESTARTED) for ident in self.pending.values()]
        self.pending.clear()
        return lines

    def replay(self) -> list[dict[str, object]]:
        """The setup to send a new server, requests under private ids, in the client's order."""
        sent: list[dict[str, object]] = []
        if self.initialize is None:
            return sent
        steps = [self.initialize]
        steps += [{"jsonrpc": "2.0", "method": "notifications/initialized"}] * self.initialized
        steps += [self.level] if self.level is not None else []
        steps += list(self.subscribed.values())
        for at, step in enumerate(steps):
            sent.append({**step, "id": f"{PRIVATE}{at}"} if "id" in step else step)
        return sent

    def answered(self, message: dict[str, object]) -> list[bytes] | None:
        """A server's answer to our replayed ``initialize``: what to tell the client.

        ``None``: the new server is not the one the client initialized with
        (another protocol version or other capabilities): leave.  Otherwise
        a ``list_changed`` notification for every list the server offers
        them for (its lists may differ from the old server's).
        """
        result = message.get("result")
        if message.get("id") != f"{PRIVATE}0" or self.result is None:
            return []  # not the initialize, or the client never saw an answer to compare
        if not isinstance(result, dict):
            return None
        for field in ("protocolVersion", "capabilities"):
            if result.get(field) != self.result.get(field):
                return None
        offered = result.get("capabilities") or {}
        notes = []
        for kind in _LISTS:
            entry = offered.get(kind) if isinstance(offered, dict) else None
            if isinstance(entry, dict) and entry.get("listChanged"):
                note = {"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"}
                notes.append(dump(note).encode() + b"\n")
        return notes

    def may_restart(self, now: float) -> bool:
        """Count a restart at ``now``; whether it is within :data:`MAX_RESTARTS` a window."""
        self.restarts = [t for t in self.restarts if now - t < WINDOW] + [now]
        return len(self.restarts) <= MAX_RESTARTS
