"""The fencing generation's floor, kept where a wipe of the runtime directory cannot reach.

A fencing token that repeats is worse than none: a storage layer that
accepted writes of generation 3 would accept them again from a new holder at
generation 3.  The record and the lock file both keep the generation, but
both live in the runtime directory, which a ``/tmp`` cleaner or a logout can
empty.  So every claim also writes the generation it took to
``~/.local/state/highlander/generations/<app>-<project hash>``, and every
claim starts above it.

The floor keeps a third copy of the reign's debts of exit too (the line after
the generation, as in the lock file: :func:`~highlander._host.record.copy_of`),
so that a deposed process still owed an exit is not forgotten when the lock
file is deleted or replaced *and* the record damaged while its debtor cannot
act (reliability.md, issue #16).

The floor is a floor, not a lock: it is read and written by whoever holds
the project's lock, never decides who holds anything, and a missing or
unreadable floor (no home, a read-only home) only loses this extra
protection, never a claim.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from highlander._host.record import COPY_BYTES, copy_of, read_copy
from highlander._host.rendezvous import home_dir

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

    from highlander._host.identity import Expected

# O_NONBLOCK: a FIFO planted at the path fails at once (ENXIO) instead of hanging.
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def floor_path(base: str, env: Mapping[str, str]) -> str | None:
    """Where the floor of the project named ``base`` lives; ``None`` without a home."""
    home = home_dir(os.geteuid(), env)
    if home is None:
        return None
    return os.path.join(home, ".local", "state", "highlander", "generations", base)


def read_floor(path: str | None) -> tuple[int, list[list[Any]]]:
    """The generation and the debts of exit kept at ``path``; ``(0, [])`` if none or unreadable."""
    if path is None:
        return 0, []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0, []
    try:
        return read_copy(os.pread(fd, COPY_BYTES, 0))
    except OSError:
        return 0, []
    finally:
        os.close(fd)


def store_floor(path: str | None, generation: int, owed: tuple[Expected, ...] = ()) -> None:
    """Remember ``generation`` and the reign's debts at ``path`` (best effort: see above)."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        try:
            fd = os.open(path, _WRITE, 0o600)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(path, _WRITE, 0o600)
        try:
            data = copy_of(generation, owed)
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)
