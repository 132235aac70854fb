"""What a watch missed while it was away, from one read of its range: list, then watch.

A watch that resumes (its member gone or silent, or the history it would
replay compacted) reads its range once, linearizably, and goes on from that
read's revision instead of replaying history from its last event: the
replay costs etcd a scan of every revision since (a quiet holder's last
event may be hours old), and is refused once that history is compacted.
What the read cannot show is a key that came and went while the watch was
away and was never reported; no reader here needs those.
"""

from __future__ import annotations

from highlander._etcd import api

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._etcd.client import Client


async def relisted(
    client: Client, key: bytes, range_end: bytes, following: int, present: set[bytes]
) -> tuple[list[api.Event], int]:
    """The changes of ``[key, range_end)`` since revision ``following``, as a read shows them.

    Puts of the keys written since (in revision order), then deletes of
    those in ``present`` (the keys the watch reported there) that are gone,
    at the read's revision (only their absence is known); and the revision
    to watch on from.
    """
    body = {"key": api.b64(key)}
    if range_end:
        body["range_end"] = api.b64(range_end)
    read, kvs = api.got(await client.call("/v3/kv/range", body))
    changed = sorted((kv for kv in kvs if kv.mod_revision >= following), key=_revision)
    events = [api.Event("put", kv) for kv in changed]
    for gone in sorted(present - {kv.key for kv in kvs}):
        events.append(api.Event("delete", api.KeyValue(gone, b"", 0, read.revision, 0, 0)))
    return events, read.revision + 1


def _revision(kv: api.KeyValue) -> int:
    return kv.mod_revision
