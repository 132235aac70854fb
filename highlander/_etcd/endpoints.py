"""Where the etcd cluster is: ``etcd://h1:2379,h2:2379`` and its TLS and auth settings.

``backend="etcd://h1:2379,h2,h3:2380"`` (or ``HIGHLANDER_BACKEND``) names the
members; ``etcds://`` speaks TLS to them.  Secrets never ride in the URL: a
URL ends up in process listings, logs and the IDE's config, so user names
and passwords come from the environment (``HIGHLANDER_ETCD_USER``,
``HIGHLANDER_ETCD_PASSWORD``), as do the CA, client certificate and key
(``HIGHLANDER_ETCD_CA``, ``HIGHLANDER_ETCD_CERT``, ``HIGHLANDER_ETCD_KEY``).
Pure code: the environment comes in as a mapping.
"""

from __future__ import annotations

from collections.abc import Mapping

from highlander._core.errors import ConfigurationError
from highlander._core.values import Value

DEFAULT_PORT = 2379
SCHEMES = {"etcd": "http", "etcds": "https"}


class Target(Value):
    """A parsed etcd backend: the member URLs, TLS files and credentials."""

    endpoints: tuple[str, ...]
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    user: str | None = None
    password: str | None = None

    @property
    def tls(self) -> bool:
        """Whether the members are spoken to over TLS (``etcds://``)."""
        return self.endpoints[0].startswith("https://")

    def describe(self) -> str:
        """The target for messages and events (never the password)."""
        who = f"{self.user}@" if self.user else ""
        return f"{who}{','.join(self.endpoints)}"


def _member(scheme: str, spelled: str, backend: str) -> str:
    host, port = spelled, DEFAULT_PORT
    if spelled.startswith("["):  # [::1]:2379
        close = spelled.find("]")
        if close < 0:
            raise ConfigurationError(f"{backend!r}: unclosed '[' in {spelled!r}")
        host, rest = spelled[: close + 1], spelled[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigurationError(f"{backend!r}: expected ':port' after {host}")
            port = _port(rest[1:], backend)
    elif ":" in spelled:
        host, _, digits = spelled.rpartition(":")
        port = _port(digits, backend)
    if not host or "/" in host:
        raise ConfigurationError(f"{backend!r}: {spelled!r} is not host[:port]")
    return f"{scheme}://{host.lower()}:{port}"


def _port(digits: str, backend: str) -> int:
    if not digits.isdigit() or not 0 < int(digits) < 65536:
        raise ConfigurationError(f"{backend!r}: {digits!r} is not a port number")
    return int(digits)


def parse(backend: str, environ: Mapping[str, str]) -> Target:
    """The :class:`Target` that ``backend`` and the ``HIGHLANDER_ETCD_*`` variables name.

    Raises :class:`~highlander._core.errors.ConfigurationError` naming the fix.
    """
    scheme_name, sep, rest = backend.strip().partition("://")
    scheme = SCHEMES.get(scheme_name.lower())
    if not sep or scheme is None:
        raise ConfigurationError(
            f"backend {backend!r}: expected etcd://host[:port][,host[:port]...] "
            "(or etcds:// for TLS)"
        )
    rest = rest.rstrip("/")
    if "@" in rest:  # refused before anything echoes the URL: it may hold a password
        raise ConfigurationError(
            f"backend {scheme_name}://...: credentials go in HIGHLANDER_ETCD_USER and "
            "HIGHLANDER_ETCD_PASSWORD, not in the URL (it shows in process lists and logs)"
        )
    if not rest:
        raise ConfigurationError(f"backend {backend!r} names no member: etcd://h1:2379,h2:2379")
    if any(not part.strip() for part in rest.split(",")):
        raise ConfigurationError(f"backend {backend!r}: an empty member between commas")
    members = tuple(_member(scheme, part.strip(), backend) for part in rest.split(","))

    def setting(name: str) -> str | None:
        value = environ.get(f"HIGHLANDER_ETCD_{name}", "")
        return value or None

    user, password = setting("USER"), setting("PASSWORD")
    if (user is None) != (password is None):
        raise ConfigurationError(
            "set both HIGHLANDER_ETCD_USER and HIGHLANDER_ETCD_PASSWORD, or neither"
        )
    ca, cert, key = setting("CA"), setting("CERT"), setting("KEY")
    if (cert is None) != (key is None):
        raise ConfigurationError(
            "a client certificate needs its key: set both HIGHLANDER_ETCD_CERT and "
            "HIGHLANDER_ETCD_KEY, or neither"
        )
    if scheme == "http" and (ca or cert):
        raise ConfigurationError(
            f"HIGHLANDER_ETCD_CA/CERT are set but {backend!r} is plain etcd://: "
            "write etcds:// to use TLS"
        )
    return Target(members, ca, cert, key, user, password)
