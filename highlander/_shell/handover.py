"""The newcomer's side of the commit point: from a verified SAVED to holding, or not.

The rules are :mod:`highlander._core.commit`'s (pure); this module carries them
out with the socket, the kernel and the files:

1. adopt the lock and listener that came with SAVED, without using them;
2. prepare everything of the takeover that can fail (the staged record);
   when that fails, decline with REFUSED ``prepare``, let go of the copies and
   raise :class:`TakeoverError`: the incumbent keeps the project;
3. send ACK_SUCCESSION and hear how the incumbent answered: REFUSED, end of
   stream, or nothing within the exit deadline;
4. ask the kernel whether the incumbent let go of the lock file (or is gone);
5. commit (listen, install the record), abort (close our copies, discard
   the staged record), or end a hung incumbent with the verified kill and
   then commit.
"""

from __future__ import annotations

import os

from highlander._core.commit import Answer, Verdict, newcomer_decides
from highlander._core.connection import Closed
from highlander._core.deadlines import Phase, grace_again
from highlander._core.errors import Reason, TakeoverError, UnsafeFileError
from highlander._core.messages import AckSuccession, Refused, Saved
from highlander._host.claim import Reign
from highlander._host.event_log import Event
from highlander._host.files import current_file_id
from highlander._host.identity import (
    Expected,
    fd_holds_flock,
    is_halted,
    let_go,
    run_state,
)
from highlander._host.record import discard_record
from highlander._host.settings import Settings
from highlander._host.waiting import Waiter
from highlander._shell.client import Greeting
from highlander._shell.takeover import adopt_handover, prepare_takeover, take_over
from highlander._shell.wire import Baseline, Overdue, receive_event, send_message

#: Why a newcomer let go of a SAVED it read only after the incumbent's ACK deadline.
STALE = "the incumbent kept the project: the lock that came with SAVED holds nothing now"
#: The ways a conversation breaks when the incumbent's end is gone or not reading.
_BROKEN = (BrokenPipeError, ConnectionResetError, TimeoutError)


async def conclude(
    settings: Settings, greeting: Greeting, saved: Saved, fds: list[int], started: float
) -> Reign | None:
    """Commit the handover after ``saved``, or abort it (``None``: the incumbent kept it).

    ``fds`` are the descriptors that came with SAVED; this takes them over
    (the list is emptied).  ``started``: when SAVE was sent, on the waiter's clock.
    """
    events, peer = settings.events, greeting.peer
    sock, conn, waiter = greeting.sock, greeting.conn, greeting.waiter
    adopted = adopt_handover(settings, fds)
    fds.clear()
    if adopted is None:
        ms = _ms(started, waiter)
        events.emit(Event.HANDOVER_ABORTED, peer_pid=peer.pid, reason=STALE, duration_ms=ms)
        return None
    lock, listener = adopted
    staged = None
    committed = False
    try:
        try:
            staged = prepare_takeover(
                settings, lock, generation=saved.generation, predecessor=_target(greeting)
            )
        except (OSError, UnsafeFileError) as exc:
            raise await _decline(settings, greeting, exc) from exc
        answer = Answer.SILENT
        try:
            await send_message(sock, conn, AckSuccession(), waiter)
        except _BROKEN:
            answer = Answer.SEND_FAILED
        verdict, answer = await _verdict(settings, greeting, lock.fd, answer)
        why = answer.value
        if verdict is Verdict.END_INCUMBENT:
            # The incumbent may run again before the signal (it was only paused):
            # then it is spared, and what it answers now decides.
            verdict = await _end_incumbent(settings, greeting, lock.fd)
        if verdict is Verdict.COMMIT and not _still_ours(settings, lock.fd):
            # The incumbent moved its lock away (it kept the project), or the
            # lock file is no longer the one at the rendezvous: a stale copy.
            verdict, why = Verdict.ABORT, "our copy of the lock is no longer the project's"
        if verdict is Verdict.ABORT:
            events.emit(
                Event.HANDOVER_ABORTED,
                peer_pid=peer.pid,
                reason=why,
                duration_ms=_ms(started, waiter),
            )
            return None
        committed = True
    finally:
        if not committed:
            listener.close(unlink=False)
            lock.release()
            if staged is not None:
                discard_record(staged.path)
    return take_over(
        settings,
        lock,
        listener,
        staged,
        handoff=saved.handoff,
        duration_ms=lambda: _ms(started, waiter),
    )


