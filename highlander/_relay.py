"""The relay a share-mode newcomer becomes: its client's stdio to the holder's session and back.

Run as ``python -I -S -c "import _relay ..." FD REST`` (:func:`command`) by
:func:`highlander._shell.attaching.become_relay` (``exec``, so the client's
process stays the same): ``FD`` is the connection the holder answered
ATTACHED on, ``REST`` (hex) what was read past that frame.  Standard
library only and no site-packages, so the relay costs the memory of a bare
interpreter and none of the server's (``_json``'s C scanner, not ``json``,
which imports ``re``: 1.2 MB).

Lines pass unchanged both ways, whole (a line is forwarded once its newline
arrived, so a holder lost mid-line never leaves half a message on either
side).  The relay reads only what it needs to survive the holder going
(:class:`Setup`): its client's session setup (``initialize``,
``notifications/initialized``, the last ``logging/setLevel``, legacy
``resources/subscribe``), the server's answer to ``initialize``, and which
of its client's requests are in flight.

**When the holder goes** (an upgrade replaced it, a hung holder was ended,
or its own client left) while our client is still there, the relay answers
every request in flight with a JSON-RPC error (:data:`RESTARTED`; it never
sends one again: a tool call runs at most once) and starts its server again
in this same process (:data:`COMMAND`, set by ``become_relay``), with the
setup in :data:`RESUME`.  That server attaches to the successor, or becomes
the holder itself (promotion), and replays the setup under private ids
(:data:`PRIVATE`), swallowing the answers: the client never initializes
again.  If the new server answers ``initialize`` with another protocol
version or other capabilities, the relay leaves instead (its client sees
the server exit); if it offers list-changed notifications, the client is
told its lists may have changed.  At most :data:`MAX_RESTARTS` restarts in
:data:`WINDOW` seconds, then the relay leaves.

The client closing stdin ends our half of the session (``shutdown``); the
holder then ends it and the relay exits, or exits after :data:`LINGER`
seconds regardless.
"""

from __future__ import annotations

import _socket  # not socket: its enum and io imports cost the relay 1 MB of its ~9
import os
import select
import sys
import time

CHUNK = 65536
#: How long the holder has to end the session after the client closed stdin.
LINGER = 5.0
#: How the relay's server is started again: JSON ``{"argv": [...], "cwd": "..."}``.
COMMAND = "HIGHLANDER_RELAY_COMMAND"
#: The session setup a restarted server replays (JSON, :meth:`Setup.dumps`).
RESUME = "HIGHLANDER_RESUME"
#: The id prefix of replayed requests, whose answers nobody but us sees.
PRIVATE = "highlander-resume-"
#: The JSON-RPC error a request in flight gets when the holder goes.
RESTARTED = (-32000, "server restarted: the project's server changed hands; send it again")
#: At most this many restarts within :data:`WINDOW` seconds; then the relay leaves.
MAX_RESTARTS = 5
WINDOW = 60.0
#: How long a client's half-written line may take to end when the holder goes.
FINISH_LINE = 1.0
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


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd`` (blocking); ``False`` if the reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except OSError:  # EPIPE: our client is gone
            return False
    return True


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except OSError:  # a reset connection, a closed stdin: the same end
        return b""


def _lines(buffer: bytearray, data: bytes) -> list[bytes]:
    """Add ``data`` to ``buffer``; take out the whole lines (newline included)."""
    buffer += data
    end = buffer.rfind(b"\n") + 1
    if not end:
        return []
    whole = bytes(buffer[:end])
    del buffer[:end]
    return whole.splitlines(keepends=True)


