"""The successor's side of a handover, as steps on files and descriptors.

:mod:`highlander._shell.handover` decides (with the rules of
:mod:`highlander._core.commit`); this module does: adopt the lock and the
listener that came with SAVED, stage the new reign's record before the
commit (everything that can fail for want of space fails here), and, once
the handover committed, take the listener and install the record.
"""

from __future__ import annotations

import contextlib
import os

from highlander._core.errors import HighlanderError, RemoteProtocolError, UnsafeFileError
from highlander._core.values import Value
from highlander._host.claim import ProjectLock, Reign, kept_beside, new_record
from highlander._host.event_log import Event, Outcome
from highlander._host.fencing import store_floor
from highlander._host.files import current_file_id
from highlander._host.identity import Expected
from highlander._host.record import (
    HolderRecord,
    install_record,
    owed_exits,
    read_record,
    stage_record,
)
from highlander._host.settings import Settings

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from highlander._host.listener import Listener


def adopt_handover(settings: Settings, fds: list[int]) -> tuple[ProjectLock, Listener] | None:
    """Adopt the lock and the listener a predecessor passed with SAVED (in that order).

    ``None`` (both closed) when the lock that came holds nothing now: the
    predecessor kept the project after our ACK deadline (we were stopped or
    starved with SAVED unread) or the rendezvous was replaced meanwhile.  The
    offer went stale, and the newcomer asks again.
    """
    from highlander._host.listener import Listener  # noqa: PLC0415 - only a successor adopts

    if len(fds) != 2:
        raise RemoteProtocolError(
            f"SAVED arrived with {len(fds)} descriptors instead of the lock and the listener"
        )
    lock = ProjectLock.adopt(fds[0], settings.paths.lock)
    if lock == "stale":
        with contextlib.suppress(OSError):
            os.close(fds[1])
        return None
    listener = Listener.adopt(fds[1], settings.paths)
    if isinstance(lock, ProjectLock) and listener is not None:
        return lock, listener
    if isinstance(lock, ProjectLock):
        lock.release()
    if listener is not None:
        listener.close(unlink=False)
    raise RemoteProtocolError("SAVED carried descriptors that are not this project's")


class Staged(Value):
    """A successor's takeover, prepared before the handover commits."""

    record: HolderRecord
    #: The record, written to a private file beside ``.state``, ready to rename.
    path: str
    #: The deposed holders whose exit the new reign owes (our predecessor first),
    #: which its record names so that they pass on should the reign end first.
    owed: tuple[Expected, ...]


def prepare_takeover(
    settings: Settings, lock: ProjectLock, *, generation: int, predecessor: Expected
) -> Staged:
    """Stage the record of the reign after ``generation``: all that can fail, before the commit.

    Raises ``OSError`` (no space, ...) or
    :class:`~highlander._core.errors.UnsafeFileError` (a ``.state`` that is a
    directory); the caller then declines the handover and the incumbent keeps
    the project.
    """
    previous = read_record(settings.paths.state)
    kept, copies = kept_beside(settings, lock)
    floor = max(kept, generation)
    # The predecessor's debts too: those it had not seen out yet (from its record,
    # or the copies in the lock file and the floor if the record was damaged) are ours now.
    owed = owed_exits(previous, predecessor, copies)
    record = new_record(settings, previous, successor_of=generation, floor=floor, owed=owed)
    return Staged(record, stage_record(settings.paths.state, record), owed)


def take_over(
    settings: Settings,
    lock: ProjectLock,
    listener: Listener,
    staged: Staged,
    *,
    handoff: dict[str, Any] | None,
    duration_ms: Callable[[], int],
) -> Reign:
    """Begin the reign the handover committed to us: take the listener, install the record.

    ``duration_ms`` reads how long the handover has taken (on the newcomer's clock).
    """
    listener.own()
    if listener.file_id is None or listener.file_id != current_file_id(settings.paths.socket):
        # The socket file was deleted or replaced during the handover (or the
        # incumbent published a fresh one meanwhile): publish ours (we hold
        # the lock) rather than reign unreachable.  Past the commit nothing
        # may undo the takeover: if the path cannot take a socket now (a
        # directory there), keep the adopted listener; the rendezvous watch
        # says what is in the way and publishes once it is gone.
        try:
            fresh, _ = type(listener).bind(settings.paths)
        except (OSError, HighlanderError) as exc:
            settings.events.emit(
                Event.SOCKET_BLOCKED, socket=settings.paths.socket, reason=str(exc)
            )
            listener = listener._replace(file_id=None)
        else:
            listener.close(unlink=False)
            listener = fresh
    record, problem = staged.record, ""
    try:
        install_record(staged.path, settings.paths.state)
    except (OSError, UnsafeFileError) as exc:
        # Past the commit the project is ours whatever happens to the file;
        # the record only informs, and the lock file keeps the generation.
        problem = f"record not written: {exc}"
    lock.store_generation(record.generation, staged.owed)
    store_floor(settings.floor_path, record.generation, staged.owed)
    settings.events.emit(
        Event.CLAIMED,
        outcome=Outcome.SUCCEEDED,
        generation=record.generation,
        peer_pid=staged.owed[0].pid,
        duration_ms=duration_ms(),
        **({"reason": problem} if problem else {}),
    )
    return Reign(lock, listener, record, handoff, Outcome.SUCCEEDED, staged.owed)
