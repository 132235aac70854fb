"""The wrapper's tree on disk (``<name>.tree``): what a successor ends when a wrapper died.

A wrapper killed without warning cannot end its tree.  Its guard SIGKILLs
the command's process group (:mod:`highlander._commands.tree`), but a descendant that
left the group (``setsid``, a daemon) survives it.  So the holding wrapper
keeps a record of its tree beside the other files of the project: each
process as pid and start time, written atomically whenever the tree changes
(looked at every :data:`FIRST_LOOK` seconds at first, then less often, up to
:data:`LAST_LOOK`).  A wrapper that starts holding the project ends what
the previous record lists (:func:`end_left_over`), each process only after
its pid and start time are verified through a pidfd; then it removes the
record.  A wrapper that ends its own tree removes its record first, so a
succession finds none.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading

from highlander._commands.tree import Tree
from highlander._core.errors import HighlanderError
from highlander._core.values import Value
from highlander._host.descendants import open_verified, readable
from highlander._host.event_log import Event
from highlander._host.files import install, open_regular, stage
from highlander._host.identity import boot_id, own_identity
from highlander._host.settings import Settings
from highlander._host.termination import KILL_WAIT, signal_child

#: Seconds between looks at the tree: short at first (a launcher starts its
#: server within a second or two), doubling while nothing changes.
FIRST_LOOK = 0.2
LAST_LOOK = 5.0


class TreeRecord(Value):
    """A wrapper's tree: who wrote it, in which boot, and its processes."""

    boot_id: str
    #: The wrapper as ``[pid, start_time]``.
    wrapper: list[int]
    generation: int
    pgid: int
    #: ``[pid, start_time]`` of each process of the tree.
    processes: list[list[int]]


def tree_path(settings: Settings) -> str:
    """Where the holder of ``settings``' project records its tree."""
    return os.path.join(settings.paths.runtime_dir, settings.paths.base + ".tree")


def read_tree(path: str) -> TreeRecord | None:
    """The record at ``path``; ``None`` if absent, unsafe or damaged (it only informs)."""
    try:
        with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
            data = json.loads(handle.read(1024 * 1024))
        record = TreeRecord(**data)
    except (OSError, ValueError, TypeError, HighlanderError):
        return None
    pairs = [record.wrapper, *record.processes]
    valid = all(
        isinstance(pair, list) and len(pair) == 2 and all(_is_count(n) for n in pair)
        for pair in pairs
    )
    return record if valid and isinstance(record.boot_id, str) else None


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def remove_tree(path: str) -> None:
    """Remove the record (nothing there is fine)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Recorder:
    """Keeps ``<name>.tree`` current while the command runs, on a daemon thread.

    Without a path (a duplicate: the holder owns the record) it only reaps
    descendants reparented to the wrapper that have exited.
    """

    def __init__(self, tree: Tree, path: str | None, generation: int) -> None:
        self.tree = tree
        self.path = path
        self.generation = generation
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._written: list[list[int]] | None = None

    def start(self) -> None:
        """Write the record now and start keeping it current."""
        self._look()
        threading.Thread(target=self._run, name="highlander-tree", daemon=True).start()

    def _run(self) -> None:
        interval = FIRST_LOOK
        while not self._stopped.wait(interval):
            changed = self._look()
            interval = FIRST_LOOK if changed else min(interval * 2, LAST_LOOK)

    def _look(self) -> bool:
        """Reap exited orphans; rewrite the record if the tree changed; return whether it did."""
        with self._lock:
            if self._stopped.is_set():
                return False
            processes = sorted([p.pid, p.start_time] for p in self.tree.look())
            if processes == self._written:
                return False
            self._written = processes
            if self.path is not None:
                me = own_identity()
                record = TreeRecord(
                    boot_id(), [me.pid, me.start_time], self.generation, self.tree.pgid, processes
                )
                try:
                    data = json.dumps(record._asdict(), separators=(",", ":")).encode()
                    install(stage(self.path, data), self.path)
                except (OSError, HighlanderError):
                    self._written = None  # try again at the next look
            return True

    def stop(self) -> None:
        """Stop keeping the record (the tree is being ended); the file stays until :meth:`discard`.

        Kept while the tree winds down: if the wrapper is killed meanwhile,
        the successor still finds what to end.
        """
        with self._lock:
            self._stopped.set()

    def discard(self) -> None:
        """Stop, and remove the record (the tree has ended)."""
        self.stop()
        if self.path is not None:
            remove_tree(self.path)


def end_left_over(settings: Settings) -> int:
    """A new holder: end what the previous wrapper's record lists; return how many were ended.

    Only processes whose pid and start time (this boot) match the record are
    signalled, through a pidfd opened before the check: SIGTERM, ``term_grace``,
    SIGKILL.  Events ``terminated`` and ``killed`` name each one.
    """
    path = tree_path(settings)
    record = read_tree(path)
    if record is None or record.boot_id != boot_id():
        remove_tree(path)
        return 0
    why = f"left over from the tree of pid {record.wrapper[0]} (generation {record.generation})"
    events, me = settings.events, os.getpid()
    pidfds: dict[tuple[int, int], int] = {}
    for pid, start in record.processes:
        if pid != me and (fd := open_verified(pid, start)) is not None:
            pidfds[(pid, start)] = fd
    try:
        for event, signum, wait in (
            (Event.TERMINATED, signal.SIGTERM, settings.timeouts.term_grace),
            (Event.KILLED, signal.SIGKILL, KILL_WAIT),
        ):
            alive = {key: fd for key, fd in pidfds.items() if not readable([fd], 0)}
            for (pid, start), fd in alive.items():
                if signal_child(fd, signum):
                    events.emit(
                        event, peer_pid=pid, start_time=start, signal=signum.name, reason=why
                    )
            _all_ended(list(alive.values()), wait)
    finally:
        for fd in pidfds.values():
            os.close(fd)
    remove_tree(path)
    return len(pidfds)


def _all_ended(fds: list[int], timeout: float) -> None:
    """Wait until every pidfd in ``fds`` is readable (its process ended), at most ``timeout``."""
    import time  # noqa: PLC0415 - only a successor with leftovers gets here

    until = time.monotonic() + timeout
    pending = list(fds)
    while pending and readable(pending, until - time.monotonic()):
        pending = [fd for fd in pending if not readable([fd], 0)]
