"""Sealing a conversation's bytes for a shared store: AES-GCM under a key only holders derive.

Over etcd a conversation's frames are keys that the cluster's operators and
its backups can read.  The frames are signed already (the HMAC proves who
wrote them); sealing also hides them, above all the handoff in ``SAVED``,
which is the application's state.  The key is derived from the same token as
the frames' HMAC key but with another label, so neither key says anything
about the other; each conversation gets its own subkey (salted with its
random id), so a nonce is just the direction and the chunk's number, never
repeated under one key.  The key name is bound in as associated data: a chunk
moved to another conversation, direction or position does not open.

Pure code: cryptography's AES-GCM and HKDF, imported when first used.
"""

from __future__ import annotations

import struct

KEY_BYTES = 32
CONVERSATION_ID_BYTES = 16
CHANNEL_INFO = b"highlander/etcd-channel/v1"
SUBKEY_INFO = b"highlander/etcd-conversation/v1"
#: Direction bytes of the nonce: what the newcomer writes, what the incumbent writes.
NEWCOMER, INCUMBENT = 1, 2


class Unsealable(ValueError):  # noqa: N818 - names what arrived, like ValueError's kin
    """A chunk that does not open: another key, tampered, or moved."""


def _hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415 - lazy by design
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF  # noqa: PLC0415

    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=info).derive(secret)


def channel_key(token: bytes, project_key: bytes) -> bytes:
    """The project's sealing key: HKDF-SHA256(token, salt=project_key, info=CHANNEL_INFO)."""
    return _hkdf(token, project_key, CHANNEL_INFO)


def conversation_key(channel: bytes, conversation_id: bytes) -> bytes:
    """One conversation's subkey, salted with its random id."""
    if len(conversation_id) != CONVERSATION_ID_BYTES:
        raise ValueError(f"a conversation id is {CONVERSATION_ID_BYTES} bytes")
    return _hkdf(channel, conversation_id, SUBKEY_INFO)


def _nonce(direction: int, number: int) -> bytes:
    if direction not in (NEWCOMER, INCUMBENT) or not 0 <= number < 2**64:
        raise ValueError(f"no nonce for direction {direction}, chunk {number}")
    return struct.pack(">BxxxQ", direction, number)


def load() -> None:
    """Import what :func:`seal` and :func:`unseal` need (AES-GCM), ahead of the first chunk.

    Each side calls it while it waits for the other (the newcomer after its
    ``here``, the holder when it starts serving), so the import is not on
    the conversation's path.
    """
    import cryptography.exceptions  # noqa: PLC0415 - the point is the import
    import cryptography.hazmat.primitives.ciphers.aead  # noqa: F401, PLC0415


def seal(key: bytes, direction: int, number: int, name: bytes, chunk: bytes) -> bytes:
    """``chunk`` encrypted and authenticated, bound to its key ``name``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

    return AESGCM(key).encrypt(_nonce(direction, number), chunk, name)


def unseal(key: bytes, direction: int, number: int, name: bytes, sealed: bytes) -> bytes:
    """The chunk :func:`seal` sealed; :class:`Unsealable` if it does not open."""
    from cryptography.exceptions import InvalidTag  # noqa: PLC0415
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

    try:
        return AESGCM(key).decrypt(_nonce(direction, number), sealed, name)
    except InvalidTag as exc:
        raise Unsealable(f"chunk {number} of {name!r} does not open under this key") from exc