class Relay:
    """One attached session: the client's stdio (fds 0 and 1) and the holder's connection."""

    def __init__(self, conn: _socket.socket, setup: Setup) -> None:
        """Relay between our stdio and ``conn``, keeping ``setup``."""
        self.conn = conn
        self.setup = setup
        self.client = bytearray()  # a line of the client's not ended yet
        self.server = bytearray()
        #: Whether our replayed setup is still being answered (then: compare).
        self.replaying = False

    def to_server(self, data: bytes) -> bool:
        """Forward our client's whole lines; ``False`` if the holder's side is gone."""
        lines = _lines(self.client, data)
        for line in lines:
            message = parse(line)
            if message is not None:
                self.setup.from_client(message)
        try:
            self.conn.sendall(b"".join(lines))
        except OSError:
            return False
        return True

    def to_client(self, data: bytes) -> bool | None:
        """Forward the server's whole lines; ``False``: our client is gone; ``None``: leave."""
        out = []
        for line in _lines(self.server, data):
            message = parse(line)
            if message is None:
                out.append(line)
            elif private(message.get("id")) and "method" not in message:
                told = self.setup.answered(message)
                if told is None:
                    return None  # another server than the one our client knows
                out.extend(told)
            else:
                self.setup.from_server(message)
                out.append(line)
        return _write_all(1, b"".join(out))

    def replay(self) -> bool:
        """Send the setup a restarted server needs; ``False`` if the holder is gone."""
        lines = [dump(step).encode() + b"\n" for step in self.setup.replay()]
        try:
            self.conn.sendall(b"".join(lines))
        except OSError:
            return False
        return True

    def run(self, rest: bytes) -> str:
        """Pump until the session ends: ``"done"`` (leave) or ``"lost"`` (the holder went)."""
        if rest and not self.to_client(rest):
            return "done"
        fd = self.conn.fileno()
        poller = select.poll()
        poller.register(0, select.POLLIN)
        poller.register(fd, select.POLLIN)
        deadline = None
        while True:
            left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            ready = poller.poll(left)
            if not ready:
                return "done"  # the holder kept a session its client had left: we go anyway
            for which, _ in ready:
                data = _read(which)
                if which == fd:
                    if not data:
                        return "done" if deadline is not None else "lost"
                    forwarded = self.to_client(data)
                    if not forwarded:
                        return "done"  # our client is gone, or a server it does not know
                elif data:
                    if not self.to_server(data):
                        return "lost"
                else:
                    poller.unregister(0)
                    try:
                        self.conn.shutdown(_socket.SHUT_WR)
                    except OSError:
                        return "done"
                    deadline = time.monotonic() + LINGER

    def finish_line(self) -> bool:
        """The holder went: read our client's half-written line to its end (bounded).

        Its requests count as in flight (answered with the error, never
        sent); ``False`` if the client left meanwhile.
        """
        until = time.monotonic() + FINISH_LINE
        while self.client and time.monotonic() < until:
            ready, _, _ = select.select([0], [], [], max(0.0, until - time.monotonic()))
            data = _read(0) if ready else b""
            if ready and not data:
                return False
            for line in _lines(self.client, data):
                message = parse(line)
                if message is not None:
                    self.setup.from_client(message)
        return not self.client


def restart(setup: Setup) -> int:
    """Start our server again in this process with ``setup`` to replay; the exit status if not."""
    command = parse(os.environ.get(COMMAND, "").encode())
    argv = command.get("argv") if command else None
    if not isinstance(argv, list) or not argv or not setup.may_restart(time.monotonic()):
        return 0  # nothing to start, or restarting in a loop: the client sees us leave
    env = {k: v for k, v in os.environ.items() if k != COMMAND}
    env[RESUME] = setup.dumps()
    try:
        os.chdir(str(command.get("cwd") or "."))  # type: ignore[union-attr]
        os.execve(argv[0], [str(a) for a in argv], env)  # noqa: S606 - our own server, again
    except OSError as exc:
        os.write(2, f"highlander relay: cannot start the server again: {exc}\n".encode())
    return 0


def command(fd: int, rest: bytes) -> list[str]:
    """How to run the relay on connection ``fd`` with ``rest``: a bare interpreter importing us.

    Imported, not run as a script: a script is compiled at every start
    (1.3 MB of the relay's memory); a module is read from its cached
    bytecode.  The directory is on ``sys.path`` only for that import.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    boot = (
        f"import sys; sys.path.insert(0, {here!r}); import _relay; del sys.path[0]; "
        "sys.exit(_relay.main(sys.argv))"
    )
    return [sys.executable, "-I", "-S", "-c", boot, str(fd), rest.hex()]


def main(argv: list[str]) -> int:
    """``_relay.py FD [REST]``: see the module docstring."""
    conn = _socket.socket(fileno=int(argv[1]))
    conn.setblocking(True)
    rest = bytes.fromhex(argv[2]) if len(argv) > 2 else b""
    resumed = parse(os.environ.get(RESUME, "").encode())
    relay = Relay(conn, Setup(resumed))
    if resumed is not None and not relay.replay():
        return restart(relay.setup)
    if relay.run(rest) == "done":
        return 0
    conn.close()
    if not relay.finish_line():
        return 0  # our client left too
    if not _write_all(1, b"".join(relay.setup.abandon())):
        return 0
    return restart(relay.setup)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
