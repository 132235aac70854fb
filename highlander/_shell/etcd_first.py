"""An etcd newcomer's first request, sent before the rest of the backend's code loads.

A fresh newcomer's own work is mostly loading code (the backend, the
conversation, the cipher: docs/performance.md), and its first request, the
claim, needs little of it.  So the session is opened and its lease grant
sent first (``backend_for``), then :func:`start` sends the first request,
and the rest loads while etcd answers
(:mod:`highlander._shell.etcd_preload`).  What the request does is
:mod:`highlander._etcd.opening`'s: the conversation's watch is opened beside
the lease grant (a watch must exist before the holder can answer), then the
claim goes out with our queue place and our ``here`` on its failure branch.
The backend takes its answer as its first claim's
(:func:`highlander._shell.etcd_claiming.claim`).

If the watch does not open within the client's budget, the claim goes out
plain and the newcomer queues and opens as before.
"""

from __future__ import annotations

import contextlib
import os
import time

# Only what the conversation's watch needs (and what the session loaded): the
# watch goes out beside the lease grant, and the rest loads after it (`start`).
from highlander._etcd.channel import Channel, newcomer_side
from highlander._etcd.claim import Held
from highlander._etcd.session import HolderValue, Session, app_root, holder_key
from highlander._host.modes import Mode

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    from highlander._etcd import api
    from highlander._etcd.loop_thread import Spawned
    from highlander._etcd.opening import Opening
    from highlander._host.settings import Settings
    from highlander._shell.etcd_backend import EtcdBackend


class Place:
    """Where this process meets the project's holders, and who it says it is."""

    __slots__ = ("channel_key", "key", "me", "root", "turn")

    def __init__(self, settings: Settings, session: Session, root: bytes | None = None) -> None:
        """The project's keys for ``settings`` (nothing is sent); ``root``: its root, known."""
        from highlander._etcd.queue import Turn  # noqa: PLC0415 - after the first requests
        from highlander._shell.etcd_key import ChannelKey  # noqa: PLC0415

        self.root = project_root(settings) if root is None else root
        self.key = holder_key(self.root)
        self.me = HolderValue.mine(settings.app, settings.env)._replace(ttl=settings.lease_ttl)
        self.channel_key = ChannelKey(settings)
        #: Our place in the project's queue of newcomers (taken by a claim or a turn).
        self.turn = Turn(session, self.root, f"{self.me.host}-{os.getpid()}", self.me)

    def value(self, generation: int, since_ms: int, history: tuple[int, ...] = ()) -> HolderValue:
        """This process as the holder of reign ``generation`` would name itself."""
        return self.me._replace(generation=generation, since_ms=since_ms, successions_ms=history)

    def value_for(self, since_ms: int) -> Callable[[int], bytes]:
        """A claim's value: the holder key's for whichever reign it begins, at ``since_ms``."""
        return lambda generation: self.value(generation, since_ms).encode()


class First:
    """What the first request found: its answer (or error), and what it opened."""

    __slots__ = ("channel", "connected_ms", "error", "opening", "result", "since_ms")

    def __init__(self, since_ms: int, channel: Channel) -> None:
        """A first request begun at ``since_ms`` (wall) with ``channel`` (not yet listening)."""
        self.since_ms = since_ms
        self.channel = channel
        self.connected_ms = since_ms
        self.opening: Opening | None = None
        self.result: Held | api.KeyValue | None = None
        self.error: BaseException | None = None


def project_root(settings: Settings) -> bytes:
    """The prefix of the project ``settings`` name, under which its keys live."""
    assert settings.project_id is not None
    return app_root(settings.app, settings.project_id, settings.env)


def start(settings: Settings, session: Session) -> EtcdBackend:
    """The backend for a claim on ``session`` (begun), with a newcomer's first request answered."""
    root = project_root(settings)
    # The conversation's watch goes out now, beside the lease grant: the claim
    # waits for both, and loading the rest first would hold the interpreter's
    # lock while the session's thread has them to send.
    early = listen(session, root) if settings.mode is Mode.AUTO else None
    place = Place(settings, session, root)
    first = None if early is None else request(session, settings, place, *early)
    from highlander._shell.etcd_backend import EtcdBackend  # noqa: PLC0415

    return EtcdBackend(settings, session, place, first)


def listen(session: Session, root: bytes) -> tuple[First, Spawned]:
    """A first request's conversation under ``root``, its watch being opened."""
    first = First(int(time.time() * 1000), newcomer_side(session.client, root, 0, None))
    return first, session.spawn(first.channel.listen, 0)


def send(session: Session, settings: Settings, place: Place) -> First:
    """Send the first request (see the module docstring); the code loads in its waits."""
    return request(session, settings, place, *listen(session, place.root))


def request(
    session: Session, settings: Settings, place: Place, first: First, listening: Spawned
) -> First:
    """The claim of the first request whose watch is ``listening``; the code loads meanwhile."""
    from highlander._shell.etcd_preload import Preload  # noqa: PLC0415 - after the watch

    # The frames' key (two HMACs), derived while etcd answers: a held project needs it.
    session.meanwhile(Preload(place.channel_key.get, settings.key))
    try:
        _send(session, place, first, listening)
    except Exception as exc:  # the claim raises it, where a claim's errors are handled
        first.error = exc
    finally:
        session.meanwhile(None)
    return first


def _send(session: Session, place: Place, first: First, listening: Spawned) -> None:
    channel, value_for = first.channel, place.value_for(first.since_ms)
    try:
        keeper = session.lease_kept()
    except BaseException:
        listening.cancel()
        session.spawn(channel.close)
        raise
    try:
        listening.result(timeout=session.client.budget)
    except Exception:  # no watch (etcd is slow, or refused it): claim plainly
        listening.cancel()
        session.spawn(channel.close)
        first.result = session.claim_reign(place.key, value_for)
        return
    channel.lease = keeper.lease
    from highlander._etcd.opening import Opening  # noqa: PLC0415 - loaded in the waits

    opening = first.opening = Opening(
        place.root,
        place.key,
        (place.turn.key, place.turn.value),
        (channel.here_key(), place.me.encode()),
        keeper.lease,
    )
    first.connected_ms = int(time.time() * 1000)
    posts = session.client.posts
    try:
        first.result = session.claim_reign(place.key, value_for, opening)
    except BaseException:
        session.spawn(drop, channel, place.turn.key)
        raise
    if isinstance(first.result, Held):
        if session.client.posts - posts == 1 and not opening.queued:
            session.spawn(channel.close)  # one answer, the success branch: nothing else written
        else:  # a lost attempt may have taken the failure branch
            session.spawn(drop, channel, place.turn.key)
        return
    if opening.queued:
        place.turn.joined(opening.revision, opening.found)
    if not opening.spoke:
        session.spawn(drop, channel)
        first.opening = None  # no conversation to take up
    else:
        channel.announced(opening.revision)


async def drop(channel: Channel, *also: bytes) -> None:
    """Close a conversation we will not hold: its watch, its keys, and ``also``."""
    await channel.close()
    with contextlib.suppress(Exception):  # they ride on our lease otherwise
        await channel.forget(*also)
