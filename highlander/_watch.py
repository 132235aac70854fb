"""Whether the holder's rendezvous is still the one it claimed: its directory, lock and socket.

A holder's files can be taken from under it: a ``/tmp`` cleaner, a logout
that empties ``/run/user/UID``, ``rm -rf`` of the runtime directory, a stray
``rm`` of the socket.  The kernel still lets the holder keep its lock on the
old lock file's inode and its listener on the old socket, but nobody can
find them any more: a newcomer would create new files and claim the project
beside a holder that still believes it holds.

:func:`look` compares what is at the paths now with what the holder holds
(device and inode of the directory, the lock file and the socket file) and
says what changed.  The holder reacts (:mod:`highlander._incumbent`): a
socket path that is gone or replaced is published afresh (it still holds
the lock, so the path is its to take); a lock file or directory that is gone
or replaced means the rendezvous is lost, and it steps down at once.

:class:`Watch` wakes the holder when anything in the directory changes:
``inotify`` (through ``ctypes``, on the serving thread only, never on the
claim path), so an idle holder costs no CPU.  Without inotify the holder
polls every :data:`POLL_INTERVAL` seconds.
"""

from __future__ import annotations

import contextlib
import enum
import os
import stat

from highlander._rendezvous import ProjectPaths

#: How often a holder without inotify looks at its files.
POLL_INTERVAL = 1.0
# From <sys/inotify.h>.
_IN_ATTRIB = 0x004
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = (
    _IN_ATTRIB
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
)

FileId = tuple[int, int]


class Change(enum.Enum):
    """What happened to the rendezvous, most serious first."""

    #: The runtime directory is gone or another one stands at its path.
    DIRECTORY = "directory"
    #: The lock file is gone or replaced: a newcomer would lock another inode.
    LOCK = "lock"
    #: The socket file is gone or replaced (the lock is still ours).
    SOCKET = "socket"


def file_id(path: str) -> FileId | None:
    """(device, inode) of ``path`` itself (not following a symlink); ``None`` if absent."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def fd_id(fd: int) -> FileId:
    """(device, inode) of an open descriptor."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def look(
    paths: ProjectPaths, directory: FileId, lock: FileId, socket: FileId | None
) -> Change | None:
    """What changed at ``paths`` compared with what the holder holds; ``None``: nothing."""
    if file_id(paths.runtime_dir) != directory:
        return Change.DIRECTORY
    if file_id(paths.lock) != lock:
        return Change.LOCK
    if socket is None or file_id(paths.socket) != socket:
        return Change.SOCKET
    return None


def in_the_way(path: str) -> str | None:
    """What stands at the socket path that a rename cannot replace, if anything."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return "a directory" if stat.S_ISDIR(st.st_mode) else None


class Watch:
    """A descriptor that becomes readable when the runtime directory changes (inotify).

    :attr:`fd` is ``-1`` where inotify is not available; the caller polls then.
    """

    def __init__(self, directory: str) -> None:
        self.fd = -1
        try:
            import ctypes  # noqa: PLC0415 - only a serving holder watches
            import ctypes.util  # noqa: PLC0415

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
            if fd < 0:
                return
            if libc.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
                os.close(fd)
                return
            self.fd = fd
        except (OSError, AttributeError):
            self.fd = -1

    def drain(self) -> None:
        """Consume the pending notifications (their content does not matter: :func:`look` does)."""
        if self.fd < 0:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self.fd, 65536):
                pass

    def close(self) -> None:
        """Stop watching."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
