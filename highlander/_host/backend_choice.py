"""Which backend a handle uses: ``backend=``, else ``HIGHLANDER_BACKEND``, else one machine.

``local`` (or nothing) is this machine; ``etcd://h1:2379,h2:2379`` (or
``etcds://`` for TLS) is an etcd cluster, with its lease's TTL from
``HIGHLANDER_ETCD_TTL`` (seconds, default 5).  Pure apart from the warning:
the environment comes in as a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

from highlander._core.errors import ConfigurationError
from highlander._host.log import warn_once

BACKEND_VAR = "HIGHLANDER_BACKEND"
TTL_VAR = "HIGHLANDER_ETCD_TTL"
#: The default lease TTL, and the least a user may choose (etcd's own minimum is 2 s).
DEFAULT_TTL, LEAST_TTL = 5, 2
_SCHEMES = ("etcd://", "etcds://")


def choose_backend(explicit: str | None, env: Mapping[str, str]) -> str | None:
    """The etcd URL to use, or ``None`` for this machine alone."""
    chosen = explicit if explicit is not None else env.get(BACKEND_VAR, "")
    spelled = chosen.strip()
    if spelled in ("", "local"):
        return None
    if not spelled.startswith(_SCHEMES):
        source = "backend=" if explicit is not None else f"{BACKEND_VAR}="
        raise ConfigurationError(
            f"{source}{chosen!r} is no backend: write local, etcd://host:2379[,host2:2379...] "
            "or etcds://... for TLS"
        )
    return spelled


def lease_ttl(env: Mapping[str, str]) -> int:
    """The holder's lease TTL in seconds: ``HIGHLANDER_ETCD_TTL``, default 5.

    Below 5 s a holder may not ride out an etcd leader election at etcd's
    default timing (it then steps down, safely, but needlessly): warned.
    """
    spelled = env.get(TTL_VAR, "").strip()
    if not spelled:
        return DEFAULT_TTL
    try:
        ttl = int(spelled)
    except ValueError:
        ttl = 0
    if ttl < LEAST_TTL:
        raise ConfigurationError(
            f"{TTL_VAR}={spelled!r}: give a whole number of seconds, at least {LEAST_TTL} "
            f"(default {DEFAULT_TTL})"
        )
    if ttl < DEFAULT_TTL:
        warn_once(
            "etcd-ttl",
            "etcd_ttl_short",
            ttl=ttl,
            message=f"{TTL_VAR}={ttl} is below {DEFAULT_TTL} s: a holder may step down during "
            "an etcd leader election",
        )
    return ttl
