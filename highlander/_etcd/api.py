"""etcd's v3 JSON API as data: the request bodies Highlander sends, and the answers parsed.

etcd serves its gRPC API as JSON over HTTP beside gRPC (the grpc-gateway,
``POST /v3/kv/range`` and so on).  That encoding has three habits this module
absorbs so nothing above it sees them: keys and values are base64, 64-bit
integers are decimal strings, and a field at its default (0, false, empty) is
left out.  Pure code: no I/O, no clock; :mod:`highlander._etcd.client` moves
these bodies.
"""

from __future__ import annotations

# binascii, not base64: the same codecs (base64 calls them), without loading
# base64 and struct on the claim path (about 1 ms).
import binascii

from highlander._core.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2-3 ms)
if TYPE_CHECKING:
    from typing import Any

    Json = dict[str, Any]

#: gRPC status codes that etcd's gateway puts in an error body (what a client does
#: about each, and the fix it names: :mod:`highlander._etcd.refusals`).
UNAVAILABLE = 14  # this member cannot serve now (no leader, stopping): ask another
DEADLINE_EXCEEDED = 4  # the member gave up waiting for raft: ask another
UNAUTHENTICATED = 16  # the auth token expired or is unknown to this member: authenticate again
NOT_FOUND = 5  # e.g. "requested lease not found": the lease is gone for good
PERMISSION_DENIED = 7  # the etcd user may not do this (docs/etcd.md, "Least privilege")
RESOURCE_EXHAUSTED = 8  # a full database, or a member whose applying lags: nothing applied
DENIED = frozenset({PERMISSION_DENIED, RESOURCE_EXHAUSTED})  # not applied, nor while they last


class MalformedAnswer(ValueError):  # noqa: N818 - names what arrived, like json's errors
    """An answer that is not what etcd's gateway sends (a proxy's page, a torn body)."""


def b64(data: bytes) -> str:
    """The gateway's spelling of bytes."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def unb64(text: object) -> bytes:
    """Bytes back from the gateway's spelling (absent = empty)."""
    if text is None:
        return b""
    if not isinstance(text, str):
        raise MalformedAnswer(f"expected base64 text, got {type(text).__name__}")
    try:  # base64.b64decode(text, validate=True), as the stdlib spells it
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise MalformedAnswer(f"not base64: {text[:40]!r}") from exc


def integer(value: object) -> int:
    """A 64-bit integer as the gateway spells it (a decimal string; absent = 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise MalformedAnswer(f"expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError as exc:
        raise MalformedAnswer(f"expected an integer, got {value!r}") from exc


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` of etcd that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key: etcd's convention for "to the end"


class Header(Value):
    """The part of every answer that says where in etcd's history it was served."""

    revision: int
    member_id: str
    raft_term: int


class KeyValue(Value):
    """One key as etcd stores it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


class Event(Value):
    """One change a watch reports: ``put`` or ``delete`` of ``kv`` (at ``kv.mod_revision``)."""

    kind: str
    kv: KeyValue


class WatchBatch(Value):
    """One message of a watch stream."""

    header: Header
    watch_id: int
    created: bool
    canceled: bool
    compact_revision: int
    cancel_reason: str
    events: tuple[Event, ...]


class Txn(Value):
    """The answer to a transaction: which branch ran, and what its ranges read."""

    header: Header
    succeeded: bool
    #: The keys of each range request, in the order the branch made them.
    ranges: tuple[tuple[KeyValue, ...], ...] = ()

    @property
    def kvs(self) -> tuple[KeyValue, ...]:
        """Every key the branch's ranges read, in order."""
        return tuple(kv for read in self.ranges for kv in read)


def _object(answer: object, what: str) -> Json:
    if not isinstance(answer, dict):
        raise MalformedAnswer(f"{what}: expected a JSON object, got {type(answer).__name__}")
    return answer


def header(answer: Json) -> Header:
    """The header of an answer."""
    head = _object(answer.get("header", {}), "header")
    return Header(
        integer(head.get("revision")),
        str(head.get("member_id", "")),
        integer(head.get("raft_term")),
    )


def key_value(raw: object) -> KeyValue:
    """One key of an answer."""
    kv = _object(raw, "kv")
    return KeyValue(
        key=unb64(kv.get("key")),
        value=unb64(kv.get("value")),
        create_revision=integer(kv.get("create_revision")),
        mod_revision=integer(kv.get("mod_revision")),
        version=integer(kv.get("version")),
        lease=integer(kv.get("lease")),
    )


def error_of(answer: object) -> tuple[int, str] | None:
    """``(grpc code, message)`` if the answer is the gateway's error body, else ``None``."""
    if not isinstance(answer, dict):
        return None
    inner = answer.get("error")
    if isinstance(inner, dict):  # streaming endpoints wrap it: {"error": {...}}
        answer = inner
    elif not isinstance(inner, str):
        return None
    return integer(answer.get("code")), str(answer.get("message", answer.get("error", "")))


