"""Holding a project: a kernel-released lock and a socket that only the holder binds.

**Liveness** is an exclusive ``flock`` on ``<name>.lock``, taken for the
holder's whole life.  The kernel drops it when the last descriptor of that
open file goes away, so a SIGKILLed holder never leaves a lock behind, and no
pid or mtime is ever consulted.  The lock file is never unlinked (unlinking
a lock file is what lets two processes lock two different files).

**The socket** is bound only under the lock, at a private temporary name,
then ``rename``d over the public path (:mod:`highlander._host.listener`).
Replacing a dead holder's stale socket file is therefore atomic: at no
moment is the path missing or owned by two listeners, and no path a live
listener may own is ever unlinked (a live listener implies a live lock,
which we could not have taken).

**Succession** passes the lock and listening socket themselves (``SCM_RIGHTS``
on the SAVED frame), so the lock is never free between two reigns and no
third process can slip in.

**Forks.**  A forked child shares the lock's open file description, and a
``flock`` lasts until the last descriptor of it closes: a worker forked by
the holder would keep the project after the holder died.  So a child closes
its copies of every held lock (and :mod:`highlander._host.listener` of every
listener) right after ``fork`` (``os.register_at_fork``).  The parent's lock
is untouched: its own descriptor still refers to the description.

Every descriptor is close-on-exec.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time

from highlander._core.errors import ForeignHolderError
from highlander._core.values import Value
from highlander._host.event_log import Event, Outcome
from highlander._host.fencing import read_floor, store_floor
from highlander._host.files import cannot_hold, lstat_problem, open_regular
from highlander._host.identity import Expected, boot_id, cmdline, fd_holds_flock, own_identity
from highlander._host.record import (
    COPY_BYTES,
    GENERATION_MAX,
    HolderRecord,
    copy_of,
    debts,
    owed_exits,
    read_copy,
    read_record,
    write_record,
)
from highlander._host.settings import Settings

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any, Literal

    from highlander._host.listener import Listener
    from highlander._host.rendezvous import ProjectPaths


class ProjectLock:
    """An exclusive ``flock`` on the project's lock file, held until :meth:`release`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: Whether the descriptor was closed at ``fork`` (in the child) rather than released.
        self.forked = False
        _held.add(self)

    @property
    def held(self) -> bool:
        """Whether this process still has the locked descriptor (not released, not a fork)."""
        return self.fd >= 0

    @classmethod
    def try_acquire(cls, path: str) -> ProjectLock | None:
        """Take the lock without waiting; ``None`` if a live process holds it.

        Raises :class:`~highlander._core.errors.UnsafeFileError` when ``path`` is
        not our own regular file (a FIFO, directory, symlink, another owner's).
        """
        fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        return cls(fd)

    @classmethod
    def adopt(cls, fd: int, path: str) -> ProjectLock | Literal["stale", "foreign"]:
        """Adopt a lock descriptor passed by the predecessor, if it holds the project's lock.

        The descriptor must be the project's lock file (same device and inode)
        and its description must hold the lock *now*, which the kernel says
        without taking it: a predecessor that moved its lock to a new
        description (after this newcomer went silent past its deadline) left
        this one holding nothing, and ``flock`` on it would quietly take the
        lock back from under the predecessor.

        Otherwise the descriptor is closed and the answer says why:
        ``"stale"``, a copy of a lock file that holds nothing now or is no
        longer the file at ``path`` (the predecessor kept the project, or the
        rendezvous was replaced, while we were not looking); ``"foreign"``,
        not a regular file (not a lock at all).
        """
        found: Literal["stale", "foreign"] = "foreign"
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                found = "stale"  # a lock file's copy: ours only if it is the one, and holds
                expected = os.stat(path, follow_symlinks=False)
                same = (st.st_dev, st.st_ino) == (expected.st_dev, expected.st_ino)
                if same and fd_holds_flock(fd):
                    os.set_inheritable(fd, False)
                    return cls(fd)
        except OSError:
            pass  # fstat failing: foreign; no file at the path any more: stale
        os.close(fd)
        return found

    def stored(self) -> tuple[int, list[list[Any]]]:
        """The generation and the debts of exit the lock file keeps (:func:`copy_of`)."""
        try:
            return read_copy(os.pread(self.fd, COPY_BYTES, 0))
        except OSError:
            return 0, []

    def store_generation(self, generation: int, owed: tuple[Expected, ...] = ()) -> None:
        """Keep ``generation`` and the reign's debts in the lock file (the lock is unaffected)."""
        data = copy_of(generation, owed)
        with contextlib.suppress(OSError):  # a copy: the record stays authoritative
            os.pwrite(self.fd, data, 0)
            os.ftruncate(self.fd, len(data))

    def located_at(self, path: str) -> str | None:
        """Why the locked file is no longer the one at ``path``; ``None`` if it still is.

        A lock on a file that was deleted or replaced guards nothing: a
        newcomer locks whatever is at the path now.
        """
        if self.fd < 0:
            return "the lock was released"
        try:
            mine = os.fstat(self.fd)
            there = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            return f"the lock file {path} was deleted"
        except OSError as exc:
            return f"the lock file {path} cannot be examined ({exc.strerror})"
        if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
            return f"the lock file {path} was replaced by another file"
        return None

    def renew(self, path: str) -> ProjectLock | None:
        """Move the lock to a fresh open file description of ``path``; ``None`` if lost.

        Copies of the old description (passed to a successor that went
        silent) then hold nothing.  ``flock`` cannot move a lock atomically:
        between the unlock and the new lock another process may take it, and
        then this returns ``None`` (the caller may try again, bounded).  If
        ``path`` is no longer this lock's file, nothing changes (``self``).
        """
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(path, flags)
        except OSError:
            return self  # the path is gone: the rendezvous watch steps down
        new, old = os.fstat(fd), os.fstat(self.fd)
        if (new.st_dev, new.st_ino) != (old.st_dev, old.st_ino):
            os.close(fd)
            return self  # replaced: likewise
        fcntl.flock(self.fd, fcntl.LOCK_UN)  # for every copy of the old description
        self.release()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return ProjectLock(fd)

    def release(self) -> None:
        """Give the lock up (closing our descriptor; a successor's copy keeps it)."""
        _held.discard(self)
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


