"""One succession conversation's bytes carried as etcd keys, sealed, and bridged to a socket.

The protocol core speaks in frames over a byte stream; over etcd the stream
is a run of keys.  Under a project's root ``R``, a newcomer opens
conversation ``C`` (16 random bytes) by writing ``R/conv/C/n/here`` on its
lease; the holder, which watches ``R/conv/``, answers with its first chunk
(HELLO) on its own.  Each side writes its bytes as ``R/conv/C/<side>/<number>``
(sealed: :mod:`highlander._core.sealing`) and reads the other side's with a
watch from the revision it started at, so nothing written before the watch
opened is missed.  A side ends its stream with ``.../fin``; a side that dies
ends it too, since its keys ride on its lease and go when the lease does.

:func:`bridge` joins a channel to one end of a ``socketpair``, so the
conversation code that runs over a Unix socket runs over etcd unchanged: the
same frames, the same signatures, the same deadlines.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncGenerator

from highlander._core import sealing
from highlander._etcd import api
from highlander._etcd.client import Client

#: Which letter names a side's keys, by the direction it writes.
_SIDES = {sealing.NEWCOMER: b"n", sealing.INCUMBENT: b"i"}
HERE, FIN, MOVED = b"here", b"fin", b"moved"
#: What :func:`newcomers_keys` names the holder key's changes by (no conversation's id).
HOLDER = b""
READ_SIZE = 65536


class ChannelBroken(Exception):  # noqa: N818 - a condition the bridge turns into EOF
    """The other side's keys are not a stream this side can follow (a gap, a forgery)."""


def conversations(root: bytes) -> bytes:
    """The prefix every conversation of the project lives under."""
    return root + b"conv/"


