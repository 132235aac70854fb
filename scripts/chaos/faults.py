"""What the chaos does to the project's files: sockets, records, legacy locks, the disk.

Each function takes the project's paths (``Settings.paths``), does one thing
to the runtime directory and returns a short note for the run's log.  The
harness opens what it finds there as warily as the library does: never
following a symlink, never blocking on a FIFO.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

from highlander._host.identity import boot_id, process_identity
from highlander._host.record import HolderRecord


def delete_socket(paths: Any) -> str:
    try:
        os.unlink(paths.socket)
    except FileNotFoundError:
        return "no socket file"
    except IsADirectoryError:  # planted by replace_socket; clear_socket_dir removes it
        return "socket not deleted (a directory is there)"
    return "socket deleted"


def replace_socket(paths: Any, variant: str, after: int = 0) -> str:
    """Put something else at the socket path, as a same-uid process without the token could:
    a regular file, a socket file nobody listens on, a FIFO, a dangling symlink, or a
    directory (which the harness removes ``after`` steps later, as an operator would)."""
    tmp = os.path.join(paths.runtime_dir, f"chaos-{variant}.tmp")
    _remove(tmp)
    try:
        _plant(tmp, variant, paths)
        # A directory cannot replace a non-directory (nor the reverse): make room first.
        if variant == "directory" or _is_dir(paths.socket):
            _remove(paths.socket)
        os.replace(tmp, paths.socket)
    except OSError as exc:  # no space left, say
        _remove(tmp)
        return f"socket not replaced ({variant}): {exc.strerror}"
    return f"socket replaced by a {_WHAT[variant]}"


def _plant(tmp: str, variant: str, paths: Any) -> None:
    if variant == "file":
        Path(tmp).write_bytes(b"not a socket\n")
    elif variant == "stale":
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(tmp)  # bound, never listening, then closed: a stale socket file
    elif variant == "fifo":
        os.mkfifo(tmp, 0o600)
    elif variant == "symlink":
        os.symlink(os.path.join(os.path.dirname(paths.runtime_dir), "chaos-elsewhere"), tmp)
    else:
        os.mkdir(tmp, 0o700)


_WHAT = {
    "file": "regular file",
    "stale": "stale socket",
    "fifo": "FIFO",
    "symlink": "dangling symlink",
    "directory": "directory",
}


def clear_socket_dir(paths: Any, origin: int = -1) -> str:
    """Remove a directory at the socket path (what the newcomers' error asks an operator)."""
    try:
        st = os.lstat(paths.socket)
    except FileNotFoundError:
        return "no directory at the socket path"
    if not stat.S_ISDIR(st.st_mode):
        return "the socket path is no longer a directory"
    shutil.rmtree(paths.socket, ignore_errors=True)
    return "directory at the socket path removed"


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _remove(path: str) -> None:
    """Remove whatever is at ``path`` (a directory too), without following a symlink."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


#: How the harness opens ``.state``: a FIFO must not block it, a symlink not redirect it.
_WARY = os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def _record(paths: Any) -> dict[str, Any] | None:
    try:
        fd = os.open(paths.state, os.O_RDONLY | _WARY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = json.loads(os.read(fd, 1 << 20))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else None


def _template(pid: int) -> dict[str, Any]:
    """A complete, well-typed record (for damage that needs one when none is left)."""
    return {
        "pid": pid,
        "start_time": 1,
        "exe": "",
        "uid": os.geteuid(),
        "boot_id": boot_id(),
        "app": "chaos",
        "mode": "auto",
        "generation": 1,
        "since_ms": 0,
        "cmdline": [],
        "successions_ms": [],
    }


def corrupt_state(paths: Any, variant: str, pid: int = 0) -> str:
    """Overwrite the holder's record in place (not atomically: a crash mid-write)."""
    record = _record(paths)
    if variant == "garbage":
        data = b"\x00{garbage\xff not json"
    elif variant == "truncated":
        whole = json.dumps(record or {"pid": 1}).encode()
        data = whole[: len(whole) // 2]
    elif variant == "wrong_types":
        # Every field of a record present, every value of the wrong type (a list).
        names = record or dict.fromkeys(HolderRecord.FIELDS, 0)
        data = json.dumps({key: [str(value)] for key, value in names.items()}).encode()
    elif variant == "bad_pid":
        data = json.dumps({**(record or _template(pid)), "pid": pid}).encode()
    elif variant == "huge_generation":
        data = json.dumps({**(record or _template(1)), "generation": 2**63}).encode()
    else:
        data = b""
    try:
        # O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging the harness.
        fd = os.open(paths.state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _WARY, 0o600)
    except OSError as exc:
        return f"state not corrupted ({variant}): {exc.strerror}"
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.write(fd, data)
    except OSError as exc:  # no space left: what it truncated stays truncated
        return f"state not corrupted ({variant}, truncated): {exc.strerror}"
    finally:
        os.close(fd)
    return f"state corrupted ({variant}{f' {pid}' if variant == 'bad_pid' else ''})"


def plant_pid(paths: Any, pid: int, variant: str) -> str:
    """Write ``pid`` (a live, unrelated process) into the record, keeping the rest.

    ``reused``: the holder's start time and executable stay (its pid was reused);
    ``forged``: the bystander's own start time and executable (a record that
    matches the live process in every respect but the lock).
    """
    record = _record(paths) or _template(0)
    record["pid"] = pid
    if variant == "forged":
        ident = process_identity(pid)
        if ident is not None:
            record.update(start_time=ident.start_time, exe=ident.exe, boot_id=boot_id())
    tmp = f"{paths.state}.chaos.tmp"
    try:
        Path(tmp).write_text(json.dumps(record))
        os.replace(tmp, paths.state)
    except OSError as exc:  # no room, or a directory there
        _remove(tmp)
        return f"state not replaced: {exc.strerror}"
    return f"state names pid {pid} ({variant})"


def write_legacy(path: Path, pid: int) -> str:
    path.write_text(f"{pid}\n")
    return f"legacy lock names pid {pid}"


# -- the disk: the runtime dir on a small tmpfs ----------------------------------------

#: The tmpfs's size: small enough to fill in a moment, large enough for the project's
#: own event log (rotated past 1 MiB, one old copy kept).  With 1 MiB the log alone
#: filled the disk for good: 1.15 MB in a 500-event run with four storms (seed 21).
TMPFS_SIZE = "4m"
#: Room kept past the end of the event log before filling (the judge's evidence).
LOG_RESERVE = 256 * 1024
FILLER = "chaos-filler"


def mount_tmpfs(path: str) -> str | None:
    """Mount a small tmpfs at ``path`` (empty); ``None`` if mounted, else why not."""
    argv = ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", path]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else done.stderr.decode(errors="replace").strip()


def umount(path: str) -> None:
    subprocess.run(["umount", "-l", path], capture_output=True, timeout=30, check=False)


def fill_disk(paths: Any, after: int = 0) -> str:
    """Write a filler file in the runtime dir until ENOSPC (unbuffered writes).

    First the event log gets room past its end (``fallocate`` with
    ``FALLOC_FL_KEEP_SIZE``): it is the evidence the run is judged by.
    Everything else written there (records, the lock's generation, sockets)
    meets the full disk.
    """
    _reserve(paths.events, LOG_RESERVE)
    filler = os.path.join(paths.runtime_dir, FILLER)
    written = 0
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):
            with contextlib.suppress(OSError):
                while True:
                    written += os.write(fd, b"\0" * size)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    return f"disk filled ({written} bytes more)"


def free_disk(paths: Any, origin: int = -1) -> str:
    try:
        os.unlink(os.path.join(paths.runtime_dir, FILLER))
    except FileNotFoundError:
        return "disk not full"
    return "disk freed"


def _reserve(path: str, size: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | _WARY)  # a FIFO planted there must not hang us
    except OSError:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        libc.fallocate(fd, 1, os.fstat(fd).st_size, size)  # 1: FALLOC_FL_KEEP_SIZE
    finally:
        os.close(fd)
