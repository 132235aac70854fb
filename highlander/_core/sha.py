"""SHA-256 and HMAC-SHA256 from the interpreter's built-in hash, without OpenSSL.

``hashlib`` and ``hmac`` first load OpenSSL through ``_hashlib`` (2-4 ms on
the bench machine), on the path of every claim and of every newcomer's first
frame; the interpreter's own SHA-256 module is loaded already.  HMAC is
RFC 2104 over it, the construction the stdlib's ``hmac`` module itself uses
when OpenSSL is absent; ``tests/core/test_sha.py`` checks both against
``hashlib`` and ``hmac`` over generated inputs.  Pure code.
"""

from __future__ import annotations

# No stubs exist for these private modules, hence the ignores.
try:
    from _sha2 import sha256  # type: ignore[import-not-found]  # CPython >= 3.12
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11
    except ImportError:
        from hashlib import sha256

__all__ = ["hkdf_sha256", "hmac_sha256", "same_tag", "sha256", "sha256_digest"]

#: SHA-256's block size: HMAC pads its key to it.
BLOCK = 64
_INNER = bytes(byte ^ 0x36 for byte in range(256))
_OUTER = bytes(byte ^ 0x5C for byte in range(256))


def sha256_digest(data: bytes) -> bytes:
    """The SHA-256 of ``data``."""
    digest: bytes = sha256(data).digest()
    return digest


def hmac_sha256(key: bytes, data: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of ``data`` under ``key``: the same 32 bytes as ``hmac.digest``."""
    if len(key) > BLOCK:
        key = sha256_digest(key)
    key = key.ljust(BLOCK, b"\0")
    inner = sha256(key.translate(_INNER))
    inner.update(data)
    return sha256_digest(key.translate(_OUTER) + inner.digest())


def hkdf_sha256(secret: bytes, salt: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) of ``secret``, one 32-byte block.

    The same bytes as cryptography's ``HKDF`` with ``length=32``.

    Extract, ``PRK = HMAC(salt, secret)`` (an empty salt is HashLen zeros
    inside HMAC, as the RFC says), then expand one block,
    ``T(1) = HMAC(PRK, info | 0x01)``: 32 bytes is one SHA-256 output.
    """
    prk = hmac_sha256(salt, secret)
    return hmac_sha256(prk, info + b"\x01")


def same_tag(expected: bytes, tag: bytes) -> bool:
    """Whether two tags are equal, compared in constant time."""
    from _operator import _compare_digest  # noqa: PLC0415 - hmac.compare_digest, built in

    return _compare_digest(expected, tag)
