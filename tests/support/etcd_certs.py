"""Certificates made at test time for the etcd TLS test: a CA, a server and a client."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here: trusting it must fail
    named_client_cert: Path  # with a CommonName, which etcd's gateway refuses under auth
    named_client_key: Path


def _name(common: str) -> x509.Name:
    if not common:
        return x509.Name([])
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(_name(common))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common: str,
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    """A fresh CA, a server certificate for 127.0.0.1, client certificates without and with a CN."""
    ca, ca_key = _ca("highlander-test-ca")
    # etcd's HTTP gateway dials its own gRPC port with the server certificate, so
    # with --client-cert-auth that certificate must be good for client auth too.
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    server, server_key = _leaf("etcd", ca, ca_key, both)
    client, client_key = _leaf("", ca, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH])
    named, named_key = _leaf("highlander", ca, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH])
    other, _ = _ca("some-other-ca")
    pki = Pki(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server-key.pem",
        directory / "client.pem",
        directory / "client-key.pem",
        directory / "other-ca.pem",
        directory / "named-client.pem",
        directory / "named-client-key.pem",
    )
    for cert, path in (
        (ca, pki.ca),
        (server, pki.server_cert),
        (client, pki.client_cert),
        (named, pki.named_client_cert),
    ):
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.other_ca.write_bytes(other.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, pki.server_key)
    _write_key(client_key, pki.client_key)
    _write_key(named_key, pki.named_client_key)
    return pki