async def _verdict(
    settings: Settings, greeting: Greeting, lock_fd: int, answer: Answer
) -> tuple[Verdict, Answer]:
    """Hear the incumbent's answer, then ask the kernel whether it let go of the lock."""
    answer = await hear(settings, greeting, answer)
    st = os.fstat(lock_fd)
    released = let_go(greeting.peer.pid, greeting.hello.start_time, (st.st_dev, st.st_ino))
    return newcomer_decides(answer, released), answer


async def _end_incumbent(settings: Settings, greeting: Greeting, lock_fd: int) -> Verdict:
    """End the silent incumbent by the verified kill; or, if it resumed meanwhile, hear it again."""
    from highlander._host.termination import terminate  # noqa: PLC0415 - rare: off the usual path

    events, peer = settings.events, greeting.peer
    target = _target(greeting)
    halted = is_halted(peer.pid)
    events.emit(Event.HUNG, peer_pid=peer.pid, phase=Phase.EXIT.value)
    waiter = greeting.waiter
    if await terminate(target, settings.timeouts, events, "missed exit", waiter, halted=halted):
        return Verdict.COMMIT
    # Its deadline is behind us: give the resumed incumbent a fresh exit_grace.
    await waiter.readable(greeting.sock, settings.timeouts.exit_grace)
    verdict, _ = await _verdict(settings, greeting, lock_fd, Answer.SILENT)
    if verdict is Verdict.END_INCUMBENT:  # silent again though running: hung after all
        await terminate(target, settings.timeouts, events, "missed exit", waiter)
        return Verdict.COMMIT
    return verdict


def _target(greeting: Greeting) -> Expected:
    """The incumbent as its verified HELLO and the kernel named it: what a fence may end."""
    peer, hello = greeting.peer, greeting.hello
    return Expected(peer.pid, hello.start_time, hello.exe, peer.uid, None, None)


def _still_ours(settings: Settings, lock_fd: int) -> bool:
    """Whether our copy of the lock holds it and is the lock file at the rendezvous path."""
    st = os.fstat(lock_fd)
    here = current_file_id(settings.paths.lock)
    return fd_holds_flock(lock_fd) and here == (st.st_dev, st.st_ino)


async def hear(settings: Settings, greeting: Greeting, answer: Answer) -> Answer:
    """How the incumbent answered our ACK (or what was queued when it could not be sent).

    An incumbent the machine keeps off the CPU cannot act on the ACK in
    ``exit_grace``; it is healthy (guarantee 8), so while the kernel shows it
    starved its grace restarts (:func:`~highlander._core.deadlines.grace_again`).
    """
    conn, peer, waiter = greeting.conn, greeting.peer, greeting.waiter
    limit = settings.timeouts.exit_grace
    local = greeting.local  # another host's process: only its answer counts
    before, began = Baseline(peer.pid if local else None), waiter.now()
    while True:
        try:
            event = await receive_event(greeting.sock, conn, waiter, on_wait=before.take)
            break
        except Overdue:
            after = run_state(peer.pid) if local else None
            if not grace_again(before.sample, after, waiter.now() - began, limit):
                return Answer.SILENT
            conn.spare(waiter.now())
            settings.events.emit(Event.TIMEOUT, peer_pid=peer.pid, phase="exit", busy=True)
            before.sample = after
        except _BROKEN:
            return Answer.CLOSED if answer is Answer.SILENT else answer
    if isinstance(event, Refused):
        return Answer.REFUSED
    assert isinstance(event, Closed)
    return Answer.CLOSED if answer is Answer.SILENT else answer


async def _decline(
    settings: Settings, greeting: Greeting, exc: OSError | UnsafeFileError
) -> TakeoverError:
    """Tell the incumbent we cannot take over (it keeps the project); the error to raise."""
    if isinstance(exc, UnsafeFileError):
        where, why = exc.path, str(exc)
    else:
        where, why = exc.filename or settings.paths.state, exc.strerror or str(exc)
    detail = f"the successor cannot write {where}: {why}"
    refused = Refused(Reason.PREPARE, detail[:1024])
    try:
        conn, waiter = greeting.conn, greeting.waiter
        await send_message(greeting.sock, conn, refused, waiter)
    except _BROKEN:
        pass  # the incumbent is gone: nothing changed for it either way
    settings.events.emit(Event.HANDOVER_ABORTED, peer_pid=greeting.peer.pid, reason=detail)
    return TakeoverError(
        f"cannot take the project over: {where}: {why}. The incumbent (pid "
        f"{greeting.peer.pid}) keeps it and its state; free space on that filesystem "
        f"or remove what is in the way (`highlander doctor` checks), then start again"
    )


def _ms(started: float, waiter: Waiter) -> int:
    return int((waiter.now() - started) * 1000)