# Requests -----------------------------------------------------------------


def grant(ttl: int) -> Json:
    """``/v3/lease/grant``: a lease of ``ttl`` seconds (the server picks its id)."""
    return {"TTL": str(ttl), "ID": "0"}


def granted(answer: Json) -> tuple[int, int]:
    """``(lease id, granted ttl)`` from a grant's answer."""
    lease, ttl = integer(answer.get("ID")), integer(answer.get("TTL"))
    if lease == 0 or ttl <= 0:
        raise MalformedAnswer(f"lease grant gave id {lease}, ttl {ttl}: {answer.get('error', '')}")
    return lease, ttl


def lease_request(lease: int) -> Json:
    """A lease's own requests: keepalive (renew), revoke (end, with its keys), timetolive."""
    return {"ID": str(lease)}


keepalive = revoke = time_to_live = lease_request


def kept_alive(answer: Json) -> int:
    """The TTL a keepalive renewed the lease to; 0 if the lease is gone (expired or revoked)."""
    result = _object(answer.get("result", answer), "keepalive result")
    return integer(result.get("TTL"))


def remaining(answer: Json) -> tuple[int, int]:
    """Whole seconds a lease has left (-1 once it is gone), and the TTL it was granted."""
    return integer(answer.get("TTL")), integer(answer.get("grantedTTL"))


def get(key: bytes, *, prefix: bool = False, serializable: bool = False) -> Json:
    """``/v3/kv/range``: ``key`` (or every key under it); linearizable unless ``serializable``."""
    body: Json = {"key": b64(key)}
    if prefix:
        body["range_end"] = b64(prefix_end(key))
    if serializable:
        body["serializable"] = True
    return body


def latest(prefix: bytes) -> Json:
    """``/v3/kv/range``: the most recently written key under ``prefix`` (its name and revisions)."""
    body = get(prefix, prefix=True)
    body.update(sort_order="DESCEND", sort_target="MOD", limit=1, keys_only=True)
    return body


def got(answer: Json) -> tuple[Header, tuple[KeyValue, ...]]:
    """The header and keys of a range's answer."""
    kvs = answer.get("kvs", [])
    if not isinstance(kvs, list):
        raise MalformedAnswer("range: kvs is not a list")
    return header(answer), tuple(key_value(kv) for kv in kvs)