#: Locks this process holds, for the fork handler below.
_held: set[ProjectLock] = set()


def _drop_in_child() -> None:
    """After ``fork``, in the child: close its copies of the locks (see the module docstring)."""
    for lock in list(_held):
        if lock.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(lock.fd)
            lock.fd, lock.forked = -1, True
    _held.clear()


os.register_at_fork(after_in_child=_drop_in_child)


class Reign(Value):
    """What a holder holds: the lock, the listener, and its record."""

    lock: ProjectLock
    listener: Listener
    record: HolderRecord
    handoff: dict[str, Any] | None
    outcome: Outcome
    #: Deposed holders whose exit this reign sees to (:mod:`highlander._shell.predecessor`):
    #: its own predecessor, and those whose successor ended before they had left.
    predecessors: tuple[Expected, ...] = ()


def unproven(reign: Reign, paths: ProjectPaths, generation: int) -> str | None:
    """Why this process cannot prove that ``reign`` (of ``generation``) is current.

    ``None`` only with proof: the record names a newer generation (fenced
    out), or this process no longer has the locked descriptor (released, or
    a fork of the holder), or the lock file at the rendezvous path is not the
    file it locked (deleted, replaced, its directory wiped), or the record is
    unreadable or names another process.  Each failure is the reason.
    """
    record = read_record(paths.state)
    if record is not None and record.generation != generation:
        return (
            f"generation {generation} is over: the project is at generation "
            f"{record.generation} (pid {record.pid})"
        )
    if not reign.lock.held:
        # Released: the serving side lets go of the lock when the reign ends (a
        # successor, a lost rendezvous), and a check that raced it lands here.
        return (
            f"this process is a fork of the holder of generation {generation}: "
            "only the process that claimed the project holds it"
            if reign.lock.forked
            else f"generation {generation} ended: its lock was released"
        )
    unsure = f"generation {generation} cannot be proven current"
    lost = reign.lock.located_at(paths.lock)
    if lost is not None:
        return f"{unsure}: {lost}, so another process may hold the project now"
    if record is None:
        return f"{unsure}: the record {paths.state} is missing or unreadable"
    if record.pid != os.getpid():
        return f"{unsure}: the record names pid {record.pid}, not this process ({os.getpid()})"
    return None


