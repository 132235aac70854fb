"""Newcomers over etcd take turns: one conversation with the holder at a time.

A storm of newcomers used to open a conversation each, retry after each
setback, and overload the holder they all talked to until it missed
deadlines and was fenced while healthy (chaos-etcd, docs/reliability.md).
Now each newcomer whose claim found the project held puts a key under the
project's queue prefix on its own lease (the order of etcd's election
recipe: the keys' create revisions) and converses only while no older key
is there.  A newcomer that dies or stops loses its key with its lease (one
TTL); one that holds or gives up deletes it (:meth:`Turn.leave`).

Never a wedge: a turn waits only while the newcomers ahead make way (the
oldest one changes, or a key under the project is written: a conversation's
frames, the holder key).  If nothing moves for ``patience`` (a newcomer's
``hello`` + ``stall``: what it would allow a silent holder), we converse
anyway, as before queues; an etcd that refuses the queue's requests leaves
us conversing as before too.
"""

from __future__ import annotations

import contextlib
import os

from highlander._core.errors import EtcdError
from highlander._etcd import api
from highlander._etcd.client import Client

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._etcd.session import HolderValue, Session
    from highlander._host.waiting import Waiter

#: How often a queued newcomer looks whether its turn came, and how many looks at most.
POLL = 0.2
MAX_LOOKS = 3000


def queue_prefix(root: bytes) -> bytes:
    """Where a project's newcomers queue (under its root, beside the holder key)."""
    return root + b"queue/"


def looks(root: bytes) -> list[api.Json]:
    """The two reads of a look: the queue, and the project's last write (a txn's ops)."""
    return [
        {"request_range": api.get(queue_prefix(root), prefix=True)},
        {"request_range": api.latest(root)},
    ]


async def join(
    client: Client, root: bytes, key: bytes, value: bytes, lease: int
) -> tuple[int, tuple[list[bytes], int] | None]:
    """Put our place ``key`` in the queue on ``lease`` and take the first look, in one request.

    Returns our place's create revision (our order) and what :func:`ahead`
    would have found.
    """
    body = api.put_if_absent(key, value, lease)
    body["success"] += looks(root)
    body["failure"] += looks(root)
    answer = api.txn(await client.call("/v3/kv/txn", body))
    mine, queued, last = answer.ranges[-3:]
    revision = mine[0].create_revision if mine else answer.header.revision
    return revision, older(queued, last, key, revision)


async def ahead(
    client: Client, root: bytes, key: bytes, revision: int
) -> tuple[list[bytes], int] | None:
    """The queue's keys older than ours, oldest first, and the project's last write.

    The last write (the highest mod revision of any key under ``root``:
    conversations' frames, the holder key, the queue) moves while whoever is
    ahead of us converses.  ``None`` if our own key is gone.  One transaction
    of reads only (as linearizable as a range): both at one revision, in one
    round trip.
    """
    answer = api.txn(await client.call("/v3/kv/txn", {"compare": [], "success": looks(root)}))
    queued, last = answer.ranges
    return older(queued, last, key, revision)


def older(
    queued: tuple[api.KeyValue, ...], last: tuple[api.KeyValue, ...], key: bytes, revision: int
) -> tuple[list[bytes], int] | None:
    """The queue's keys older than ``key`` (created at ``revision``), and the last write.

    ``None`` if ``key`` is not among ``queued`` (our place is gone).
    """
    if not any(kv.key == key for kv in queued):
        return None
    older = sorted((kv for kv in queued if kv.create_revision < revision), key=_created)
    return [kv.key for kv in older], max((kv.mod_revision for kv in last), default=0)


def _created(kv: api.KeyValue) -> int:
    return kv.create_revision


async def leave(client: Client, key: bytes) -> None:
    """Give our place up (its lease would take it with it in one TTL anyway)."""
    await client.call("/v3/kv/deleterange", {"key": api.b64(key)})


class Turn:
    """One newcomer's place in its project's queue."""

    def __init__(self, session: Session, root: bytes, name: str, me: HolderValue) -> None:
        """A place for ``name`` (host and pid) in the queue of ``root``, not taken yet."""
        self.session = session
        self.root = root
        # os.urandom, not secrets: secrets imports random, hmac and hashlib (4 ms here).
        self.key = queue_prefix(root) + f"{name}/{os.urandom(6).hex()}".encode()
        self.value = me.encode()
        self.revision: int | None = None
        #: A look taken with our join (:meth:`joined`), for the first :meth:`wait`.
        self._found: tuple[list[bytes], int] | None = None

    def joined(self, revision: int, found: tuple[list[bytes], int] | None) -> None:
        """Our place was put at ``revision`` by another request, which took the first look.

        (:mod:`highlander._etcd.opening`: the claim's failure branch.)
        """
        self.revision, self._found = revision, found

    async def wait(self, waiter: Waiter, patience: float) -> None:
        """Until no newcomer older than us is queued (see the module docstring).

        ``patience``: how long the project may stay silent (no key written
        under its root) while someone is ahead of us before we converse anyway.
        """
        seen, since = (b"", -1), waiter.now()
        for _ in range(MAX_LOOKS):
            try:
                found = self._older()
            except EtcdError:
                return  # no queue today: converse
            if found is None:
                self.revision = None  # our lease was replaced: our place went with it
                continue
            older, written = found
            if not older:
                return
            if (older[0], written) != seen:
                seen, since = (older[0], written), waiter.now()  # the one ahead makes way
            elif waiter.now() - since > patience:
                return  # it makes no way: converse anyway
            await waiter.sleep(POLL)

    def _older(self) -> tuple[list[bytes], int] | None:
        session = self.session
        if self._found is not None:
            found, self._found = self._found, None
            return found
        if self.revision is None:
            lease = session.lease_kept().lease
            self.revision, found = session.call(
                join, session.client, self.root, self.key, self.value, lease
            )
            return found  # type: ignore[no-any-return]
        return session.call(ahead, session.client, self.root, self.key, self.revision)  # type: ignore[no-any-return]

    def leave(self, *, wait: bool = True) -> None:
        """Give our place up, if we took one (bounded by the client's budget).

        Without ``wait`` the deletion runs on the session's loop while we go
        on: a newcomer that holds now keeps its session (and so the loop), and
        nobody is ahead of it to wait for the deletion.  One that does not
        hold may close its session next, which would cancel the deletion.
        """
        if self.revision is not None:
            self.revision = None
            with contextlib.suppress(Exception):  # our lease takes it with it in one TTL
                if wait:
                    self.session.call(leave, self.session.client, self.key)
                else:
                    self.session.spawn(leave, self.session.client, self.key)
