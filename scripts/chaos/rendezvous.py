"""Issue #11's file faults: the rendezvous wiped, and things planted at its files.

Like scripts/chaos/faults.py, each function takes the project's paths
(``Settings.paths``), does one thing to the runtime directory and returns a
short note for the run's log; nothing here follows a symlink or blocks on a
FIFO.  The runtime directory is the harness's tmpfs mount point: a wipe
empties it (``rm -rf DIR/*``, what a ``/tmp`` cleaner or a logout does to
what is inside) and leaves the mount point itself.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path
from typing import Any

#: The files a plant can target, by the name ``ProjectPaths`` gives them.
_TARGETS = {"state": "state", "events": "events", "socket": "socket", "lock": "lock"}
_WHAT = {
    "fifo": "a FIFO",
    "directory": "a directory",
    "symlink_null": "a symlink to /dev/null",
    "symlink_dangling": "a dangling symlink",
}
#: Step kinds (and variants) after which the holder's lock file is no longer the one it
#: locked: a newcomer may lock a fresh one before the holder notices (the judge's window).
RENDEZVOUS_LOST = ("wipe_runtime_dir", "plant lock")


def _remove(path: str) -> bool:
    """Remove whatever is at ``path`` (a directory too) without following a symlink."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def wipe_runtime_dir(paths: Any, variant: str = "whole") -> str:
    """``whole``: remove everything in the runtime directory (``rm -rf DIR/*``);
    ``lock_and_socket``: only the project's lock file and socket."""
    if variant == "lock_and_socket":
        gone = [name for name in ("lock", "socket") if _remove(getattr(paths, name))]
        return f"deleted: {', '.join(gone) or 'nothing (neither was there)'}"
    removed = 0
    with contextlib.suppress(FileNotFoundError), os.scandir(paths.runtime_dir) as entries:
        for entry in entries:
            removed += _remove(entry.path)
    return f"runtime dir wiped ({removed} entries)"


def plant(paths: Any, target: str, variant: str, after: int = 0) -> str:
    """Put a FIFO, a directory or a symlink at the ``target`` file (under a live holder).

    A rename replaces what is there in one step; a directory cannot replace a
    file (nor the reverse), so then the file is removed first.
    """
    path = getattr(paths, _TARGETS[target])
    tmp = os.path.join(paths.runtime_dir, f"chaos-plant-{variant}.tmp")
    _remove(tmp)
    try:
        if variant == "fifo":
            os.mkfifo(tmp, 0o600)
        elif variant == "directory":
            os.mkdir(tmp, 0o700)
        elif variant == "symlink_null":
            os.symlink(os.devnull, tmp)
        else:
            os.symlink(os.path.join(os.path.dirname(paths.runtime_dir), "chaos-nowhere"), tmp)
        if variant == "directory" or _is_dir(path):
            _remove(path)
        os.replace(tmp, path)
    except OSError as exc:  # no space left, or a directory raced in
        _remove(tmp)
        return f"{target} not planted ({variant}): {exc.strerror}"
    return f"{_WHAT[variant]} planted at the {target} ({os.path.basename(path)})"


def planted(path: str) -> str | None:
    """What the chaos may have planted at ``path`` (a FIFO, directory or symlink); else None."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    for test, what in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISDIR, "directory")):
        if test(mode):
            return what
    return "symlink" if stat.S_ISLNK(mode) else None


def clear_plant(paths: Any, target: str, origin: int = -1) -> str:
    """Remove a FIFO, directory or symlink at ``target`` (what the one-line error asks)."""
    path = getattr(paths, _TARGETS[target])
    what = planted(path)
    if what is None:
        return f"nothing planted at the {target} any more"
    _remove(path)
    return f"{what} at the {target} removed"


def clear_plants(paths: Any) -> list[str]:
    """At the settling: remove every plant still at any of the four files."""
    return [clear_plant(paths, target) for target in _TARGETS if planted(getattr(paths, target))]


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def files_under(root: Path) -> list[str]:
    """Every file (not directory) below ``root``: what a newcomer left in a switched
    ``XDG_RUNTIME_DIR``/``TMPDIR`` (Highlander must ignore both)."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
