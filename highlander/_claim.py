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
import time
from dataclasses import dataclass
from typing import Any

from highlander._errors import ForeignHolderError
from highlander._events import Event, Outcome
from highlander._identity import boot_id, cmdline, own_identity, peer_credentials, process_identity
from highlander._record import HolderRecord, read_record, write_record
from highlander._rendezvous import PRIVATE_TAG_CHARS, ProjectPaths
from highlander._settings import Settings

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
    #: The public path's (device, inode) when it was ours; ``None`` if it was gone.
    file_id: tuple[int, int] | None

    @classmethod
    def bind(cls, paths: ProjectPaths) -> tuple[Listener, bool]:
        """Bind at a private name and rename over the public path (caller holds the lock).

        Returns the listener and whether a stale socket file was replaced.
        """
        _refuse_live_listener(paths.socket)
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
                try:
                    file_id: tuple[int, int] | None = _file_id(paths.socket)
                except FileNotFoundError:
                    file_id = None  # deleted by hand meanwhile: the successor rebinds
                return cls(sock, paths.socket, file_id)
        except OSError:
            pass
        sock.close()
        return None

    def close(self, *, unlink: bool) -> None:
        """Stop listening; with ``unlink``, remove the public path if it is still ours.

        Only a holder unlinks, and only while it still holds the lock, so the
        file it removes cannot belong to a live successor.
        """
        if unlink and self.file_id is not None:
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


@dataclass
class Reign:
    """What a holder holds: the lock, the listener, and its record."""

    lock: ProjectLock
    listener: Listener
    record: HolderRecord
    handoff: dict[str, Any] | None
    outcome: Outcome


def claim_free(settings: Settings) -> Reign | None:
    """Claim the project if no live process holds it (no waiting, no network).

    Raises :class:`ForeignHolderError` if a non-Highlander process listens on
    the project's socket path.
    """
    lock = ProjectLock.try_acquire(settings.paths.lock)
    if lock is None:
        return None
    try:
        listener, stale = Listener.bind(settings.paths)
    except ForeignHolderError as exc:
        lock.release()
        settings.events.emit(Event.FOREIGN_LISTENER, socket=settings.paths.socket, reason=str(exc))
        raise
    except BaseException:
        lock.release()
        raise
    outcome = Outcome.CLAIMED_STALE if stale else Outcome.CLAIMED_FREE
    record = new_record(settings, read_record(settings.paths.state), successor_of=None)
    write_record(settings.paths.state, record)
    if stale:
        settings.events.emit(Event.STALE_CLEARED, socket=settings.paths.socket)
    settings.events.emit(Event.CLAIMED, outcome=outcome, generation=record.generation)
    if settings.legacy_lock is not None:
        from highlander._legacy import migrate  # noqa: PLC0415 - only with legacy_lock=

        migrate(settings.legacy_lock, settings.events)
    return Reign(lock, listener, record, None, outcome)


def new_record(
    settings: Settings, previous: HolderRecord | None, *, successor_of: int | None
) -> HolderRecord:
    """This process's record for a new reign (generation +1, succession history kept)."""
    me, now_ms = own_identity(), int(time.time() * 1000)
    generation = max(previous.generation if previous else 0, successor_of or 0) + 1
    history = list(previous.successions_ms) if previous else []
    if successor_of is not None:
        history.append(now_ms)
    return HolderRecord(
        pid=me.pid,
        start_time=me.start_time,
        exe=me.exe,
        uid=me.uid,
        boot_id=boot_id(),
        app=settings.app,
        mode=settings.mode.value,
        generation=generation,
        since_ms=now_ms,
        cmdline=cmdline(me.pid),
        successions_ms=settings.thrash.recent(history, now_ms),
    )
