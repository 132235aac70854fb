"""The holder's listening socket: bound only under the lock, renamed into place.

A new listener binds at a private name in the runtime directory, then
``rename``s over the public path, so replacing a dead holder's stale socket
file is atomic and no path a live listener may own is ever unlinked (a live
listener implies a live lock, which the caller could not have taken).  A
successor adopts its predecessor's listener instead (``SCM_RIGHTS``).
A forked child closes its copy of every listener right after ``fork``
(``os.register_at_fork``): a worker of the holder must not keep the
socket listening (and unanswered) after the holder died.

Kept apart from :mod:`highlander._host.claim` because ``socket`` is the dearest
import on the claim path, and a process that finds the lock held (a
duplicate's verdict) never binds.  Every descriptor is close-on-exec.
"""

from __future__ import annotations

import contextlib
import os
import socket

from highlander._core.errors import ForeignHolderError
from highlander._core.values import Value
from highlander._host.files import lstat_problem, unsafe
from highlander._host.identity import peer_credentials, process_identity
from highlander._host.rendezvous import PRIVATE_TAG_CHARS, ProjectPaths

BACKLOG = 128


class Listener(Value):
    """The holder's listening socket and the identity of the file it is bound to."""

    sock: socket.socket
    path: str
    #: The public path's (device, inode) when it was ours; ``None`` if it was gone.
    file_id: tuple[int, int] | None

    @classmethod
    def bind(cls, paths: ProjectPaths, *, over_ours: bool = False) -> tuple[Listener, bool]:
        """Bind at a private name and rename over the public path (caller holds the lock).

        Returns the listener and whether a stale socket file was replaced.
        ``over_ours``: the live listener at the path is the caller's own
        (checked by inode), which this one replaces.
        """
        if not over_ours:
            _refuse_live_listener(paths.socket)
        # os.urandom rather than secrets: the same bytes, without secrets' imports.
        tmp = paths.private_socket(os.urandom(PRIVATE_TAG_CHARS // 2).hex())
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(tmp)
            os.chmod(tmp, 0o600)
            sock.listen(BACKLOG)
            stale = os.path.lexists(paths.socket)
            _rename_into_place(tmp, paths.socket)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        sock.setblocking(False)
        return cls(sock, paths.socket, _file_id(paths.socket)), stale

    @classmethod
    def adopt(cls, fd: int, paths: ProjectPaths) -> Listener | None:
        """Adopt a listening socket passed by the predecessor; ``None`` if it is not ours.

        It must be a listening Unix stream socket that was bound, under the
        lock, at one of this project's private names in the runtime directory.
        The credentials stay the predecessor's until :meth:`own`.
        """
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return None
        try:
            ok = (
                sock.family == socket.AF_UNIX
                and sock.type == socket.SOCK_STREAM
                and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
                and _bound_here(sock, paths)
            )
            if ok:
                sock.set_inheritable(False)
                sock.setblocking(False)
                try:
                    file_id: tuple[int, int] | None = _file_id(paths.socket)
                except FileNotFoundError:
                    file_id = None  # deleted by hand meanwhile: the successor rebinds
                return cls(sock, paths.socket, file_id)
        except OSError:
            pass
        sock.close()
        return None

    def own(self) -> None:
        """Put our credentials on the socket: SO_PEERCRED names us to clients from now on.

        Only after the handover committed: until then the socket is the
        incumbent's, and a newcomer's ``listen()`` would make every client
        take the still-serving incumbent for an impostor.
        """
        self.sock.listen(BACKLOG)

    def _validate(self) -> None:
        # Every way to make a listener (bind, adopt, _replace) ends here: the
        # fork handler must know them all.
        _open.add(self.sock)

    def close(self, *, unlink: bool) -> None:
        """Stop listening; with ``unlink``, remove the public path if it is still ours.

        Only a holder unlinks, and only while it still holds the lock, so the
        file it removes cannot belong to a live successor.  A listener a fork
        already closed (in the child) never unlinks: the path is the parent's.
        """
        _open.discard(self.sock)
        if unlink and self.file_id is not None and self.sock.fileno() >= 0:
            with contextlib.suppress(OSError):
                if _file_id(self.path) == self.file_id:
                    os.unlink(self.path)
        self.sock.close()


#: Listening sockets this process has open, for the fork handler below.
_open: set[socket.socket] = set()


def _close_in_child() -> None:
    """After ``fork``, in the child: close its copies of the listeners.

    The parent's sockets stay open and listening: its own descriptors still
    refer to them.
    """
    for sock in list(_open):
        with contextlib.suppress(OSError):
            sock.close()
    _open.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _rename_into_place(tmp: str, path: str) -> None:
    """Rename the bound socket over ``path``; one line naming it if that cannot be done.

    A rename replaces a stale socket, a FIFO, a regular file or a symlink
    without opening or following it; only a directory resists.
    """
    try:
        os.rename(tmp, path)
    except OSError:
        why = lstat_problem(path, want="a socket")
        if why is None:
            raise
        raise unsafe(path, why) from None


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_dev, st.st_ino


def _bound_here(sock: socket.socket, paths: ProjectPaths) -> bool:
    # getsockname() reports the private name bind() used, not the public one.
    name = sock.getsockname()
    bound = name.decode() if isinstance(name, bytes) else str(name)
    directory, base = os.path.split(bound)
    return directory == paths.runtime_dir and base.startswith(f".{paths.socket_stem}.")


def _refuse_live_listener(path: str) -> None:
    """Raise :class:`ForeignHolderError` if a live process listens at ``path``.

    Called under the lock: a Highlander holder would hold the lock, so a live
    listener here is some other program.  It is left alone (never signalled,
    its path never replaced).
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as probe:
        probe.setblocking(False)
        try:
            probe.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return  # nothing there, or a stale socket file: ours to replace
        except BlockingIOError:
            pass  # alive, with a full backlog
        except OSError:
            return  # not a socket at all: replacing the name is safe
        try:
            peer = peer_credentials(probe)
            who = process_identity(peer.pid)
            exe = who.exe if who else "unknown"
            detail = f"pid {peer.pid} ({exe}, uid {peer.uid})"
        except OSError:
            detail = "a process"
    raise ForeignHolderError(
        f"{detail} listens on {path} but does not hold the project's lock: it is not a "
        "Highlander holder. Highlander never signals it; stop it or point it elsewhere"
    )
