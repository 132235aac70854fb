"""Opening files in the runtime directory without trusting what is found there.

Every file Highlander opens in the runtime directory (the lock, the record,
the event log and its temporary and rotated names) goes through
:func:`open_regular`: ``O_NOFOLLOW`` (a symlink is refused, never
followed), ``O_NONBLOCK`` (opening a FIFO returns at once instead of
waiting for a peer that never comes), ``O_CLOEXEC``; then ``fstat`` on the
descriptor, which must be a regular file owned by us.  Anything else is one
:class:`UnsafeFileError` that names the file, says what it is, and says how
to fix it.  Reads and writes of regular files never block, so with these
checks no call here can hang.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from highlander._core.errors import TakeoverError, UnsafeFileError, UnsafeRuntimeDirError

SAFE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

_KINDS = (
    (stat.S_ISLNK, "a symlink"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISREG, "a regular file"),
)


def kind(mode: int) -> str:
    """What a file of ``st_mode`` is, in words ("a FIFO", "a directory", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def problem(st: os.stat_result, *, want: str = "a regular file") -> str | None:
    """Why a file with status ``st`` may not be used as ``want``; ``None`` if it may."""
    what = kind(st.st_mode)
    if what != want:
        return f"it is {what}, not {want}"
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by you (uid {uid})"
    return None


def unsafe(path: str, why: str) -> UnsafeFileError:
    """The one-line error for ``path``, which cannot be used because ``why``."""
    return UnsafeFileError(f"remove {path} ({why}) and start again", path=path)


def lstat_problem(path: str, *, want: str = "a regular file") -> str | None:
    """Why whatever is at ``path`` may not be used as ``want``; ``None`` if fine or absent."""
    try:
        return problem(os.lstat(path), want=want)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"it cannot be examined: {exc.strerror}"


def open_regular(path: str, flags: int, mode: int = 0o600) -> int:
    """Open ``path`` safely (see the module docstring); return the descriptor.

    Raises :class:`UnsafeFileError` for anything but our own regular file,
    :class:`UnsafeRuntimeDirError` when the directory itself vanished under
    an ``O_CREAT``, and :class:`FileNotFoundError` when a file we only mean
    to read is absent (callers treat that as "nothing yet").
    """
    try:
        fd = os.open(path, flags | SAFE_FLAGS, mode)
    except OSError as exc:
        raise _open_failure(path, flags, exc) from None
    try:
        why = problem(os.fstat(fd))
    except OSError as exc:  # pragma: no cover - fstat on an open descriptor
        why = f"it cannot be examined: {exc.strerror}"
    if why is not None:
        os.close(fd)
        raise unsafe(path, why)
    return fd


def _open_failure(path: str, flags: int, exc: OSError) -> OSError | UnsafeRuntimeDirError:
    if exc.errno == errno.ENOENT:
        if not flags & os.O_CREAT:
            return exc  # nothing to read yet
        return UnsafeRuntimeDirError(
            f"the runtime directory {os.path.dirname(path)} vanished while in use (a /tmp "
            "cleaner or a logout removes it): start again"
        )
    # ELOOP (a symlink), EISDIR, ENXIO (a FIFO without a reader, a socket),
    # EACCES (another owner's file): say what is there.
    why = lstat_problem(path) or f"it cannot be opened: {exc.strerror}"
    return unsafe(path, why)


def cannot_hold(exc: BaseException, path: str) -> BaseException:
    """What a claim that failed on the file system raises: one line naming the file and fix.

    A full disk is the usual cause (another user can fill a shared ``/tmp``).
    Errors that already say it (Highlander's own) and non-``OSError`` ones
    pass through unchanged.
    """
    if not isinstance(exc, OSError):
        return exc
    where = exc.filename or path
    return TakeoverError(
        f"cannot hold the project: {where}: {exc.strerror or exc}; free space on that "
        "filesystem or fix what is in the way (`highlander doctor` checks), then start again"
    )


def current_file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of whatever is at ``path`` now (not following a symlink); ``None``."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def stage(path: str, data: bytes) -> str:
    """Write ``data`` to a private file beside ``path``; return its name (see :func:`install`).

    Everything that can fail for want of space or permission fails here.  A
    directory at ``path`` is refused (:class:`UnsafeFileError`): a rename
    could not replace it.
    """
    if os.path.isdir(path) and not os.path.islink(path):
        raise unsafe(path, lstat_problem(path) or "it is a directory")
    tmp = f"{path}.{os.urandom(6).hex()}.tmp"
    fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        discard(tmp)
        raise
    return tmp


def install(staged: str, path: str) -> None:
    """Rename a staged file over ``path`` (needs no space: the data is written).

    A FIFO or symlink at ``path`` is replaced (``rename`` never follows or
    opens it); a directory cannot be: :class:`UnsafeFileError` names it.
    """
    try:
        os.replace(staged, path)
    except OSError:
        discard(staged)
        why = lstat_problem(path)
        if why is None:
            raise
        raise unsafe(path, why) from None
    except BaseException:
        discard(staged)
        raise


def discard(staged: str) -> None:
    """Remove a staged file that will not be installed."""
    with contextlib.suppress(OSError):
        os.unlink(staged)
