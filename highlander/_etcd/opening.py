"""A newcomer's first claim, which also queues it and opens its conversation when held.

A newcomer whose claim found the project held used to make three more
requests, each waiting for the one before, before the holder heard of it:
join the queue of newcomers (:mod:`highlander._etcd.queue`), open the watch
on its conversation's inbound keys, and write its ``here``
(:mod:`highlander._etcd.channel`).  Now the watch is opened beside the lease
grant, before the claim, and the claim's failure branch carries the other
two as nested transactions, whose compares etcd decides on the state
*before* the claim's own writes:

* if the holder key exists: put our place in the queue (on our lease) and
  take the queue's first look (:func:`highlander._etcd.queue.looks`);
* and if, besides, nobody was queued: write the conversation's ``here`` (the
  holder's one watch on every conversation sees it at once).

So the usual newcomer (nobody queued before it) is in conversation one
request after its lease; one that finds others queued has joined and waits
its turn as before (no ``here`` was written); a project that is free takes
the success branch and none of this happens.  The queue's rule is unchanged:
we speak only when no older newcomer is queued.
"""

from __future__ import annotations

from highlander._etcd import api
from highlander._etcd.queue import looks, older

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    Json = dict[str, Any]


class Opening:
    """What rides on one claim's failure branch: our queue place and, maybe, our ``here``."""

    def __init__(
        self,
        root: bytes,
        holder_key: bytes,
        place: tuple[bytes, bytes],
        here: tuple[bytes, bytes],
        lease: int,
    ) -> None:
        """``place``/``here``: the queue key and the ``here`` key, each with its value."""
        self.root = root
        self.holder_key = holder_key
        self.place = place
        self.here = here
        self.lease = lease
        #: Whether the branch ran: the project was held, and our place was put.
        self.queued = False
        #: Whether our ``here`` was written too (nobody was queued before us).
        self.spoke = False
        #: The claim's revision: our place's create revision, our ``here``'s revision.
        self.revision = 0
        #: The queue's first look (:func:`highlander._etcd.queue.older`), once queued.
        self.found: tuple[list[bytes], int] | None = None

    def extend(self, body: Json) -> Json:
        """Add the nested transactions to a claim's failure branch (``body``, changed)."""
        queue = looks(self.root)[0]["request_range"]
        nobody_queued = {
            "key": queue["key"], "range_end": queue["range_end"],
            "target": "VERSION", "result": "EQUAL", "version": "0",
        }  # fmt: skip
        held = {
            "key": api.b64(self.holder_key),
            "target": "CREATE",
            "result": "GREATER",
            "create_revision": "0",
        }
        speak = {"compare": [nobody_queued], "success": [self._put(*self.here)], "failure": []}
        when_held = [{"request_txn": speak}, self._put(*self.place), *looks(self.root)]
        body["failure"].append(
            {"request_txn": {"compare": [held], "success": when_held, "failure": []}}
        )
        return body

    def _put(self, key: bytes, value: bytes) -> Json:
        return {
            "request_put": {"key": api.b64(key), "value": api.b64(value), "lease": str(self.lease)}
        }

    def read(self, answer: Json) -> None:
        """Learn from the claim's answer what its failure branch did (nothing on success)."""
        if answer.get("succeeded"):
            return
        responses = answer.get("responses", [])
        nested = responses[-1].get("response_txn") if responses else None
        if not isinstance(nested, dict) or not nested.get("succeeded"):
            return  # the branch did not run (the holder key is absent), or this is not it
        inner = nested.get("responses", [])
        if len(inner) != 4:
            raise api.MalformedAnswer(f"the claim's queue branch answered {len(inner)} of 4")
        self.revision = api.header(answer).revision
        self.queued = True
        self.spoke = bool(inner[0].get("response_txn", {}).get("succeeded"))
        queued = api.got(inner[2]["response_range"])[1]
        last = api.got(inner[3]["response_range"])[1]
        self.found = older(queued, last, self.place[0], self.revision)
