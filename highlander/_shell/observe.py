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

WARN's warnings are events like any other line on stderr: a short
``event=`` name (``running_as_duplicate``, ``holder_not_answering``), the
facts as fields, and the sentence for a human in ``message=``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from highlander._host.event_log import Event, Outcome
from highlander._host.identity import Expected, mismatch
from highlander._host.log import log
from highlander._host.modes import Mode
from highlander._host.record import HolderRecord, read_record
from highlander._host.settings import Settings
from highlander._host.threads import start_daemon

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

    from highlander._shell.seam import Backend


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
    settings: Settings, then: Callable[[dict[str, Any]], None], backend: Backend | None = None
) -> threading.Thread:
    """Look at the holder over the socket on a daemon thread; pass what was learnt to ``then``.

    ``then`` gets ``answering`` (bool), ``pid`` and, when it failed, ``error``.
    """

    def run() -> None:
        from highlander._host.waiting import BLOCKING, run_blocking  # noqa: PLC0415
        from highlander._shell.client import probe  # noqa: PLC0415 - off the verdict's path

        then(run_blocking(probe(settings, BLOCKING, backend)))

    return start_daemon(run, "highlander-probe", settle=True)


def become_duplicate(
    settings: Settings,
    on_duplicate: Callable[[HolderRecord | None], Any] | None,
    backend: Backend,
) -> tuple[HolderRecord | None, threading.Thread]:
    """Log the verdict, warn (WARN), start the probe; return the verified holder and the probe."""
    record = verified_holder(settings) if backend.name == "local" else backend.holder(settings)
    holder_pid = record.pid if record else None
    settings.events.emit(Event.DETECTED, holder_pid=holder_pid)
    settings.events.emit(Event.DUPLICATE, holder_pid=holder_pid, outcome=Outcome.DUPLICATE)
    warning = settings.mode is Mode.WARN
    if warning:
        warn_duplicate(settings, record)
        if on_duplicate is not None:
            on_duplicate(record)

    def probed(seen: dict[str, Any]) -> None:
        if warning and not seen.get("answering"):
            warn_not_answering(settings, seen)

    return record, probe_in_background(settings, probed, backend)


def warn_duplicate(settings: Settings, record: HolderRecord | None) -> None:
    """WARN: one warning on stderr that this process runs beside the holder ``record``."""
    holder = f"pid {record.pid}" if record else "a process that has not written its record"
    since = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.since_ms / 1000))
        if record
        else "unknown"
    )
    log(
        "warning",
        "running_as_duplicate",
        holder_pid=record.pid if record else None,
        holding_since=since,
        project=settings.root,
        message=(
            f"another {settings.app} ({holder}, holding since {since}) already serves "
            f"{settings.root}; this process runs as a duplicate (HIGHLANDER_MODE=warn)"
        ),
    )


def warn_not_answering(settings: Settings, seen: dict[str, Any]) -> None:
    """WARN: the holder did not answer the signed probe (``seen`` from the probe)."""
    pid = seen.get("pid")
    error = seen.get("error") or "no reply in time"
    log(
        "warning",
        "holder_not_answering",
        holder_pid=pid,
        project=settings.root,
        error=error,
        message=(
            f"the holder of {settings.root} ({f'pid {pid}' if pid else 'unknown'}) is not "
            f"answering ({error}); in AUTO mode it would be replaced. Nothing was "
            "signalled (HIGHLANDER_MODE=warn)"
        ),
    )
