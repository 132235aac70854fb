"""Dialling the holder: a non-blocking connect to the project's socket, and nothing else.

Apart from :mod:`highlander._shell.client` so that a newcomer can connect
the moment its claim found the project held, before it loads the protocol
core: the holder accepts and derives its key (importing cryptography) while
the newcomer imports the code it needs to answer, instead of after it.
"""

from __future__ import annotations

import errno
import socket

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._host.settings import Settings
    from highlander._shell.seam import Backend


class QueueFull(Exception):  # noqa: N818 - a condition the callers turn into their own answer
    """The holder's queue of pending connections is full: it is not accepting now."""


def unix_socket() -> socket.socket:
    """A non-blocking, close-on-exec Unix stream socket."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.setblocking(False)
    return sock


def connect(path: str) -> socket.socket | None:
    """Connect to the socket at ``path``; ``None`` if nobody listens there.

    Raises :class:`QueueFull` when the listener's backlog is full: a
    non-blocking connect to a Unix socket then fails at once (``EAGAIN``)
    and the socket stays unconnected; its ``SO_PEERCRED`` would name pid 0.
    """
    sock = unix_socket()
    try:
        sock.connect(path)
    except BlockingIOError:
        sock.close()
        raise QueueFull(path) from None
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
            return None
        raise
    return sock


def dial_early(settings: Settings, backend: Backend) -> tuple[socket.socket, int] | None:
    """A conversation with the holder opened early, and when (wall ms, before the connect).

    The holder accepts and derives its key while the newcomer imports the
    conversation's code.  ``None``: the first attempt opens its own and says
    what is wrong, if anything.  A backend whose newcomers take turns does
    not dial: it gives the conversation its claim opened, if any
    (:meth:`Backend.opened_early`).
    """
    import time  # noqa: PLC0415 - contended only

    if not backend.dials_early:
        # Its newcomers take turns first (etcd): only one its claim opened in turn.
        return backend.opened_early()
    when = int(time.time() * 1000)
    try:
        sock = backend.open(settings)
    except Exception:  # the attempt opens again and says what is wrong
        return None
    return None if sock is None else (sock, when)
