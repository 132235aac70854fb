"""Key derivation and frame authentication.

The key is ``HKDF-SHA256(token, salt=project_key, info=b"highlander/v1")``,
32 bytes, so a token leaked for one project does not sign frames for another.
Each frame carries ``HMAC-SHA256(key, mac_input)`` where ``mac_input`` binds
the protocol version, the direction, both session nonces, the frame's
sequence number and the payload bytes (layout in :func:`mac_input` and
docs/protocol.md).  Verification is constant-time.

Pure code; ``cryptography`` is imported only when a key is derived or a
frame signed, so the uncontended fast path (nobody to talk to) never loads
it.  The MAC is cryptography's HMAC rather than the standard library's:
a conversation loads cryptography for HKDF anyway, and the standard
``hmac`` would load a second OpenSSL (``_hashlib``, about 2 ms) on the way
to a succession.
"""

from __future__ import annotations

import enum
import struct
from typing import TYPE_CHECKING, Final

from highlander._core.messages import NONCE_BYTES, PROTOCOL_VERSION

if TYPE_CHECKING:  # cryptography is loaded only when a key or a MAC is computed
    from cryptography.hazmat.primitives.hmac import HMAC

KEY_BYTES: Final = 32
HKDF_INFO: Final = b"highlander/v1"
#: The newcomer's nonce is not known when HELLO is signed; these zeros stand in.
NO_NONCE: Final = bytes(NONCE_BYTES)
_SEQ: Final = struct.Struct(">Q")


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

    ``project_key`` is the SHA-256 of the canonical project path (see
    :func:`highlander._host.rendezvous.project_key`).
    """
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415 - lazy by design
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: PLC0415

    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=project_key, info=HKDF_INFO)
    return hkdf.derive(token)


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
        + _SEQ.pack(seq)
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
    return _mac(key, mac_input(direction, incumbent_nonce, newcomer_nonce, seq, payload)).finalize()


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
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415 - lazy by design

    mac = _mac(key, mac_input(direction, incumbent_nonce, newcomer_nonce, seq, payload))
    try:
        mac.verify(bytes(tag))  # constant-time; cryptography's constant_time loads stdlib hmac
    except InvalidSignature:
        return False
    return True


def _mac(key: bytes, data: bytes) -> HMAC:
    from cryptography.hazmat.primitives import hashes, hmac  # noqa: PLC0415 - lazy by design

    mac = hmac.HMAC(key, hashes.SHA256())
    mac.update(data)
    return mac
