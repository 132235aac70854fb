"""The relay a share-mode newcomer becomes: its client's stdio to the holder's session and back.

Run as ``python -I -S _relay.py FD REST`` by
:func:`highlander._shell.attaching.become_relay` (``exec``, so the client's
process stays the same): ``FD`` is the connection the holder answered
ATTACHED on, ``REST`` (hex) what was read past that frame.  Standard
library only and no site-packages, so the relay costs the memory of a bare
interpreter and none of the server's.

Bytes pass unchanged both ways.  The client closing stdin ends our half of
the session (``shutdown``); the holder then ends it and the relay exits,
or exits after :data:`LINGER` seconds regardless.  The holder ending the
session first closes stdout: the client sees its server leave.
"""

import _socket  # not socket: its enum and io imports cost the relay 1 MB of its ~9
import os
import select
import sys
import time

CHUNK = 65536
#: How long the holder has to end the session after the client closed stdin.
LINGER = 5.0


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data`` to ``fd`` (blocking); ``False`` if the reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return False
    return True


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, CHUNK)
    except OSError:  # a reset connection, a closed stdin: the same end
        return b""


def relay(conn: _socket.socket, rest: bytes) -> int:
    """Pump stdin to ``conn`` and ``conn`` to stdout until the session ends; the exit status."""
    if rest and not _write_all(1, rest):
        return 0
    fd = conn.fileno()
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(fd, select.POLLIN)
    deadline = None
    while True:
        left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
        ready = poller.poll(left)
        if not ready:
            return 0  # the holder kept a session its client had left: we go anyway
        for which, _ in ready:
            data = _read(which)
            if which == fd:
                if not data or not _write_all(1, data):
                    return 0  # the holder ended the session, or our client is gone
            elif data:
                try:
                    conn.sendall(data)
                except OSError:
                    return 0
            else:
                poller.unregister(0)
                try:
                    conn.shutdown(_socket.SHUT_WR)
                except OSError:
                    return 0
                deadline = time.monotonic() + LINGER


def main(argv: list[str]) -> int:
    """``_relay.py FD [REST]``: see the module docstring."""
    conn = _socket.socket(fileno=int(argv[1]))
    conn.setblocking(True)
    rest = bytes.fromhex(argv[2]) if len(argv) > 2 else b""
    return relay(conn, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