def put_if_absent(key: bytes, value: bytes, lease: int) -> Json:
    """``/v3/kv/txn``: put ``key`` on ``lease`` only if it does not exist; else read it.

    "Does not exist" is ``create_revision == 0``; the put's revision (the
    key's create and mod revision) is then the fencing token.
    """
    compare = {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
    put = {"request_put": {"key": b64(key), "value": b64(value), "lease": str(lease)}}
    read = {"request_range": {"key": b64(key)}}
    return {"compare": [compare], "success": [put, read], "failure": [read]}


def claim_counted(
    key: bytes, value: bytes, lease: int, counter: bytes, counter_mod: int, count: int
) -> Json:
    """:func:`put_if_absent`, counting the reign: ``counter`` becomes ``count`` in the same txn.

    Only while ``counter`` is as it was read (``counter_mod``: its mod
    revision, 0 while it does not exist), so two claims never give two
    reigns one generation.  The counter rides on no lease: it outlives them.
    The failure branch reads the holder key and then the counter, so a
    claim that guessed the counter wrong retries without another request.
    """
    body = put_if_absent(key, value, lease)
    body["compare"].append(
        {"key": b64(counter), "target": "MOD", "result": "EQUAL", "mod_revision": str(counter_mod)}
    )
    body["success"].insert(1, _put(counter, str(count).encode()))
    body["failure"].append({"request_range": {"key": b64(counter)}})
    return body


#: What a reign that let go by a release adds to its generation in the counter key.
RELEASED = b" released"


def mark_released(key: bytes, token: int, counter: bytes, generation: int) -> Json:
    """``/v3/kv/txn``: record in ``counter`` that reign ``generation`` let go by a release.

    Only while the holder key is still that reign's write (mod revision
    ``token``) and the counter still counts it, so a reign that was moved
    on, fenced or outlived never marks a later one.  The next claim then
    knows its predecessor left cleanly (``claimed_free``, not ``claimed_stale``).
    """
    count = str(generation).encode()
    compare = [
        {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(token)},
        {"key": b64(counter), "target": "VALUE", "result": "EQUAL", "value": b64(count)},
    ]
    return {"compare": compare, "success": [_put(counter, count + RELEASED)], "failure": []}


def _put(key: bytes, value: bytes) -> Json:
    return {"request_put": {"key": b64(key), "value": b64(value)}}


def move(
    key: bytes,
    value: bytes,
    token: int,
    from_lease: int,
    to_lease: int,
    absent: tuple[bytes, ...] = (),
    also: tuple[tuple[bytes, bytes], ...] = (),
    mark: tuple[bytes, int] | None = None,
) -> Json:
    """``/v3/kv/txn``: the succession's commit: the holder key, from one reign to the next.

    Only while ``key`` is still the reign ``token`` wrote, on ``from_lease``,
    is it put again with ``value`` on ``to_lease``; read it either way.  etcd
    refuses a transaction that deletes and re-creates one key ("duplicate key
    given in txn request"), so the key's create revision survives the move;
    its mod revision is the new reign's token.  ``absent``: keys that must not
    exist either (a fence's guard that the incumbent's stream did not move on).
    ``also``: keys put (on no lease) with the move, such as the reign counter.
    ``mark``: a key put with ``value`` too, on a lease (the conversation's
    ``moved``: the newcomer's watch sees the move without a read).
    """
    compare = [
        {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(token)},
        {"key": b64(key), "target": "LEASE", "result": "EQUAL", "lease": str(from_lease)},
    ]
    compare += [
        {"key": b64(name), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        for name in absent
    ]
    put = {"request_put": {"key": b64(key), "value": b64(value), "lease": str(to_lease)}}
    read = {"request_range": {"key": b64(key)}}
    success = [put, *(_put(name, data) for name, data in also), read]
    if mark is not None:
        marked = {"key": b64(mark[0]), "value": b64(value), "lease": str(mark[1])}
        success.insert(1, {"request_put": marked})
    return {"compare": compare, "success": success, "failure": [read]}


def txn(answer: Json) -> Txn:
    """Which branch a transaction ran, and the keys its range requests read."""
    ranges: list[tuple[KeyValue, ...]] = []
    responses = answer.get("responses", [])
    if not isinstance(responses, list):
        raise MalformedAnswer("txn: responses is not a list")
    for response in responses:
        ranged = _object(response, "txn response").get("response_range")
        if ranged is not None:
            ranges.append(got(_object(ranged, "response_range"))[1])
    return Txn(header(answer), bool(answer.get("succeeded", False)), tuple(ranges))


def watch(key: bytes, start_revision: int, *, prefix: bool = False, end: bytes = b"") -> Json:
    """``/v3/watch``: changes of ``key`` (under it; or up to ``end``) from ``start_revision`` on."""
    create: Json = {"key": b64(key), "start_revision": str(start_revision)}
    if prefix or end:
        create["range_end"] = b64(end or prefix_end(key))
    return {"create_request": create}


def watch_batch(message: Json) -> WatchBatch:
    """One line of a watch stream."""
    result = _object(message.get("result", message), "watch result")
    events = []
    for raw in result.get("events", []):
        event = _object(raw, "watch event")
        kind = "delete" if event.get("type") == "DELETE" else "put"
        events.append(Event(kind, key_value(event.get("kv", {}))))
    return WatchBatch(
        header=header(result),
        watch_id=integer(result.get("watch_id")),
        created=bool(result.get("created", False)),
        canceled=bool(result.get("canceled", False)),
        compact_revision=integer(result.get("compact_revision")),
        cancel_reason=str(result.get("cancel_reason", "")),
        events=tuple(events),
    )


#: The oldest etcd Highlander trusts in production: 3.5.0-3.5.2 could lose data
#: consistency when a member was killed under load, and lease and watch fixes
#: went on until 3.5.13.
TRUSTED_VERSION = (3, 5, 13)


def version_warning(answer: Json) -> str | None:
    """What to warn about the server version in a ``/v3/maintenance/status`` answer, if anything."""
    spelled = str(answer.get("version", ""))
    try:
        version = tuple(int(part) for part in spelled.split("-", maxsplit=1)[0].split(".")[:3])
    except ValueError:
        return f"etcd reports version {spelled!r}, which Highlander cannot read"
    if len(version) == 3 and version >= TRUSTED_VERSION:
        return None
    trusted = ".".join(map(str, TRUSTED_VERSION))
    return (
        f"etcd {spelled} is older than {trusted}: upgrade the cluster before production use "
        "(3.5.0-3.5.2 could lose consistency when a member was killed under load; lease and "
        f"watch fixes went on until {trusted}); docs/etcd.md"
    )


def authenticate(name: str, password: str) -> Json:
    """``/v3/auth/authenticate``: a token for etcd user ``name``."""
    return {"name": name, "password": password}


def token(answer: Json) -> str:
    """The auth token of an authenticate answer."""
    value = answer.get("token")
    if not isinstance(value, str) or not value:
        raise MalformedAnswer("authenticate: no token in the answer")
    return value
