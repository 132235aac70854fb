"""Whether the holder's rendezvous is still the one it claimed: its directory, lock and socket.

A holder's files can be taken from under it: a ``/tmp`` cleaner, a logout
that empties ``/run/user/UID``, ``rm -rf`` of the runtime directory, a stray
``rm`` of the socket.  The kernel still lets the holder keep its lock on the
old lock file's inode and its listener on the old socket, but nobody can
find them any more: a newcomer would create new files and claim the project
beside a holder that still believes it holds.

:func:`look` compares what is at the paths now with what the holder holds
(device and inode of the directory, the lock file and the socket file) and
says what changed.  The holder reacts (:mod:`highlander._shell.incumbent`): a
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
import fcntl
import os
import stat

from highlander._core.errors import HighlanderError
from highlander._host.event_log import Event, Outcome
from highlander._host.files import current_file_id as file_id

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._host.rendezvous import ProjectPaths
    from highlander._shell.incumbent import Incumbent

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


def fd_id(fd: int) -> FileId:
    """(device, inode) of an open descriptor."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def look(
    paths: ProjectPaths, directory: FileId | None, lock: FileId, socket: FileId | None
) -> Change | None:
    """What changed at ``paths`` compared with what the holder holds; ``None``: nothing."""
    if directory is None or file_id(paths.runtime_dir) != directory:
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

            # The process's own symbols, libc's among them: ctypes.util.find_library
            # would import tempfile, shutil, bz2, lzma and random (0.8 MB) to look.
            libc = ctypes.CDLL(None, use_errno=True)
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


async def keep_watch(incumbent: Incumbent) -> None:
    """The holder's watch over its rendezvous, for its whole reign (a serving task).

    Wakes on every change in the runtime directory (or every
    :data:`POLL_INTERVAL` without inotify), compares, and reacts: a lost lock
    file or directory ends the reign (``lost_rendezvous``, then
    ``on_deposed``); a socket path taken from it is published afresh.
    While a handover is out (a successor holds copies of the lock and
    listener) a lost lock or directory waits for its end: after the commit
    it is the successor's rendezvous to watch.  The holder also keeps a
    shared ``flock`` on the directory itself, which tells ``systemd-tmpfiles``
    to leave it alone.
    """
    from highlander._shell.serving_guard import step_down  # noqa: PLC0415 - it imports us

    paths, runtime = incumbent.settings.paths, incumbent.runtime
    lock = fd_id(incumbent.reign.lock.fd)
    directory, dir_fd = _hold_directory(paths.runtime_dir)
    watch = Watch(paths.runtime_dir)
    try:
        while incumbent.outcome is None:
            change = look(paths, directory, lock, incumbent.reign.listener.file_id)
            if change is Change.SOCKET:
                # Also while a handover is out: until it commits the project is
                # ours, and a successor re-checks the path when it takes over.
                republish(incumbent)
            elif change is not None and not incumbent.handed_over:
                why = f"the {change.value} of {paths.runtime_dir} was deleted or replaced"
                event, outcome = Event.LOST_RENDEZVOUS, Outcome.LOST_RENDEZVOUS
                await step_down(incumbent, why, event=event, outcome=outcome)
                return
            if watch.fd >= 0:
                # A missed event costs 30 s at most; with a handover out, look
                # again soon anyway (a lost lock waits for the handover's end).
                wait = 0.05 if incumbent.handed_over else POLL_INTERVAL * 30
                await runtime.readable(watch.fd, wait)
                watch.drain()
            else:
                await runtime.sleep(POLL_INTERVAL)
    finally:
        watch.close()
        if dir_fd >= 0:
            os.close(dir_fd)


async def lost_before_saved(incumbent: Incumbent) -> bool:
    """Whether the rendezvous was lost while the save ran; if so, the reign ends here.

    Checked just before SAVED goes out.  A lock file that is no longer at
    its path cannot be handed over (the newcomer's adoption compares it with
    the path and declines), and while a handover is out the watch waits for
    its end: handing it out would only keep this holder believing it holds,
    beside whoever claimed the new rendezvous, for up to ``request``.  So
    the holder steps down at once (``lost_rendezvous``); the newcomer hears
    the end of the stream and claims the rendezvous as it is now.  (A wiped
    or replaced directory takes the lock file's path with it.)
    """
    from highlander._shell.serving_guard import step_down  # noqa: PLC0415 - it imports us

    reign, paths = incumbent.reign, incumbent.settings.paths
    lost = reign.lock.located_at(paths.lock)
    if lost is None:
        return False
    why = f"{lost} during a save: the rendezvous cannot be handed over"
    await step_down(incumbent, why, event=Event.LOST_RENDEZVOUS, outcome=Outcome.LOST_RENDEZVOUS)
    return True


