"""Holding a project: a kernel-released lock and a socket that only the holder binds.

**Liveness** is an exclusive ``flock`` on ``<name>.lock``, taken for the
holder's whole life.  The kernel drops it when the last descriptor of that
open file goes away, so a SIGKILLed holder never leaves a lock behind, and no
pid or mtime is ever consulted.  The lock file is never unlinked (unlinking
a lock file is what lets two processes lock two different files).

**The socket** is bound only under the lock, at a private temporary name,
then ``rename``d over the public path.  Replacing a dead holder's stale
socket file is therefore atomic: at no moment is the path missing or owned
by two listeners, and no path a live listener may own is ever unlinked
(a live listener implies a live lock, which we could not have taken).

**Succession** passes the lock and listening socket themselves (``SCM_RIGHTS``
on the SAVED frame), so the lock is never free between two reigns and no
third process can slip in.

Every descriptor is close-on-exec.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import socket
import stat
from dataclasses import dataclass

from highlander._rendezvous import PRIVATE_TAG_CHARS, ProjectPaths

BACKLOG = 128


class ProjectLock:
    """An exclusive ``flock`` on the project's lock file, held until :meth:`release`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def try_acquire(cls, path: str) -> ProjectLock | None:
        """Take the lock without waiting; ``None`` if a live process holds it."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        return cls(fd)

    @classmethod
    def adopt(cls, fd: int, path: str) -> ProjectLock | None:
        """Adopt a lock descriptor passed by the predecessor; ``None`` if it is not ours.

        The descriptor must be the project's lock file (same device and inode)
        and must hold the lock: ``flock`` on a description that already holds
        it succeeds at once.
        """
        try:
            st, expected = os.fstat(fd), os.stat(path, follow_symlinks=False)
            same = (st.st_dev, st.st_ino) == (expected.st_dev, expected.st_ino)
            if same and stat.S_ISREG(st.st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.set_inheritable(fd, False)
                return cls(fd)
        except OSError:
            pass
        os.close(fd)
        return None

    def release(self) -> None:
        """Give the lock up (closing our descriptor; a successor's copy keeps it)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


@dataclass(slots=True)
class Listener:
    """The holder's listening socket and the identity of the file it is bound to."""

    sock: socket.socket
    path: str
    file_id: tuple[int, int]

    @classmethod
    def bind(cls, paths: ProjectPaths) -> tuple[Listener, bool]:
        """Bind at a private name and rename over the public path (caller holds the lock).

        Returns the listener and whether a stale socket file was replaced.
        """
        tmp = paths.private_socket(secrets.token_hex(PRIVATE_TAG_CHARS // 2))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            sock.bind(tmp)
            os.chmod(tmp, 0o600)
            sock.listen(BACKLOG)
            stale = os.path.lexists(paths.socket)
            os.rename(tmp, paths.socket)
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
                # listen() again records *our* credentials on the socket, so
                # SO_PEERCRED names the new holder to clients that connect now.
                sock.listen(BACKLOG)
                return cls(sock, paths.socket, _file_id(paths.socket))
        except OSError:
            pass
        sock.close()
        return None

    def close(self, *, unlink: bool) -> None:
        """Stop listening; with ``unlink``, remove the public path if it is still ours.

        Only a holder unlinks, and only while it still holds the lock, so the
        file it removes cannot belong to a live successor.
        """
        if unlink:
            with contextlib.suppress(OSError):
                if _file_id(self.path) == self.file_id:
                    os.unlink(self.path)
        self.sock.close()


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path, follow_symlinks=False)
    return st.st_dev, st.st_ino


def _bound_here(sock: socket.socket, paths: ProjectPaths) -> bool:
    # getsockname() reports the private name bind() used, not the public one.
    name = sock.getsockname()
    bound = name.decode() if isinstance(name, bytes) else str(name)
    directory, base = os.path.split(bound)
    return directory == paths.runtime_dir and base.startswith(f".{paths.base}.")