class Channel:
    """This side of conversation ``conversation``: write ours, read theirs."""

    def __init__(
        self,
        client: Client,
        root: bytes,
        conversation: bytes,
        side: int,
        lease: int,
        key: bytes,
        since: int,
    ) -> None:
        """``side``: ``sealing.NEWCOMER`` or ``sealing.INCUMBENT``; ``key``: the sealing key."""
        self.client = client
        self.root = root
        self.conversation = conversation
        self.side = side
        self.lease = lease
        self.key = key
        #: Revision after which the other side's keys are read.
        self.since = since
        self._sent = 0
        #: How many of the other side's chunks were read (its next key's number).
        self.received = 0
        #: The incumbent's ``moved`` key, once its watch delivered it: the commit
        #: applied at that key's mod revision, with that value for the holder key.
        self.moved: api.KeyValue | None = None
        #: The watch :meth:`listen` opened, until :meth:`chunks` reads it.
        self._watch: AsyncGenerator[api.Event, None] | None = None

    def __repr__(self) -> str:
        return f"Channel({self.conversation.hex()}, side={self.side}, lease={self.lease})"

    def keyed(self, channel_key: bytes) -> None:
        """Seal this conversation under ``channel_key`` (see :func:`open_channel`)."""
        self.key = sealing.conversation_key(channel_key, self.conversation)

    @property
    def _base(self) -> bytes:
        return conversations(self.root) + self.conversation.hex().encode() + b"/"

    def _name(self, side: int, leaf: bytes) -> bytes:
        return self._base + _SIDES[side] + b"/" + leaf

    @property
    def _other(self) -> int:
        return sealing.INCUMBENT if self.side == sealing.NEWCOMER else sealing.NEWCOMER

    async def _put(self, name: bytes, value: bytes) -> int:
        body = {"key": api.b64(name), "value": api.b64(value), "lease": str(self.lease)}
        return api.header(await self.client.call("/v3/kv/put", body)).revision

    async def listen(self, start: int) -> None:
        """Watch the other side's keys from ``start`` (0: from now) before this side speaks.

        Returns once etcd has the watch, so the answer to what this side
        writes next reaches :meth:`chunks` as soon as it is written.
        """
        watch = self.client.watch(self._theirs, start, prefix=True, report_created=True)
        try:
            await anext(watch)  # CREATED
        except BaseException:
            await watch.aclose()
            raise
        self._watch = watch

    def read_from(self, events: AsyncGenerator[api.Event, None]) -> None:
        """Read the other side's keys from ``events`` (the holder's one watch), not our own."""
        self._watch = events

    async def close(self) -> None:
        """Close a watch :meth:`listen` opened (or events given) that :meth:`chunks` never read."""
        if self._watch is not None:
            watch, self._watch = self._watch, None
            await watch.aclose()

    @property
    def _theirs(self) -> bytes:
        return self._base + _SIDES[self._other] + b"/"

    def here_key(self) -> bytes:
        """The key of this side's ``here`` (a newcomer's: the conversation's opening)."""
        return self._name(self.side, HERE)

    async def announce(self, here: bytes = b"") -> None:
        """Say this side is here (the newcomer's open, with ``here``: who it is)."""
        self.announced(await self._put(self.here_key(), here))

    def announced(self, revision: int) -> None:
        """Our ``here`` was written at ``revision`` (by :meth:`announce`, or with a claim)."""
        if self.side == sealing.NEWCOMER:
            self.since = revision

    async def send(self, chunk: bytes) -> None:
        """Write the next chunk of this side's stream."""
        name = self._name(self.side, b"%016x" % self._sent)
        await self._put(name, sealing.seal(self.key, self.side, self._sent, name, chunk))
        self._sent += 1

    async def finish(self) -> None:
        """End this side's stream."""
        await self._put(self._name(self.side, FIN), b"")

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The other side's chunks in order, until its ``fin``, its ``moved`` or its lease's end."""
        theirs = self._theirs
        expected = 0
        watch, self._watch = self._watch, None
        if watch is None:
            watch = self.client.watch(theirs, self.since + 1, prefix=True)
        async with contextlib.aclosing(watch) as events:
            async for event in events:
                leaf = event.kv.key[len(theirs) :]
                if event.kind == "delete" or leaf == FIN:
                    return  # its lease ended (it died, or was fenced), or it said so
                if leaf == HERE:
                    continue
                if leaf == MOVED:
                    # The incumbent's commit applied: it stopped acting before it
                    # sent it, and says nothing after it.  Its stream ends here.
                    self.moved = event.kv
                    return
                try:
                    number = int(leaf, 16)
                except ValueError as exc:
                    raise ChannelBroken(f"a key that is no chunk: {event.kv.key!r}") from exc
                if number != expected:
                    raise ChannelBroken(f"chunk {number} where {expected} was due")
                try:
                    yield sealing.unseal(
                        self.key, self._other, number, event.kv.key, event.kv.value
                    )
                except sealing.Unsealable as exc:
                    raise ChannelBroken(str(exc)) from exc
                expected += 1
                self.received = expected

    def unread(self, *, chunks: bool = True) -> tuple[bytes, ...]:
        """The other side's next chunk and ``fin``: keys a fence requires absent.

        Without ``chunks`` only ``fin``: a save past its ceiling is fenced
        however it still reports progress, unless its stream has ended.
        """
        fin = self._name(self._other, FIN)
        return (self._name(self._other, b"%016x" % self.received), fin) if chunks else (fin,)

    async def forget(self, *also: bytes) -> None:
        """Delete every key of the conversation (the newcomer, once it is over), and ``also``."""
        body = api.get(self._base, prefix=True)
        if not also:
            await self.client.call("/v3/kv/deleterange", body)
            return
        ops = [{"request_delete_range": one} for one in (body, *map(api.get, also))]
        await self.client.call("/v3/kv/txn", {"compare": [], "success": ops})


def moved_key(opening: bytes) -> bytes:
    """The ``moved`` key of the conversation whose newcomer's ``here`` is ``opening``.

    The incumbent's commit puts it (:func:`highlander._etcd.api.move`'s ``mark``).
    """
    suffix = b"/" + _SIDES[sealing.NEWCOMER] + b"/" + HERE
    if not opening.endswith(suffix):
        raise ValueError(f"not a conversation's opening key: {opening!r}")
    return opening[: -len(suffix)] + b"/" + _SIDES[sealing.INCUMBENT] + b"/" + MOVED


def newcomer_side(client: Client, root: bytes, lease: int, channel_key: bytes | None) -> Channel:
    """A newcomer's side of a new conversation (a random id), nothing sent yet.

    ``channel_key`` ``None``: keyed later (:meth:`Channel.keyed`), before the
    first chunk is sealed or opened.
    """
    conversation = os.urandom(sealing.CONVERSATION_ID_BYTES)
    key = b"" if channel_key is None else sealing.conversation_key(channel_key, conversation)
    return Channel(client, root, conversation, sealing.NEWCOMER, lease, key, since=0)


async def open_channel(
    client: Client, root: bytes, lease: int, channel_key: bytes | None, here: bytes = b""
) -> Channel:
    """A newcomer's new conversation with whoever holds the project at ``root``.

    ``here``: what the newcomer says of itself (its holder value, for the commit).
    ``channel_key`` ``None``: the caller derives it once the ``here`` is
    written, while the holder answers, and gives it to :meth:`Channel.keyed`
    before the first chunk is sealed or opened.
    """
    channel = newcomer_side(client, root, lease, channel_key)
    # Nothing of a new conversation exists before its announce: "from now" misses
    # nothing.  And a watch must exist before the holder answers: one that starts
    # at a revision etcd has passed joins its "unsynced" watchers, which it
    # catches up only every 100 ms (measured: HELLO 43 ms late).
    await channel.listen(0)
    try:
        await channel.announce(here)
    except BaseException:
        await channel.close()
        raise
    return channel


async def newcomers_keys(
    client: Client, root: bytes, since: int, holder: bytes = b""
) -> AsyncGenerator[tuple[bytes, api.Event], None]:
    """``(conversation id, event)`` for every newcomer-side key of the project after ``since``.

    One watch for every conversation: the holder reads each conversation's
    chunks from it (:class:`~highlander._etcd.holding.Feed`) rather than
    open a watch per conversation, which would cost a round trip before its
    HELLO and, once etcd has passed the revision it starts at, could join
    the "unsynced" watchers etcd catches up only every 100 ms.  With
    ``holder`` (the holder key, which sorts after every conversation key)
    the same watch also reports that key's changes, as ``(HOLDER, event)``:
    a holder learns that its reign ended in etcd without a watch more.
    """
    prefix = conversations(root)
    side = b"/" + _SIDES[sealing.NEWCOMER] + b"/"
    end = b"" if not holder else holder + b"\0"  # the holder key, and no key after it
    assert not holder or holder > prefix, "the holder key must sort after the conversations"
    watch = client.watch(prefix, since + 1, prefix=True, end=end, known=(holder,) * bool(holder))
    async with contextlib.aclosing(watch) as events:
        async for event in events:
            if holder and event.kv.key == holder:
                yield HOLDER, event
                continue
            name, found, _ = event.kv.key[len(prefix) :].partition(side)
            if not found:
                continue
            with contextlib.suppress(ValueError):
                conversation = bytes.fromhex(name.decode("ascii"))
                if len(conversation) == sealing.CONVERSATION_ID_BYTES:
                    yield conversation, event


def opens(conversation: bytes, event: api.Event, root: bytes) -> bool:
    """Whether ``event`` (of ``conversation``) is its newcomer's ``here``: its opening."""
    here = conversations(root) + conversation.hex().encode() + b"/" + _SIDES[sealing.NEWCOMER]
    return event.kind == "put" and event.kv.key == here + b"/" + HERE