def _hold_directory(path: str) -> tuple[FileId | None, int]:
    """The directory's identity, and a descriptor with a shared ``flock`` on it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None, -1
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    return fd_id(fd), fd


def republish(incumbent: Incumbent) -> None:
    """Publish the holder's socket at its path again; say what is in the way if it cannot.

    It still holds the lock, so the path is its own to take.
    """
    from highlander._host.listener import Listener  # noqa: PLC0415

    settings = incumbent.settings
    paths, events = settings.paths, settings.events
    blocker = in_the_way(paths.socket)
    if blocker is not None:
        if incumbent.blocked != blocker:  # once per episode, not once per wake-up
            incumbent.blocked = blocker
            events.emit(
                Event.SOCKET_BLOCKED,
                socket=paths.socket,
                reason=f"{paths.socket} is {blocker}: remove it and the holder publishes "
                "its socket again at once",
            )
        return
    try:
        listener, _ = Listener.bind(paths)
    except (HighlanderError, OSError) as exc:
        # A foreign listener, or what no rename can replace (a directory put
        # there since the look above, a mount point): named, never fatal.
        if incumbent.blocked != str(exc):
            incumbent.blocked = str(exc)
            events.emit(Event.SOCKET_BLOCKED, socket=paths.socket, reason=str(exc))
        return
    incumbent.blocked = None
    incumbent.replace_listener(listener)
    events.emit(Event.SOCKET_RESTORED, socket=paths.socket)


#: How often a holder tries to get its lock back after moving it (10 ms apart).
TAKE_BACK_TRIES = 20


async def take_back(incumbent: Incumbent) -> None:
    """After a successor went silent past its deadline: make the copies it holds worthless.

    A newcomer stopped between SAVED and its ACK keeps copies of the lock's
    open file description and of the listener.  Should this holder die
    later, those copies would keep the project locked and its socket
    answering nobody, for as long as that newcomer stays stopped.  So the
    holder moves its lock to a fresh description and publishes a fresh
    listener: the old copies then hold nothing.  The fresh listener is
    published first, so a process that takes the lock in the instant the
    move needs finds a live listener, refuses to claim and lets go; if it
    keeps the lock anyway, the holder steps down.
    """
    from highlander._host.claim import ProjectLock  # noqa: PLC0415
    from highlander._host.listener import Listener  # noqa: PLC0415
    from highlander._shell.serving_guard import ServingFailed  # noqa: PLC0415

    paths = incumbent.settings.paths
    # The listener first: while the lock moves, a live listener of ours stands
    # at the path, so a process that takes the lock in that instant finds it
    # and gives the lock back instead of claiming (its bind refuses).
    ours = file_id(paths.socket) == incumbent.reign.listener.file_id
    try:
        listener, _ = Listener.bind(paths, over_ours=ours)
    except (OSError, HighlanderError):
        return  # cannot publish now: moving the lock would open a window; keep it as it is
    incumbent.replace_listener(listener)
    reign = incumbent.reign
    lock = reign.lock.renew(paths.lock)
    for _ in range(TAKE_BACK_TRIES):
        if lock is not None:
            break
        await incumbent.runtime.sleep(0.01)
        lock = ProjectLock.try_acquire(paths.lock)
    if lock is None:
        raise ServingFailed("another process took the lock while this holder moved it")
    incumbent.reign = reign._replace(lock=lock)


async def watch_parent(incumbent: Incumbent, parent: int) -> None:
    """End the reign when ``parent`` (the client that started us) exits.

    An orphaned server must not outlive its IDE.  A pidfd wakes us; without
    one, we poll.
    """
    runtime = incumbent.runtime
    try:
        fd = os.pidfd_open(parent)
    except ProcessLookupError:
        fd = -1
    except OSError:  # no pidfd here (old kernel, no descriptors left): watch by polling
        while os.getppid() == parent:
            await runtime.sleep(1.0)
        fd = -1
    try:
        if fd >= 0 and os.getppid() == parent:
            await runtime.readable(fd)  # readable once the parent has exited
    finally:
        if fd >= 0:
            os.close(fd)
    if incumbent.outcome is not None or incumbent.handed_over:
        return  # a succession is already ending this reign
    incumbent.outcome = Outcome.ORPHANED
    reign = incumbent.reign
    incumbent.settings.events.emit(
        Event.ORPHANED, peer_pid=parent, generation=reign.record.generation
    )
    incumbent.close_listener(unlink=True)
    reign.lock.release()
    await incumbent.deposed(Outcome.ORPHANED)
    incumbent.stop()
