"""The client side of SAVE, for the newcomer and for ``highlander stop``: ask, follow, answer.

:func:`request_save` sends SAVE (intent SUCCEED or STOP), follows the
holder's PROGRESS reports and returns whatever ends them (SAVED, REFUSED,
BUSY, or the end of the stream); a missed deadline raises :class:`Overdue`.
What the answer means is the caller's: the newcomer takes over
(:mod:`highlander._shell.handover`), ``stop`` acknowledges and lets it leave.
:func:`refusal_error` is the one mapping from a REFUSED to the error raised.

A holder's save reports PROGRESS; one that stops advancing for ``stall`` is
hung.  But on a loaded machine a healthy saver can be kept off the CPU past
``stall`` (guarantee 8: a healthy holder is never signalled because the
machine is loaded).  So a newcomer (``spare_starved``) asks the kernel when
the stall deadline passes: a holder that is running or waiting for a CPU or
the disk, and used less than ``stall`` of CPU meanwhile, was starved; its
stall timer restarts (``timeout`` event, ``busy=True``).  The absolute
``ceiling`` still holds.
"""

from __future__ import annotations

from collections.abc import Callable

from highlander._core.connection import Closed
from highlander._core.deadlines import Phase, starved
from highlander._core.errors import (
    AuthenticationError,
    ModeRefusedError,
    OtherAppError,
    Reason,
    SaveFailedError,
    SuccessionRefused,
    ThrashError,
    VersionMismatchError,
)
from highlander._core.messages import Intent, Message, ProgressReport, Refused, Save
from highlander._host.event_log import Event
from highlander._host.identity import own_identity, run_state
from highlander._host.settings import Settings
from highlander._shell.client import Greeting
from highlander._shell.wire import Baseline, Overdue, receive_event, send_message

#: The error each REFUSED reason raises; one the protocol never sends in
#: answer to SAVE reads as a failed save.
_REFUSALS: dict[Reason, Callable[[str], SuccessionRefused]] = {
    Reason.AUTH: AuthenticationError,
    Reason.VERSION: VersionMismatchError,
    Reason.MODE: ModeRefusedError,
    Reason.THRASH: ThrashError,
    Reason.INTERNAL: SaveFailedError,
    Reason.OTHER_APP: OtherAppError,
}


def refusal_error(refused: Refused, message: str) -> SuccessionRefused:
    """The error for the holder's REFUSED: the subclass that says what to do, with ``message``."""
    return _REFUSALS.get(refused.reason, SaveFailedError)(message)


async def request_save(
    settings: Settings,
    greeting: Greeting,
    intent: Intent,
    report: Callable[[ProgressReport], None],
    fds: list[int] | None = None,
    *,
    spare_starved: bool = False,
    meanwhile: Callable[[], None] | None = None,
) -> Message | Closed:
    """SAVE with ``intent``; each PROGRESS to ``report``; return the answer that ends them.

    Descriptors that come with the answer (SAVED's lock and listener) are
    appended to ``fds``; without it they are closed.  ``meanwhile`` runs
    once SAVE is sent, while the incumbent saves.  Raises :class:`Overdue`.
    """
    events, conn, peer, waiter = settings.events, greeting.conn, greeting.peer, greeting.waiter
    assert conn.peer_nonce is not None
    me = own_identity()
    nonces = conn.local_nonce.hex(), conn.peer_nonce.hex()
    await send_message(
        greeting.sock, conn, Save(me.pid, me.start_time, *nonces, intent, settings.app), waiter
    )
    before = Baseline(peer.pid if spare_starved else None)
    if meanwhile is not None:
        meanwhile()
    while True:
        try:
            event = await receive_event(greeting.sock, conn, waiter, fds, on_wait=before.take)
        except Overdue as exc:
            after = run_state(peer.pid) if spare_starved else None
            stall = settings.timeouts.stall
            if exc.deadline.phase is not Phase.STALL or not starved(before.sample, after, stall):
                raise
            conn.spare(waiter.now())
            events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="stall", busy=True)
            before.sample = after
            continue
        if not isinstance(event, ProgressReport):
            return event
        report(event)
        before.sample = None  # the next wait is a new stall window: sampled when it begins
