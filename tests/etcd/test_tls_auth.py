"""``etcds://`` with a CA and a client certificate, and etcd's user/password auth.

One member of its own (not the session's cluster: auth, once enabled,
applies to every client), with certificates made at test time.
"""

from __future__ import annotations

import gc
import socket
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from highlander._core.errors import EtcdError, EtcdUnavailableError
from highlander._etcd import api
from highlander._etcd.claim import Held, claim
from highlander._etcd.client import Client
from highlander._etcd.endpoints import parse
from tests.support.etcd_certs import Pki, make_pki
from tests.support.etcd_cluster import Cluster, start_cluster

pytestmark = pytest.mark.anyio
PREFIX = b"/highlander-tls/"
PASSWORD = "hl-" + uuid.uuid4().hex


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Cluster]:
    flags = (
        f"--cert-file={pki.server_cert}",
        f"--key-file={pki.server_key}",
        f"--trusted-ca-file={pki.ca}",
        "--client-cert-auth",
    )
    cluster = start_cluster(
        tmp_path_factory.mktemp("etcd-tls"), size=1, extra=flags, scheme="https"
    )
    try:
        anyio.run(_set_up_auth, cluster, pki)
        yield cluster
    finally:
        cluster.close()


def _environ(pki: Pki, *, ca: Path | None = None, password: str = PASSWORD) -> dict[str, str]:
    return {
        "HIGHLANDER_ETCD_CA": str(ca or pki.ca),
        "HIGHLANDER_ETCD_CERT": str(pki.client_cert),
        "HIGHLANDER_ETCD_KEY": str(pki.client_key),
        "HIGHLANDER_ETCD_USER": "highlander",
        "HIGHLANDER_ETCD_PASSWORD": password,
    }


def _backend(cluster: Cluster) -> str:
    return cluster.backend.replace("etcd://", "etcds://")


async def _set_up_auth(cluster: Cluster, pki: Pki) -> None:
    """Root, and a least-privilege user: read and write under PREFIX only (docs/etcd.md)."""
    environ = {k: v for k, v in _environ(pki).items() if "USER" not in k and "PASSWORD" not in k}
    async with Client(parse(_backend(cluster), environ)) as admin:
        with anyio.fail_after(30):
            while True:  # until the member has elected itself
                try:
                    await admin.call("/v3/maintenance/status", {}, budget=1.0)
                    break
                except EtcdUnavailableError:
                    await anyio.sleep(0.05)
        root_password = uuid.uuid4().hex
        steps = [
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/add", {"name": "root", "password": root_password}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/role/add", {"name": "highlander"}),
            (
                "/v3/auth/role/grant",
                {
                    "name": "highlander",
                    "perm": {
                        "permType": "READWRITE",
                        "key": api.b64(PREFIX),
                        "range_end": api.b64(api.prefix_end(PREFIX)),
                    },
                },
            ),
            ("/v3/auth/user/add", {"name": "highlander", "password": PASSWORD}),
            ("/v3/auth/user/grant", {"user": "highlander", "role": "highlander"}),
            ("/v3/auth/enable", {}),
        ]
        for path, body in steps:
            await admin.call(path, body)


async def test_a_claim_over_tls_with_a_least_privilege_user(tls_cluster: Cluster, pki: Pki) -> None:
    target = parse(_backend(tls_cluster), _environ(pki))
    assert target.tls
    async with Client(target) as client:
        lease, _ = api.granted(await client.call("/v3/lease/grant", api.grant(5)))
        held = await claim(client, PREFIX + uuid.uuid4().bytes.hex().encode(), b"v", lease)
        assert isinstance(held, Held)


async def test_the_user_cannot_touch_keys_outside_its_prefix(
    tls_cluster: Cluster, pki: Pki
) -> None:
    async with Client(parse(_backend(tls_cluster), _environ(pki))) as client:
        with pytest.raises(EtcdError) as caught:
            await client.call("/v3/kv/range", api.get(b"/elsewhere"))
    assert "permission denied" in str(caught.value)
    assert 'docs/etcd.md, "Least privilege"' in str(caught.value)  # the fix named


async def test_a_wrong_password_is_refused_with_the_fix(tls_cluster: Cluster, pki: Pki) -> None:
    async with Client(parse(_backend(tls_cluster), _environ(pki, password="wrong"))) as client:
        with pytest.raises(EtcdError) as caught:
            await client.call("/v3/kv/range", api.get(PREFIX))
    assert "HIGHLANDER_ETCD_PASSWORD" in str(caught.value)
    assert "wrong" not in str(caught.value)


async def test_a_server_the_ca_did_not_sign_is_never_spoken_to(
    tls_cluster: Cluster, pki: Pki
) -> None:
    target = parse(_backend(tls_cluster), _environ(pki, ca=pki.other_ca))
    async with Client(target, timeout=0.5) as client:
        with pytest.raises(EtcdUnavailableError) as caught:
            await client.call("/v3/kv/range", api.get(PREFIX), budget=1.0)
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) or "ConnectError" in str(caught.value)


async def test_a_client_certificate_with_a_common_name_is_refused_with_the_fix(
    tls_cluster: Cluster, pki: Pki
) -> None:
    environ = _environ(pki)
    environ["HIGHLANDER_ETCD_CERT"] = str(pki.named_client_cert)
    environ["HIGHLANDER_ETCD_KEY"] = str(pki.named_client_key)
    async with Client(parse(_backend(tls_cluster), environ)) as client:
        with pytest.raises(EtcdError) as caught:
            await client.call("/v3/kv/range", api.get(PREFIX))
    assert "without (subject alternative names only)" in str(caught.value)
    assert not isinstance(caught.value, EtcdUnavailableError)


async def test_plain_http_to_a_tls_member_gets_nothing(tls_cluster: Cluster) -> None:
    async with Client(parse(tls_cluster.backend, {}), timeout=0.5) as client:
        with pytest.raises(EtcdUnavailableError):
            await client.call("/v3/kv/range", api.get(PREFIX), budget=1.0)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_handshake_cut_short_by_the_budget_leaves_no_socket_open(pki: Pki, backend: str) -> None:
    # A member that accepts and never says a word of TLS: each handshake is
    # still running when the call's budget (not httpx's timeout) ends it.
    mute = socket.create_server(("127.0.0.1", 0), backlog=64)
    accepted: list[socket.socket] = []
    port = mute.getsockname()[1]

    async def main() -> None:
        target = parse(f"etcds://127.0.0.1:{port}", _environ(pki))
        async with Client(target, timeout=30.0) as client:
            for _ in range(3):
                with pytest.raises(EtcdUnavailableError):
                    await client.call("/v3/kv/range", api.get(PREFIX), budget=0.3)
                accepted.append(mute.accept()[0])

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            anyio.run(main, backend=backend)
            gc.collect()
        leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert not leaked, leaked
        # Each handshake's socket was closed by the client: its end reads EOF.
        for peer in accepted:
            peer.settimeout(5.0)
            for _ in range(64):  # the ClientHello, then the end of the stream
                if peer.recv(4096) == b"":
                    break
            else:
                raise AssertionError("the client never closed its end")
    finally:
        for peer in accepted:
            peer.close()
        mute.close()
