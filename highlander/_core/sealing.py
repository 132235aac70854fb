"""Sealing a conversation's bytes for a shared store: AES-GCM under a key only holders derive.

Over etcd a conversation's frames are keys that the cluster's operators and
its backups can read.  The frames are signed already (the HMAC proves who
wrote them); sealing also hides the ones that can carry application data:
the incumbent's, from its second chunk on (PROGRESS notes, SAVED with the
handoff, which is the application's state, REFUSED's detail, a status
reply).  The incumbent's first chunk (HELLO, written before the newcomer has
said anything) and the newcomer's chunks (SAVE, ACK_SUCCESSION, STOP,
STATUS) say nothing the holder key and the newcomer's ``here`` do not show
already, so they are *bound* instead: an HMAC-SHA256 tag under a subkey of
the same conversation key, over the chunk and its key name.  A newcomer
then needs no cipher until the holder answers its SAVE, and loads it while
the holder saves (cryptography's binding: 5-6 ms of loading that sat
between the holder's HELLO and our SAVE; docs/performance.md).  Which chunk
is which is a rule of its place (:func:`sealed_at`), never a flag in the
chunk, so nobody can make a reader take a plain chunk where a sealed one is
due.

The key is derived from the same token as the frames' HMAC key but with
another label, so neither key says anything about the other; each
conversation gets its own subkey (salted with its random id), so a nonce is
just the direction and the chunk's number, never repeated under one key.
The key name is bound in as associated data (or into the tag): a chunk moved
to another conversation, direction or position does not open.

Pure code: cryptography's AES-GCM, imported when first used; the keys and
the tags by :func:`~highlander._core.sha.hkdf_sha256` and
:func:`~highlander._core.sha.hmac_sha256` (no OpenSSL, and not the frames'
signing module, so the conversation's watch can go out before that loads).
"""

from __future__ import annotations

from highlander._core.sha import hkdf_sha256, hmac_sha256, same_tag

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

KEY_BYTES = 32
CONVERSATION_ID_BYTES = 16
CHANNEL_INFO = b"highlander/etcd-channel/v1"
SUBKEY_INFO = b"highlander/etcd-conversation/v1"
#: The label of a conversation's tag subkey (bound chunks), beside its cipher key.
BIND_INFO = b"highlander/etcd-bound-chunk/v1"
TAG_BYTES = 32
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


def sealed_at(direction: int, number: int) -> bool:
    """Whether chunk ``number`` of ``direction`` is sealed (else bound, readable).

    The incumbent's chunks after its first: the only ones that can carry
    application data.  Both sides apply the rule; a reader never asks the chunk.
    """
    return direction == INCUMBENT and number > 0


def _bind_key(key: bytes) -> bytes:
    # HKDF-Expand's one block: a subkey for tags, so the cipher key is never an HMAC key.
    return hmac_sha256(key, BIND_INFO + b"\x01")


def bind(key: bytes, name: bytes, chunk: bytes) -> bytes:
    """``chunk`` readable but authenticated: a tag over it and its key ``name`` follows it."""
    return chunk + hmac_sha256(_bind_key(key), name + b"\0" + chunk)


def unbind(key: bytes, number: int, name: bytes, bound: bytes) -> bytes:
    """The chunk :func:`bind` bound; :class:`Unsealable` if its tag does not match."""
    chunk, tag = bound[:-TAG_BYTES], bound[-TAG_BYTES:]
    expected = hmac_sha256(_bind_key(key), name + b"\0" + chunk)
    if len(bound) < TAG_BYTES or not same_tag(expected, tag):
        raise Unsealable(f"chunk {number} of {name!r} does not open under this key")
    return chunk


def protect(key: bytes, direction: int, number: int, name: bytes, chunk: bytes) -> bytes:
    """Chunk ``number`` of ``direction`` as it is written: sealed or bound, as its place says."""
    if sealed_at(direction, number):
        return seal(key, direction, number, name, chunk)
    return bind(key, name, chunk)


def reveal(key: bytes, direction: int, number: int, name: bytes, written: bytes) -> bytes:
    """The chunk :func:`protect` wrote at that place; :class:`Unsealable` if it does not open."""
    if sealed_at(direction, number):
        return unseal(key, direction, number, name, written)
    return unbind(key, number, name, written)