def claim_free(settings: Settings) -> Reign | None:
    """Claim the project if no live process holds it (no waiting, no network).

    Raises :class:`ForeignHolderError` if a non-Highlander process listens on
    the project's socket path.
    """
    lock = ProjectLock.try_acquire(settings.paths.lock)
    if lock is None:
        return None
    settings.renamed(create=True)  # the directory may have been wiped since we resolved it
    from highlander._host.listener import Listener  # noqa: PLC0415 - only a claim binds

    try:
        listener, stale = Listener.bind(settings.paths)
    except ForeignHolderError as exc:
        lock.release()
        settings.events.emit(Event.FOREIGN_LISTENER, socket=settings.paths.socket, reason=str(exc))
        raise
    except BaseException as exc:
        lock.release()
        raise cannot_hold(exc, settings.paths.socket) from exc
    outcome = Outcome.CLAIMED_STALE if stale else Outcome.CLAIMED_FREE
    try:
        record, owed = publish_record(settings, lock, successor_of=None)
    except BaseException as exc:
        listener.close(unlink=True)  # ours: we still hold the lock
        lock.release()
        raise cannot_hold(exc, settings.paths.state) from exc
    if stale:
        settings.events.emit(Event.STALE_CLEARED, socket=settings.paths.socket)
    settings.events.emit(Event.CLAIMED, outcome=outcome, generation=record.generation)
    if settings.legacy_lock is not None:
        from highlander._host.legacy import migrate  # noqa: PLC0415 - only with legacy_lock=

        migrate(settings.legacy_lock, settings.events)
    return Reign(lock, listener, record, None, outcome, owed)


def publish_record(
    settings: Settings, lock: ProjectLock, *, successor_of: int | None
) -> tuple[HolderRecord, tuple[Expected, ...]]:
    """Write this process's record for a new reign (caller holds ``lock``).

    Returns it and the deposed holders whose exit the reign inherited
    (:func:`~highlander._host.record.owed_exits`), which the record names too.

    The generation is one more than the highest of the previous record's, the
    copy in the lock file and the predecessor's (``successor_of``), so it only
    ever grows, even after the record was damaged or deleted.
    """
    previous = read_record(settings.paths.state)
    if previous is None and (why := lstat_problem(settings.paths.state)) is not None:
        # Not a record (a FIFO, a symlink, ...): the write below replaces it.
        settings.events.emit(Event.UNSAFE_FILE, path=settings.paths.state, reason=why)
    kept, copies = kept_beside(settings, lock)
    floor = max(kept, successor_of or 0)
    owed = owed_exits(previous, None, copies)
    record = new_record(settings, previous, successor_of=successor_of, floor=floor, owed=owed)
    write_record(settings.paths.state, record)
    lock.store_generation(record.generation, owed)
    store_floor(settings.floor_path, record.generation, owed)
    return record, owed


def kept_beside(settings: Settings, lock: ProjectLock) -> tuple[int, list[list[Any]]]:
    """The highest generation and every debt of exit the lock file and the floor keep.

    A new reign (a claim, a takeover) starts above that generation and
    inherits those debts too, whatever happened to the record.
    """
    generation, owed = lock.stored()
    floor, floor_owed = read_floor(settings.floor_path)
    return max(generation, floor), [*owed, *floor_owed]


def new_record(
    settings: Settings,
    previous: HolderRecord | None,
    *,
    successor_of: int | None,
    floor: int = 0,
    owed: tuple[Expected, ...] = (),
) -> HolderRecord:
    """This process's record for a new reign (generation +1, succession history kept)."""
    me, now_ms = own_identity(), int(time.time() * 1000)
    # A planted generation so high that +1 would pass what readers accept is
    # ignored like any other damage (the other sources still count).
    sources = (previous.generation if previous else 0, successor_of or 0, floor)
    generation = max(g for g in (0, *sources) if g < GENERATION_MAX - 1) + 1
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
        owed=debts(owed),
    )
