"""The TLS connection pool of the etcd client, safe to cancel mid-handshake.

The client bounds each call with a cancel scope (:meth:`Client.call`'s
budget; a keeper must never wait past its lease bound).  httpcore2's
``start_tls`` closes the TCP stream it upgrades only on an ``Exception``;
a cancellation (a ``BaseException``) that lands during the handshake leaves
that stream open, and its socket is found later by the garbage collector
(a descriptor leaked for each slow handshake the budget cut short; seen in
CI under load).  The stream here closes itself on *any* failure of the
handshake, shielded so the close runs under the very cancellation.

The pool is put into httpx2's transport through its private ``_pool``
attribute: the one place Highlander touches httpx2's insides, tested with
the range pinned in pyproject.toml (``httpx2>=2.16.2,<3``).
"""

from __future__ import annotations

import ssl
import typing
from collections.abc import Iterable

import anyio
import httpcore2
import httpx2

#: httpx2's own defaults for its pool (``httpx2.Limits()``), kept.
_LIMITS = httpx2.Limits()


class _Stream(httpcore2.AsyncNetworkStream):
    """A network stream whose TLS upgrade never leaves the plain stream open."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            return await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()
            raise

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.AsyncNetworkBackend):
    """anyio's network backend (asyncio and trio), with :class:`_Stream`'s TLS upgrade."""

    def __init__(self) -> None:
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[typing.Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def tls_transport(context: ssl.SSLContext) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport for ``https://`` members whose handshakes are safe to cancel."""
    transport = httpx2.AsyncHTTPTransport(verify=context, trust_env=False)
    assert hasattr(transport, "_pool"), "httpx2 changed its transport: see this module"
    transport._pool = httpcore2.AsyncConnectionPool(  # private: see the module docstring
        ssl_context=context,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=_Backend(),
    )
    return transport
