"""Key derivation and frame authentication.

The key is ``HKDF-SHA256(token, salt=project_key, info=b"highlander/v1")``,
32 bytes, so a token leaked for one project does not sign frames for another.
Each frame carries ``HMAC-SHA256(key, mac_input)`` where ``mac_input`` binds
the protocol version, the direction, both session nonces, the frame's
sequence number and the payload bytes (layout in :func:`mac_input` and
docs/protocol.md).  Verification is constant-time.

Pure code, and no ``cryptography``: the MAC and the HKDF (RFC 5869, which
is two HMACs for one 32-byte block) are HMAC-SHA256 over the interpreter's
built-in SHA-256 (:func:`highlander._core.sha.hmac_sha256`: no OpenSSL to
load on a newcomer's path, 2-4 ms).  DESIGN.md names
cryptography's HKDF; the key is the same HKDF-SHA256, byte for byte
(:func:`~highlander._core.sha.hkdf_sha256`, which ``tests/core/test_signing.py``
checks against cryptography's ``HKDF`` over generated inputs), but a newcomer no longer
imports cryptography's ``hashes`` (with ``typing`` and ``cryptography.utils``,
5-10 ms) to compute it: on etcd that import sat between the holder's HELLO
and our SAVE (docs/performance.md).  cryptography stays what only it gives
here: AES-GCM (:mod:`highlander._core.sealing`).
"""

from __future__ import annotations

import enum

from highlander._core.messages import NONCE_BYTES, PROTOCOL_VERSION
from highlander._core.sha import hkdf_sha256, hmac_sha256, same_tag

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Final

KEY_BYTES: Final = 32
HKDF_INFO: Final = b"highlander/v1"
#: The newcomer's nonce is not known when HELLO is signed; these zeros stand in.
NO_NONCE: Final = bytes(NONCE_BYTES)


class Direction(enum.IntEnum):
    """Which way a frame travels; part of the MAC so a frame cannot be reflected."""

    NEWCOMER_TO_INCUMBENT = 1
    INCUMBENT_TO_NEWCOMER = 2

    @property
    def reverse(self) -> Direction:
        """The opposite direction."""
        if self is Direction.NEWCOMER_TO_INCUMBENT:
            return Direction.INCUMBENT_TO_NEWCOMER
        return Direction.NEWCOMER_TO_INCUMBENT


def derive_key(token: bytes, project_key: bytes) -> bytes:
    """Derive the per-project HMAC key from the shared token.

    ``HKDF-SHA256(token, salt=project_key, info=HKDF_INFO)``, 32 bytes.
    ``project_key`` is the SHA-256 of the canonical project path (see
    :func:`highlander._host.rendezvous.project_key`).
    """
    return hkdf_sha256(token, project_key, HKDF_INFO)


def mac_input(
    direction: Direction,
    incumbent_nonce: bytes,
    newcomer_nonce: bytes,
    seq: int,
    payload: bytes,
) -> bytes:
    """Return the exact bytes the MAC covers.

    ``version (1) | direction (1) | incumbent nonce (16) | newcomer nonce (16)
    | seq (8, big-endian) | payload``.
    """
    if len(incumbent_nonce) != NONCE_BYTES or len(newcomer_nonce) != NONCE_BYTES:
        raise ValueError(f"nonces must be {NONCE_BYTES} bytes")
    return (
        bytes((PROTOCOL_VERSION, int(direction)))
        + incumbent_nonce
        + newcomer_nonce
        + seq.to_bytes(8, "big")  # int, not struct: a newcomer need not import it
        + payload
    )


def sign(
    key: bytes,
    direction: Direction,
    incumbent_nonce: bytes,
    newcomer_nonce: bytes,
    seq: int,
    payload: bytes,
) -> bytes:
    """Return the 32-byte HMAC-SHA256 tag of a frame."""
    return hmac_sha256(key, mac_input(direction, incumbent_nonce, newcomer_nonce, seq, payload))


def verify(
    key: bytes,
    tag: bytes,
    direction: Direction,
    incumbent_nonce: bytes,
    newcomer_nonce: bytes,
    seq: int,
    payload: bytes,
) -> bool:
    """Return whether ``tag`` authenticates the frame, in constant time."""
    expected = sign(key, direction, incumbent_nonce, newcomer_nonce, seq, payload)
    return same_tag(expected, bytes(tag))
