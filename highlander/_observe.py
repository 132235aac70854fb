"""OBSERVE and WARN: learn who holds the project without asking anything of it.

The verdict, that this process runs as a duplicate, is the kernel's: the
project's lock is held.  Who holds it comes from the holder's record,
checked against ``/proc`` (pid, start time, executable, uid, boot id, and
that the process holds the project's lock, not merely its file).  That
takes tens of microseconds and no cryptography, so a duplicate knows its
verified holder almost as soon as a lock-file library knows "locked".

The signed look at the holder (its HELLO, verified with the token and
against the kernel) then runs on a daemon thread: it reports a holder that
does not answer (events ``timeout`` and ``hung``, and in WARN a warning on
stderr) and never delays the start.  Nothing here signals anybody.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from highlander._identity import Expected, mismatch
from highlander._record import HolderRecord, read_record
from highlander._settings import Settings
from highlander._threads import start_daemon

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any


def record_target(settings: Settings, record: HolderRecord | None) -> Expected | None:
    """The holder as its record describes it, to be verified before any signal."""
    if record is None:
        return None
    return Expected(
        pid=record.pid,
        start_time=record.start_time,
        exe=record.exe,
        uid=record.uid,
        boot_id=record.boot_id,
        lock_path=settings.paths.lock,
    )


def verified_holder(settings: Settings) -> HolderRecord | None:
    """The holder's record, if the kernel confirms it; ``None`` otherwise.

    ``None`` also covers the moment of a handover, when the successor holds
    the lock but has not written its record yet.
    """
    record = read_record(settings.paths.state)
    target = record_target(settings, record)
    if target is None or mismatch(target) is not None:
        return None
    return record


def probe_in_background(
    settings: Settings, then: Callable[[dict[str, Any]], None]
) -> threading.Thread:
    """Look at the holder over the socket on a daemon thread; pass what was learnt to ``then``.

    ``then`` gets ``answering`` (bool), ``pid`` and, when it failed, ``error``.
    """

    def run() -> None:
        from highlander._client import probe  # noqa: PLC0415 - off the verdict's path
        from highlander._waiting import BLOCKING, run_blocking  # noqa: PLC0415

        then(run_blocking(probe(settings, BLOCKING)))

    return start_daemon(run, "highlander-probe")
