"""etcd's refusals, by what a client does about them: ask another member, or say so.

The gateway puts a gRPC status code (:mod:`highlander._etcd.api` names them)
and etcd's own words in an error body (:func:`highlander._etcd.api.error_of`).
Some mean "not now, not here" and are asked again, on the next member; the
rest are raised as :class:`~highlander._core.errors.EtcdError`, with the fix
named where there is one.  A full database and a member whose applying lags
share a code: only the words tell them apart.  A full etcd (its ``NOSPACE``
alarm: the database reached its quota) takes no writes, keepalives aside,
until an operator frees space and disarms the alarm: a holder keeps its
reign, a newcomer cannot begin one.  Loaded only when a refusal arrives.
"""

from __future__ import annotations

from highlander._core.errors import EtcdError
from highlander._etcd.api import DEADLINE_EXCEEDED, PERMISSION_DENIED, UNAVAILABLE

#: etcd's words for a full database, and for a member whose applying lags.
NO_SPACE, TOO_MANY_REQUESTS = "database space exceeded", "too many requests"
#: What an operator does about a full etcd.
FULL = (
    "etcd's database is full and takes no writes until space is freed: compact its "
    "history (etcdctl compact), defragment every member (etcdctl defrag), then "
    'etcdctl alarm disarm (docs/etcd.md, "A full etcd")'
)

#: What an operator does about a user that may not touch Highlander's keys.
NOT_PERMITTED = (
    "give the etcd user (HIGHLANDER_ETCD_USER) read and write on the key prefix "
    '(HIGHLANDER_ETCD_PREFIX, /highlander/ by default): docs/etcd.md, "Least privilege"'
)


def ask_again(code: int, message: str) -> bool:
    """Whether a refusal means "not now, not here": the request goes to the next member."""
    return code in (UNAVAILABLE, DEADLINE_EXCEEDED) or TOO_MANY_REQUESTS in message


def refused(path: str, code: int, message: str) -> EtcdError:
    """The error for a refusal that is not asked again, naming the fix where there is one."""
    if NO_SPACE in message:
        return EtcdError(f"etcd refused {path}: {message}; {FULL}", code)
    if code == PERMISSION_DENIED:
        return EtcdError(f"etcd refused {path}: {message}; {NOT_PERMITTED}", code)
    return EtcdError(f"etcd refused {path}: {message} (gRPC code {code})", code)
