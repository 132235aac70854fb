"""The holder's side of the etcd backend, in the shapes the incumbent already serves.

Above the seam an incumbent holds a lock and accepts connections on a
listening socket.  Over etcd the "lock" is the holder key on this session's
lease, held while the lease bound holds (:class:`LeaseLock`); and every
conversation a newcomer opens in etcd is bridged (:func:`channel.bridge
<highlander._etcd.channel.bridge>`) to a connection this process makes to a
private listener of its own (:func:`private_listener`), which the incumbent
accepts like any other.  The connecting end is bound to a name of its own,
so the incumbent learns which conversation (and so which newcomer, by its
opening key) a connection carries from ``getpeername`` (:func:`let_in`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable

from highlander._core.values import Value
from highlander._etcd import api
from highlander._etcd.channel import Channel, accept_channel, carry, incoming
from highlander._etcd.claim import mark_released
from highlander._etcd.session import Session
from highlander._host.claim import ProjectLock
from highlander._host.listener import BACKLOG, Listener

#: Names in the abstract namespace (no file, gone with the process).
_PREFIX = b"\0highlander-etcd-"


class LeaseLock(ProjectLock):
    """The claim on etcd through the lock's interface: held while the lease bound holds.

    Not registered with the fork handler: a forked child never holds (its
    pid is not the session's), and closing nothing in it is all it needs.
    """

    def __init__(self, session: Session, key: bytes, generation: int) -> None:
        """The reign ``generation`` of the holder ``key`` on ``session``'s lease."""
        self.fd = -1  # no descriptor: nothing to register with the fork handler
        self.forked = False
        self.session = session
        self.key = key
        self.generation = generation
        #: Set once the commit moved the key to a successor: a handover, not a release.
        self.moved = False
        self._pid = os.getpid()
        self._released = False

    @property
    def held(self) -> bool:
        """Whether this process may act as holder now (its own clock: no request)."""
        return not self._released and os.getpid() == self._pid and self.session.holds()

    def release(self) -> None:
        """Let go: revoke the lease (the holder key goes with it unless it moved on).

        A lease already past its bound, or refused, is not revoked: it ends by
        itself within the bound's margin, and asking a cluster that does not
        answer would hold up the step-down (``on_deposed``) by the revoke's budget.
        """
        if self._released or os.getpid() != self._pid:
            return
        self._released = True
        keeper, held = self.session.keeper, self.session.held
        alive = keeper is not None and keeper.holds()
        if alive and held is not None and not self.moved:
            # Left in the counter for the next claim (``claimed_free``); a handover
            # skips it, so the successor's start waits for no extra request.
            with contextlib.suppress(Exception):  # unmarked, the next claim says stale
                session = self.session
                session.call(mark_released, session.client, self.key, held, self.generation)
        self.session.close(revoke=alive)


def private_listener() -> Listener:
    """A listener no path leads to: only this process connects (the incumbent checks)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        sock.bind(_PREFIX + os.urandom(8).hex().encode())
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return Listener(sock, "", None)


class Incoming(Value):
    """A conversation a newcomer opened: its opening key (its lease, what it said it is)."""

    opening: api.KeyValue


async def let_in(
    session: Session,
    root: bytes,
    since: int,
    channel_key: bytes,
    listener: bytes,
    peers: dict[bytes, Incoming],
    lease: Callable[[], int],
) -> None:
    """Bridge every conversation opened after revision ``since`` to ``listener`` (forever).

    ``peers`` maps each connecting end's name to its conversation while the
    bridge runs; ``lease``: the lease this side's keys ride on now.
    """
    client = session.client
    watch = incoming(client, root, since)
    async with client.runtime.group() as tasks, contextlib.aclosing(watch) as opened:
        async for conversation, opening in opened:
            channel = accept_channel(
                client, root, conversation, opening.mod_revision, lease(), channel_key
            )
            tasks.spawn(_carry, channel, listener, peers, Incoming(opening))


async def _carry(
    channel: Channel, listener: bytes, peers: dict[bytes, Incoming], one: Incoming
) -> None:
    end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    name = _PREFIX + channel.conversation.hex().encode()
    peers[name] = one  # before the connect: the incumbent may accept at once, on its thread
    try:
        end.bind(name)
        end.setblocking(False)
        end.connect(listener)
    except OSError:  # the incumbent's queue is full or it is closing: the newcomer times out
        peers.pop(name, None)
        end.close()
        return
    try:
        # Before our answer (the HELLO the incumbent writes at its accept): the
        # newcomer's reply reaches us at once.  No ``here`` of ours first: the
        # newcomer reads nothing in it, and it would put a round trip before HELLO.
        await channel.listen(channel.since + 1)
        await carry(channel, end)
    finally:
        await channel.close()  # if the bridge never began, the watch listen() opened
        peers.pop(name, None)
        end.close()
