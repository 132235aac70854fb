"""The processes below this one, as ``/proc`` shows them, and how to signal them safely.

Linux only, as ``highlander run`` is: one pass over ``/proc`` finds every
descendant with its parent, process group and start time from a single
read each, so what is recorded about a process describes one process even
if its pid is reused right after.  A process is signalled only through a
pidfd opened before its start time and uid are checked (:func:`open_verified`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from highlander._core.values import Value
from highlander._host.identity import process_identity, stat_fields


class Proc(Value):
    """One process as one read of ``/proc/<pid>/stat`` saw it."""

    pid: int
    ppid: int
    pgid: int
    start_time: int
    state: str

    @property
    def alive(self) -> bool:
        """Not a zombie (a zombie has ended; it only waits to be reaped)."""
        return self.state not in "ZXx"


def _proc(pid: int) -> Proc | None:
    fields = stat_fields(pid)
    if fields is None:
        return None
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[19]), fields[0].decode())


def descendants(root: int) -> list[Proc]:
    """Every process below ``root`` now, parents before children (from one pass over /proc)."""
    children: dict[int, list[Proc]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (proc := _proc(int(name))) is not None:
            children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += [kid.pid for kid in kids]
    return found


def open_verified(pid: int, start_time: int) -> int | None:
    """A pidfd on ``pid`` if it is still the process that started at ``start_time``; else ``None``.

    The pidfd is opened first: once it is, a reused pid cannot redirect it.
    A process of another uid (a set-user-ID program) is not ours to signal.
    """
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return None
    who = process_identity(pid)
    if who is None or who.start_time != start_time or who.uid != os.geteuid():
        os.close(fd)
        return None
    return fd


def readable(fds: Sequence[int], timeout: float | None) -> bool:
    """Whether any of ``fds`` (pidfds: readable once their process ended) is readable in time.

    ``timeout`` ``None``: wait as long as it takes.
    """
    import selectors  # noqa: PLC0415 - select() refuses descriptors from 1024 on

    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        return bool(sel.select(None if timeout is None else max(timeout, 0.0)))
