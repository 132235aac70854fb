"""Reading the evidence: the event log (across rotations), the witness and save logs.

The event log is rotated to ``.1`` past 1 MiB, and a writer that opened the
file just before a rotation still appends to the old file.  So the tail keeps
every file it has ever seen at the log's path open and reads each to its
end: no line is lost, however many rotations a long run causes.  A file
that was deleted (a wipe, the second rotation) is closed once it has been
read to its end and stayed deleted for :data:`GONE_GRACE_S`: an open
descriptor keeps a deleted file's blocks, and on the run's small tmpfs
those filled the disk for good after a few wipes (a writer opens the log
for each line, so after the grace nobody can append to it any more, short
of one stopped between its open and its write: the mirror keeps that line).  It opens
what it finds there as warily as the library does (never following a
symlink, never blocking on a FIFO, reading regular files only): the chaos
plants all of those at the log's path.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How long a deleted log file stays open after it was read to its end.
GONE_GRACE_S = 2.0


class EventTail:
    """Every JSON line ever appended to ``path`` (and the files it was rotated to)."""

    def __init__(self, path: str) -> None:
        self.path = path
        # id -> [fd, partial line, when first seen deleted and read to its end]
        self._files: dict[tuple[int, int], list[Any]] = {}
        self._order: list[tuple[int, int]] = []
        self.lines: list[dict[str, Any]] = []
        self.torn = 0
        #: Every file read, open or closed since.
        self.seen = 0

    def _open(self, name: str) -> None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # absent, a symlink (ELOOP), ...
            return
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        if key in self._files or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            return
        self._files[key] = [fd, b"", None]
        self._order.append(key)
        self.seen += 1

    def poll(self) -> None:
        """Read what was appended since the last call (and open a new file after a rotation)."""
        if not self._files:
            self._open(self.path + ".1")
        self._open(self.path)
        for key in list(self._order):
            entry = self._files[key]
            while chunk := os.read(entry[0], 1 << 20):
                entry[1] += chunk
            *complete, entry[1] = entry[1].split(b"\n")
            self._let_go_if_gone(key, entry)
            for raw in complete:
                try:
                    record = json.loads(raw)
                except ValueError:
                    self.torn += 1
                    continue
                if isinstance(record, dict):
                    self.lines.append(record)

    def events(self) -> list[dict[str, Any]]:
        """All events, oldest first (by timestamp; file order among equal ones)."""
        return sorted(self.lines, key=lambda e: e.get("ts", 0.0))

    def _let_go_if_gone(self, key: tuple[int, int], entry: list[Any]) -> None:
        if entry[1] or os.fstat(entry[0]).st_nlink > 0:
            entry[2] = None
            return
        now = time.monotonic()
        if entry[2] is None:
            entry[2] = now
        elif now - entry[2] >= GONE_GRACE_S:
            os.close(entry[0])
            del self._files[key]
            self._order.remove(key)

    @property
    def files(self) -> int:
        return self.seen

    def close(self) -> None:
        for fd, *_ in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files.clear()


@dataclass(frozen=True)
class Witness:
    """One line of the witness log: ``acquire`` or ``release`` by ``pid`` at ``ns``."""

    what: str
    pid: int
    generation: int
    ns: int


def read_witness(path: Path) -> list[Witness]:
    """The witness lines (each written with one ``write`` on an ``O_APPEND`` descriptor)."""
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        what, pid, generation, ns = line.split()
        lines.append(Witness(what, int(pid), int(generation), int(ns)))
    return lines


@dataclass(frozen=True)
class SaveLine:
    """One line of the save log: the save hook of ``pid`` began or ended at ``ns``."""

    what: str  # "start" or "end"
    pid: int
    ns: int


def read_saves(path: Path) -> list[SaveLine]:
    """The save-witness lines of every child (``start PID NS`` / ``end PID NS``)."""
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        what, pid, ns = line.split()
        lines.append(SaveLine(what, int(pid), int(ns)))
    return lines


@dataclass(frozen=True)
class CheckLine:
    """One ``check_current()`` of ``pid``: passed or not, begun and ended at these times."""

    passed: bool
    pid: int
    began: int
    ended: int


def read_checks(path: Path) -> list[CheckLine]:
    """The check-witness lines of every holder and worker (``pass|fail PID BEGIN END``)."""
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        what, pid, began, ended = line.split()
        lines.append(CheckLine(what == "pass", int(pid), int(began), int(ended)))
    return lines
