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
:data:`WINDOW` seconds, then the relay leaves.  A holder that stays stopped
(SIGSTOP) while our client waits on it counts as gone (:class:`Stopped`).

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
#: The longest line the relay holds while it waits for its end (a line that long is
#: not JSON-RPC anyone serves): past it, the relay leaves instead of growing.
MAX_LINE = 64 * 1024 * 1024
#: How long the holder has to end the session after the client closed stdin.
LINGER = 5.0
#: How the relay's server is started again: JSON ``{"argv": [...], "cwd": "..."}``.
COMMAND = "HIGHLANDER_RELAY_COMMAND"
#: How long a client's half-written line may take to end when the holder goes.
FINISH_LINE = 1.0
#: How long a holder our client waits on may stay stopped before we treat it as gone
#: (a newcomer's ``hello`` timeout), and how often we look while a request waits.
STOPPED_FOR = 2.0
LOOK_EVERY = 0.5

if __package__:  # imported as highlander._relay (the holder, the newcomer, tests)
    from highlander._resume import RESTARTED, RESUME, Setup, dump, parse, private
else:  # the relay process: highlander's directory is on sys.path (command())
    from _resume import RESTARTED, RESUME, Setup, dump, parse, private  # type: ignore[import-not-found,no-redef]

__all__ = ["RESTARTED", "RESUME", "Relay", "Setup", "command", "main"]


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


class Stopped:
    """Whether the holder (``pid``) has been stopped (SIGSTOP, a debugger) for too long.

    A stopped holder answers nobody until a newcomer ends it; if our client
    waits on it, the relay does not wait for that newcomer: it treats the
    holder as gone, and the server it starts again is that newcomer (the
    verified kill, then the project).  A busy holder is never stopped.
    """

    def __init__(self, pid: int) -> None:
        """Watch ``pid`` (0: nobody to watch)."""
        self.pid = pid
        self.since: float | None = None

    def state(self) -> str:
        """The holder's state letter in ``/proc`` (``""`` if it cannot be read)."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                return stat.read().rsplit(b")", 1)[1].split()[0].decode()
        except (OSError, IndexError):
            return ""

    def stopped(self, now: float) -> bool:
        """Whether it has been stopped for :data:`STOPPED_FOR` seconds, looking at ``now``."""
        if self.pid <= 0 or self.state() not in ("T", "t"):
            self.since = None
            return False
        self.since = now if self.since is None else self.since
        return now - self.since >= STOPPED_FOR

    def reset(self) -> None:
        """It answered: whatever it was, it is not stopped now."""
        self.since = None


class Relay:
    """One attached session: the client's stdio (fds 0 and 1) and the holder's connection."""

    def __init__(self, conn: _socket.socket, setup: Setup, holder: int = 0) -> None:
        """Relay between our stdio and ``conn`` to ``holder``'s server, keeping ``setup``."""
        self.conn = conn
        self.setup = setup
        self.watch = Stopped(holder)
        #: When we stop waiting for the holder to end a session our client left.
        self.deadline: float | None = None
        self.client = bytearray()  # a line of the client's not ended yet
        self.server = bytearray()

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
        self.deadline = None
        while True:
            if self.deadline is not None:
                left: int | None = max(0, int((self.deadline - time.monotonic()) * 1000))
            else:
                left = int(LOOK_EVERY * 1000) if self.setup.pending else None
            ready = poller.poll(left)
            if not ready and self.deadline is not None:
                return "done"  # the holder kept a session its client had left: we go anyway
            if not ready:
                if self.watch.stopped(time.monotonic()):
                    return "lost"  # our client waits on a holder that is stopped
                continue
            self.watch.reset()
            for which, _ in ready:
                ended = self._moved(which, fd, poller)
                if ended is not None:
                    return ended

    def _moved(self, which: int, fd: int, poller: select.poll) -> str | None:
        """Move what ``which`` has; how the session ended, ``None`` while it goes on."""
        data = _read(which)
        if which == fd:
            if not data:
                return "done" if self.deadline is not None else "lost"
            # False: our client is gone; None: a server it does not know.
            return None if self.to_client(data) and len(self.server) <= MAX_LINE else "done"
        if data:
            if len(self.client) > MAX_LINE:
                return "done"  # a line no server reads (highlander.mcp.MAX_LINE): we leave
            return None if self.to_server(data) else "lost"
        poller.unregister(0)  # our client closed stdin: we close our half, and linger
        try:
            self.conn.shutdown(_socket.SHUT_WR)
        except OSError:
            return "done"
        self.deadline = time.monotonic() + LINGER
        return None

    def finish_line(self) -> bool:
        """The holder went: read our client's half-written line to its end (bounded).

        Its requests count as in flight (answered with the error, never
        sent); ``False`` if the client left meanwhile, or had already.
        """
        until = time.monotonic() + FINISH_LINE
        while time.monotonic() < until:
            # A half-written line is waited for; otherwise only what is there is read,
            # so a client that left as the holder went (its end already in our stdin)
            # has no server started again for it.
            wait = max(0.0, until - time.monotonic()) if self.client else 0.0
            ready, _, _ = select.select([0], [], [], wait)
            if not ready:
                break
            data = _read(0)
            if not data:
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


def command(fd: int, rest: bytes, holder: int = 0) -> list[str]:
    """How to run the relay on ``fd`` to ``holder`` with ``rest``: a bare interpreter importing us.

    Imported, not run as a script: a script is compiled at every start
    (1.3 MB of the relay's memory); a module is read from its cached
    bytecode.  The directory is on ``sys.path`` only for that import.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    boot = (
        f"import sys; sys.path.insert(0, {here!r}); import _relay; del sys.path[0]; "
        "sys.exit(_relay.main(sys.argv))"
    )
    return [sys.executable, "-I", "-S", "-c", boot, str(fd), rest.hex(), str(holder)]


def main(argv: list[str]) -> int:
    """``_relay.py FD [REST [HOLDER]]``: see the module docstring."""
    conn = _socket.socket(fileno=int(argv[1]))
    conn.setblocking(True)
    rest = bytes.fromhex(argv[2]) if len(argv) > 2 else b""
    holder = int(argv[3]) if len(argv) > 3 else 0
    resumed = parse(os.environ.get(RESUME, "").encode())
    relay = Relay(conn, Setup(resumed), holder)
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
