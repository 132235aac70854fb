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

Pure code: cryptography's AES-GCM, imported when first used; the keys by
:func:`~highlander._core.sha.hkdf_sha256` (the stdlib's HMAC; not the frames'
signing module, so the conversation's watch can go out before that loads).
"""

from __future__ import annotations

from highlander._core.sha import hkdf_sha256

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

KEY_BYTES = 32
CONVERSATION_ID_BYTES = 16
CHANNEL_INFO = b"highlander/etcd-channel/v1"
SUBKEY_INFO = b"highlander/etcd-conversation/v1"
#: Direction bytes of the nonce: what the newcomer writes, what the incumbent writes.
NEWCOMER, INCUMBENT = 1, 2
#: cryptography's AES-GCM class, once :func:`aes_gcm` loaded it.
_AESGCM: Any = None


class Unsealable(ValueError):  # noqa: N818 - names what arrived, like ValueError's kin
    """A chunk that does not open: another key, tampered, or moved."""


def channel_key(token: bytes, project_key: bytes) -> bytes:
    """The project's sealing key: HKDF-SHA256(token, salt=project_key, info=CHANNEL_INFO)."""
    return hkdf_sha256(token, project_key, CHANNEL_INFO)


def conversation_key(channel: bytes, conversation_id: bytes) -> bytes:
    """One conversation's subkey, salted with its random id."""
    if len(conversation_id) != CONVERSATION_ID_BYTES:
        raise ValueError(f"a conversation id is {CONVERSATION_ID_BYTES} bytes")
    return hkdf_sha256(channel, conversation_id, SUBKEY_INFO)


def _nonce(direction: int, number: int) -> bytes:
    if direction not in (NEWCOMER, INCUMBENT) or not 0 <= number < 2**64:
        raise ValueError(f"no nonce for direction {direction}, chunk {number}")
    # direction | 3 zero bytes | number (8 bytes, big-endian): struct's ">BxxxQ"
    return bytes((direction, 0, 0, 0)) + number.to_bytes(8, "big")


def aes_gcm() -> Any:
    """The AES-GCM class of cryptography (loaded once).

    The class the public ``cryptography.hazmat.primitives.ciphers.aead``
    names is the Rust binding's own; importing it from there first imports
    ``cryptography.utils`` and ``typing`` (18 against 5 ms here).  A release
    that moves it leaves the public module, which serves then.
    """
    global _AESGCM  # noqa: PLW0603 - a cache of one class
    if _AESGCM is None:
        try:
            from cryptography.hazmat.bindings._rust import openssl  # noqa: PLC0415

            _AESGCM = openssl.aead.AESGCM
        except (ImportError, AttributeError):  # pragma: no cover - another cryptography
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415

            _AESGCM = AESGCM
    return _AESGCM


def load() -> None:
    """Import what :func:`seal` and :func:`unseal` need (AES-GCM), ahead of the first chunk.

    Each side calls it while it waits for the other (the newcomer while etcd
    answers its claim, the holder when it starts serving), so the import is
    not on the conversation's path; and it seals once, since OpenSSL's first
    AES-GCM operation in a process sets the cipher up (about 1 ms, every later
    one a few microseconds).
    """
    aes_gcm()(bytes(KEY_BYTES)).encrypt(bytes(12), b"", None)


def seal(key: bytes, direction: int, number: int, name: bytes, chunk: bytes) -> bytes:
    """``chunk`` encrypted and authenticated, bound to its key ``name``."""
    sealed: bytes = aes_gcm()(key).encrypt(_nonce(direction, number), chunk, name)
    return sealed


def unseal(key: bytes, direction: int, number: int, name: bytes, sealed: bytes) -> bytes:
    """The chunk :func:`seal` sealed; :class:`Unsealable` if it does not open."""
    try:
        opened: bytes = aes_gcm()(key).decrypt(_nonce(direction, number), sealed, name)
    except Exception as exc:
        # cryptography.exceptions (with typing) only when a chunk does not open.
        from cryptography.exceptions import InvalidTag  # noqa: PLC0415

        if isinstance(exc, InvalidTag):
            raise Unsealable(f"chunk {number} of {name!r} does not open under this key") from exc
        raise
    return opened
