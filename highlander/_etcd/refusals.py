"""etcd's refusals, by what a client does about them: ask another member, or say so.

The gateway puts a gRPC status code and etcd's own words in an error body
(:func:`highlander._etcd.api.error_of`).  Some mean "not now, not here"
and are asked again (on the next member); the rest are raised as
:class:`~highlander._core.errors.EtcdError`, with the fix named where
there is one.  A full etcd (its ``NOSPACE`` alarm: the database reached its
quota) takes no writes, keepalives aside, until an operator frees space and
disarms the alarm: a holder keeps its reign, a newcomer cannot begin one.
"""

from __future__ import annotations

from highlander._core.errors import EtcdError

UNAVAILABLE = 14  # this member cannot serve now (no leader, stopping): ask another
DEADLINE_EXCEEDED = 4  # the member gave up waiting for raft: ask another
UNAUTHENTICATED = 16  # the auth token expired or is unknown to this member: authenticate again
NOT_FOUND = 5  # e.g. "requested lease not found": the lease is gone for good
OUT_OF_RANGE = 11  # e.g. "required revision has been compacted"
PERMISSION_DENIED = 7  # the etcd user may not do this (docs/etcd.md, "Least privilege")
#: A full database (:data:`NO_SPACE`), or a member whose applying lags its
#: committing (:data:`TOO_MANY_REQUESTS`).  Either way nothing was applied.
RESOURCE_EXHAUSTED = 8
#: Refusals that say the request was not applied, and will not be while they last.
DENIED = frozenset({PERMISSION_DENIED, RESOURCE_EXHAUSTED})
#: etcd's words for a full database, and for a member whose applying lags.
NO_SPACE, TOO_MANY_REQUESTS = "database space exceeded", "too many requests"
#: What an operator does about a full etcd.
FULL = (
    "etcd's database is full and takes no writes until space is freed: compact its "
    "history (etcdctl compact), defragment every member (etcdctl defrag), then "
    'etcdctl alarm disarm (docs/etcd.md, "A full etcd")'
)


def ask_again(code: int, message: str) -> bool:
    """Whether a refusal means "not now, not here": the request goes to the next member."""
    return code in (UNAVAILABLE, DEADLINE_EXCEEDED) or TOO_MANY_REQUESTS in message


#: What an operator does about a user that may not touch Highlander's keys.
NOT_PERMITTED = (
    "give the etcd user (HIGHLANDER_ETCD_USER) read and write on the key prefix "
    '(HIGHLANDER_ETCD_PREFIX, /highlander/ by default): docs/etcd.md, "Least privilege"'
)


def refused(path: str, code: int, message: str) -> EtcdError:
    """The error for a refusal that is not asked again, naming the fix where there is one."""
    if NO_SPACE in message:
        return EtcdError(f"etcd refused {path}: {message}; {FULL}", code)
    if code == PERMISSION_DENIED:
        return EtcdError(f"etcd refused {path}: {message}; {NOT_PERMITTED}", code)
    return EtcdError(f"etcd refused {path}: {message} (gRPC code {code})", code)