async def incoming(
    client: Client, root: bytes, since: int
) -> AsyncGenerator[tuple[bytes, api.KeyValue], None]:
    """``(conversation id, its opening key)`` of every conversation opened after ``since``.

    The opening key's lease is the newcomer's, and its value what the
    newcomer said of itself (unsigned: the conversation proves or refutes it).
    """
    async with contextlib.aclosing(newcomers_keys(client, root, since)) as events:
        async for conversation, event in events:
            if opens(conversation, event, root):
                yield conversation, event.kv


def accept_channel(
    client: Client, root: bytes, conversation: bytes, revision: int, lease: int, channel_key: bytes
) -> Channel:
    """The holder's side of a conversation a newcomer opened at ``revision``."""
    key = sealing.conversation_key(channel_key, conversation)
    return Channel(client, root, conversation, sealing.INCUMBENT, lease, key, since=revision)


async def bridge(channel: Channel, end: socket.socket) -> None:
    """Move bytes between ``end`` (one end of a socketpair) and ``channel`` until both finish.

    The other end then reads the peer's bytes and EOF when the peer's stream
    ends; what the other end writes reaches the peer, and its close ends this
    side's stream.  ``end`` is closed on return.
    """
    end.setblocking(False)
    runtime = channel.client.runtime
    tasks = runtime.group()

    async def outbound() -> None:
        while True:
            await runtime.readable(end)
            try:
                data = end.recv(READ_SIZE)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                await channel.finish()
                if _hung_up(end):  # closed, not only shut for writing: nobody reads either
                    tasks.cancel()
                return
            await channel.send(data)

    async def inbound() -> None:
        with contextlib.suppress(ChannelBroken):
            async with contextlib.aclosing(channel.chunks()) as chunks:
                async for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        await runtime.writable(end)
                        try:
                            view = view[end.send(view) :]
                        except BlockingIOError:
                            continue
                        except OSError:
                            return  # the local end closed: nobody is left to read
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_WR)

    try:
        # The peer's stream is over when inbound returns; ours ends when the
        # local end closes (outbound), which cancels inbound if still reading.
        async with tasks:
            tasks.spawn(outbound)
            tasks.spawn(inbound)
    finally:
        end.close()


async def carry(channel: Channel, end: socket.socket) -> None:
    """:func:`bridge`; then, however the bridge ended, delete the conversation's keys.

    Either side's last step: its lease would take them otherwise, later (as
    it does when the task is cancelled, which cancels the deletion too).
    """
    try:
        await bridge(channel, end)
    finally:
        await channel.close()  # a watch the bridge never came to read
        with contextlib.suppress(Exception):
            await channel.forget()


def _hung_up(end: socket.socket) -> bool:
    """Whether the other end closed for good (both directions), as ``poll`` says."""
    import select  # noqa: PLC0415 - only once a stream ends

    poller = select.poll()
    poller.register(end, select.POLLHUP)
    return any(mask & select.POLLHUP for _, mask in poller.poll(0))
