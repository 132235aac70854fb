"""Migrating from a lock or pid file of a previous single-instance scheme.

With ``legacy_lock=PATH``, the process that claims the project (so no live
Highlander holder exists) looks at the old file once:

* no pid in it, or not a regular file: kept (we cannot tell), reported;
* its pid is dead: removed;
* its pid is alive but the process started after the file was last
  written, so it cannot be the writer (the pid was reused): removed;
* otherwise the old holder may still be running: kept, reported.

Nothing is ever signalled here.  Every decision is one event.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from functools import cache

from highlander._host.event_log import Event, EventLog
from highlander._host.identity import process_identity

_PID = re.compile(rb"\d+")
#: Start times (clock ticks, btime in whole seconds) are this precise.
_CLOCK_SLACK = 1.5


@cache
def _boot_time() -> float:
    with open("/proc/stat", "rb") as handle:
        for line in handle:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")  # pragma: no cover


def started_at(pid: int) -> float | None:
    """Wall-clock start of ``pid`` (seconds since the epoch), or ``None`` if gone."""
    identity = process_identity(pid)
    if identity is None:
        return None
    return _boot_time() + identity.start_time / os.sysconf("SC_CLK_TCK")


def migrate(path: str, events: EventLog) -> bool:
    """Apply the rules above to the legacy lock at ``path``; return whether it was removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        events.emit(Event.LEGACY_KEPT, path=path, reason="not a regular file")
        return False
    with open(path, "rb") as handle:
        found = _PID.search(handle.read(4096))
    pid = int(found.group()) if found else None
    if pid is None or pid == 0:
        events.emit(Event.LEGACY_KEPT, path=path, reason="no pid in the file")
        return False
    start = started_at(pid)
    if start is None:
        reason = f"pid {pid} is dead"
    elif start > st.st_mtime + _CLOCK_SLACK:
        reason = f"pid {pid} started after the file was written: the pid was reused"
    else:
        events.emit(
            Event.LEGACY_KEPT, path=path, holder_pid=pid, reason=f"pid {pid} may still hold it"
        )
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    events.emit(Event.LEGACY_REMOVED, path=path, holder_pid=pid, reason=reason)
    return True
