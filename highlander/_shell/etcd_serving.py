"""The etcd holder's serving side: conversations let in, the lease watched, the commit's move.

The incumbent (:mod:`highlander._shell.incumbent`) serves etcd conversations
as it serves the socket's: they reach its private listener through
:func:`~highlander._etcd.holding.let_in`, which runs on the session's loop
for the whole reign.  What it adds: the reign ends (``lease_lost``) when the
keeper says the lease bound passed or the holder's watch sees its key
deleted or put on another lease (:meth:`Session.key_changed
<highlander._etcd.session.Session.key_changed>`), and after a timely ACK_SUCCESSION the
commit is the move of :mod:`highlander._etcd.handover`, carried out until
etcd settles it (:mod:`highlander._core.etcd_commit`).
"""

from __future__ import annotations

import socket
import time

from highlander._core.etcd_commit import Then
from highlander._core.settling import settles_ms
from highlander._etcd.channel import moved_key
from highlander._etcd.handover import incumbent_moves
from highlander._etcd.holding import LeaseLock, let_in
from highlander._etcd.session import HolderValue
from highlander._host.event_log import Event, Outcome
from highlander._shell.etcd_backend import EtcdBackend
from highlander._shell.incumbent import Incumbent
from highlander._shell.serving_guard import step_down


async def lease_lost(incumbent: Incumbent, why: str) -> None:
    """End the reign: this process can no longer prove its lease (``lease_lost``)."""
    await step_down(incumbent, why, event=Event.LEASE_LOST, outcome=Outcome.LEASE_LOST)


async def keep_watch(backend: EtcdBackend, incumbent: Incumbent) -> None:
    """Let conversations in and watch the lease for the whole reign (a serving task)."""
    session = backend.session
    held = session.held
    assert held is not None
    lost = incumbent.runtime.flag()
    why: list[str] = []

    def on_lost(reason: str) -> None:
        why.append(reason)
        lost.set()

    session.on_lost(on_lost)
    from highlander._core.sealing import load  # noqa: PLC0415 - at serving's start, not a frame's
    from highlander._shell import etcd_peer  # noqa: F401, PLC0415 - what a HELLO's check needs

    load()
    # The frames' key (and the code that derives it): the first HELLO waited for it.
    incumbent.settings.key()
    listener = incumbent.reign.listener.sock.getsockname()
    admitted = session.spawn(
        let_in, session, backend.root, held.token, backend.channel_key(), listener,
        backend.peers, lambda: session.lease_kept().lease,
    )  # fmt: skip
    try:
        if not session.holds():
            on_lost("the lease bound passed before serving began")
        await lost.wait()
    finally:
        admitted.cancel()
    await lease_lost(incumbent, f"the etcd reign ended: {why[0] if why else 'gone'}")


async def commit(backend: EtcdBackend, incumbent: Incumbent, sock: socket.socket) -> bool:
    """Move the holder key to the successor on ``sock``; ``True`` once etcd applied it."""
    session, record = backend.session, incumbent.reign.record
    incoming = backend.peers.get(sock.getpeername())
    successor = HolderValue.decode(incoming.opening.value) if incoming else None
    held = session.held
    if incoming is None or successor is None or held is None:
        return False  # not a conversation we can commit to: keep
    now = int(time.time() * 1000)
    history = incumbent.settings.thrash.recent([*record.successions_ms, now], now)
    generation = record.generation + 1
    # The successor's reign begins once it has heard the end of our stream (its
    # exit deadline) and started serving (a HELLO's time): until then the key
    # names a process that cannot answer yet, and a third newcomer that meets
    # it waits (``EtcdBackend.silent``: Leaving) instead of fencing the state away.
    # That moment is when the move lands, which may be long after now (a
    # member slow to answer): a newcomer also counts the grace from when it
    # first sees the moved key (``settles_ms``, :mod:`highlander._core.settling`).
    timeouts = incumbent.settings.timeouts
    begins = now + int((timeouts.exit_grace + timeouts.hello) * 1000)
    settles = settles_ms(timeouts.exit_grace, timeouts.hello, successor.ttl)
    value = successor._replace(
        generation=generation, since_ms=begins, successions_ms=tuple(history),
        settles_ms=settles,
    )  # fmt: skip
    also = ((backend.counter, str(generation).encode()),)
    mark = moved_key(incoming.opening.key)
    session.moving_to = incoming.opening.lease  # before it is sent: the watch sees it land
    then = await incumbent.runtime.to_thread(
        session.call, incumbent_moves, session.client, backend.key, value.encode(), held,
        incoming.opening.lease, session.holds, also, mark,
    )  # fmt: skip
    if then is Then.DEPOSED:
        lock = incumbent.reign.lock
        if isinstance(lock, LeaseLock):
            lock.moved = True  # a handover: nothing to mark at the release
        return True
    if then is Then.STEP_DOWN:
        await lease_lost(incumbent, "etcd did not settle the commit within the lease bound")
    return False
