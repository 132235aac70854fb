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
from collections import deque
from collections.abc import AsyncGenerator, Callable

from highlander._core.values import Value
from highlander._etcd import api
from highlander._etcd.channel import (
    HOLDER,
    Channel,
    ChannelBroken,
    accept_channel,
    carry,
    newcomers_keys,
    opens,
)
from highlander._etcd.claim import mark_released
from highlander._etcd.session import Session, holder_key
from highlander._host.claim import ProjectLock
from highlander._host.listener import BACKLOG, Listener

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._host.waiting import Flag, Runtime

#: Names in the abstract namespace (no file, gone with the process).
_PREFIX = b"\0highlander-etcd-"
#: A conversation's keys read from the watch and not yet by its bridge, at most.  A
#: newcomer writes a handful (here, a chunk per frame it sends, fin); one that
#: writes more than this faster than the incumbent reads is cut off (its
#: conversation ends), rather than held in memory or let stall the others'.
FEED_BOUND = 64


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
        if alive and held is not None and not self.moved and self.session.lost is None:
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


class Feed:
    """One conversation's keys, as the holder's one watch on every conversation delivers them."""

    def __init__(self, runtime: Runtime) -> None:
        """An empty feed on ``runtime`` (the session's loop: the watch's and the bridge's)."""
        self._runtime = runtime
        self._keys: deque[api.Event] = deque()
        self._arrived: Flag | None = None
        self._overflowed = False

    def put(self, event: api.Event) -> None:
        """One more of the conversation's keys (dropped, and the feed broken, past the bound)."""
        if len(self._keys) >= FEED_BOUND:
            self._overflowed = True
        else:
            self._keys.append(event)
        if self._arrived is not None:
            self._arrived.set()

    async def events(self) -> AsyncGenerator[api.Event, None]:
        """The keys in order, as they come; :class:`ChannelBroken` once the bound was passed."""
        while True:
            while self._keys:
                yield self._keys.popleft()
            if self._overflowed:
                raise ChannelBroken(f"more than {FEED_BOUND} of the newcomer's keys unread")
            self._arrived = self._runtime.flag()
            await self._arrived.wait()
            self._arrived = None


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
    bridge runs; ``lease``: the lease this side's keys ride on now.  One
    watch reads every conversation's keys: each is fed to its bridge from the
    moment its ``here`` is seen, so the newcomer's reply to our HELLO waits
    for no watch of its own.  The same watch reports the holder key's
    changes to the session (:meth:`Session.key_changed`): a reign etcd ended
    early (its lease revoked, the key deleted by hand) ends here at once.
    """
    client = session.client
    feeds: dict[bytes, Feed] = {}
    watch = newcomers_keys(client, root, since, holder_key(root))
    async with client.runtime.group() as tasks, contextlib.aclosing(watch) as keys:
        async for conversation, event in keys:
            if conversation == HOLDER:
                session.key_changed(event)
                continue
            feed = feeds.get(conversation)
            if feed is not None:
                feed.put(event)
            elif opens(conversation, event, root):
                channel = accept_channel(
                    client, root, conversation, event.kv.mod_revision, lease(), channel_key
                )
                feeds[conversation] = feed = Feed(client.runtime)
                channel.read_from(feed.events())
                tasks.spawn(_carry, channel, listener, peers, Incoming(event.kv), feeds)


async def _carry(
    channel: Channel,
    listener: bytes,
    peers: dict[bytes, Incoming],
    one: Incoming,
    feeds: dict[bytes, Feed],
) -> None:
    end = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    name = _PREFIX + channel.conversation.hex().encode()
    peers[name] = one  # before the connect: the incumbent may accept at once, on its thread
    try:
        try:
            end.bind(name)
            end.setblocking(False)
            end.connect(listener)
        except OSError:  # the incumbent's queue is full or it is closing: the newcomer times out
            end.close()
            return
        # No ``here`` of ours before our answer (the HELLO the incumbent writes
        # at its accept): the newcomer reads nothing in it, and it would put a
        # round trip before HELLO.
        await carry(channel, end)
    finally:
        await channel.close()  # if the bridge never began, the feed it never read
        feeds.pop(channel.conversation, None)
        peers.pop(name, None)
        end.close()
