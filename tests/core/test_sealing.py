"""Sealing a conversation's chunks for etcd (``_core/sealing``): hidden, bound, per conversation."""

from __future__ import annotations

import hashlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from highlander._core import sealing
from highlander._core.signing import derive_key
from tests.support.imports import loaded_after

PROJECT = hashlib.sha256(b"github.com/Org/Repo").digest()
TOKEN = b"test-token-0123456789"
CONVERSATION = bytes(range(16))
NAME = b"/r/conv/00/i/0000000000000000"


def _key() -> bytes:
    return sealing.conversation_key(sealing.channel_key(TOKEN, PROJECT), CONVERSATION)


def test_a_sealed_chunk_opens_to_itself_and_hides_it() -> None:
    sealed = sealing.seal(_key(), sealing.INCUMBENT, 0, NAME, b"the handoff")
    assert b"the handoff" not in sealed
    assert len(sealed) == len(b"the handoff") + 16  # the GCM tag
    assert sealing.unseal(_key(), sealing.INCUMBENT, 0, NAME, sealed) == b"the handoff"


@pytest.mark.parametrize(
    ("direction", "number", "name"),
    [
        (sealing.NEWCOMER, 0, NAME),  # turned round
        (sealing.INCUMBENT, 1, NAME),  # moved along the stream
        (sealing.INCUMBENT, 0, NAME + b"x"),  # moved to another key
    ],
)
def test_a_chunk_opens_only_where_it_was_sealed(direction: int, number: int, name: bytes) -> None:
    sealed = sealing.seal(_key(), sealing.INCUMBENT, 0, NAME, b"chunk")
    with pytest.raises(sealing.Unsealable, match="does not open"):
        sealing.unseal(_key(), direction, number, name, sealed)


def test_another_token_or_conversation_opens_nothing() -> None:
    sealed = sealing.seal(_key(), sealing.NEWCOMER, 3, NAME, b"chunk")
    other_token = sealing.conversation_key(
        sealing.channel_key(b"other-token", PROJECT), CONVERSATION
    )
    other_conversation = sealing.conversation_key(sealing.channel_key(TOKEN, PROJECT), bytes(16))
    for key in (other_token, other_conversation):
        with pytest.raises(sealing.Unsealable):
            sealing.unseal(key, sealing.NEWCOMER, 3, NAME, sealed)


def test_a_tampered_chunk_does_not_open() -> None:
    sealed = bytearray(sealing.seal(_key(), sealing.NEWCOMER, 0, NAME, b"chunk"))
    sealed[0] ^= 1
    with pytest.raises(sealing.Unsealable):
        sealing.unseal(_key(), sealing.NEWCOMER, 0, NAME, bytes(sealed))


def test_the_sealing_key_is_not_the_signing_key() -> None:
    assert sealing.channel_key(TOKEN, PROJECT) != derive_key(TOKEN, PROJECT)
    assert len(sealing.channel_key(TOKEN, PROJECT)) == sealing.KEY_BYTES
    assert sealing.channel_key(TOKEN, PROJECT) != sealing.channel_key(TOKEN, bytes(32))


def test_the_keys_are_hkdf_sha256_with_their_labels() -> None:
    # Written out so a change of label, salt or hash is a failing test, not a silent
    # change of what every deployed holder derives (an upgrade would stop talking).
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    def hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)

    channel = hkdf(TOKEN, PROJECT, b"highlander/etcd-channel/v1")
    assert sealing.channel_key(TOKEN, PROJECT) == channel
    assert _key() == hkdf(channel, CONVERSATION, b"highlander/etcd-conversation/v1")


@pytest.mark.parametrize("length", [0, 15, 17, 32])
def test_a_conversation_id_is_sixteen_bytes(length: int) -> None:
    with pytest.raises(ValueError, match=r"^a conversation id is 16 bytes$"):
        sealing.conversation_key(sealing.channel_key(TOKEN, PROJECT), bytes(length))


@pytest.mark.parametrize(("direction", "number"), [(0, 0), (3, 0), (1, -1), (2, 2**64)])
def test_no_nonce_outside_the_two_directions_and_64_bits(direction: int, number: int) -> None:
    with pytest.raises(ValueError, match="no nonce"):
        sealing.seal(_key(), direction, number, NAME, b"x")


def test_the_last_chunk_number_still_seals() -> None:
    sealed = sealing.seal(_key(), sealing.NEWCOMER, 2**64 - 1, NAME, b"x")
    assert sealing.unseal(_key(), sealing.NEWCOMER, 2**64 - 1, NAME, sealed) == b"x"
    assert sealing.seal(_key(), sealing.NEWCOMER, 0, NAME, b"x") != sealing.seal(
        _key(), sealing.INCUMBENT, 0, NAME, b"x"
    )


def test_the_cipher_is_the_class_cryptography_publishes() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    assert sealing.aes_gcm() is AESGCM


def test_sealing_loads_neither_typing_nor_cryptographys_python_helpers() -> None:
    # The newcomer derives its key and loads the cipher while the holder's HELLO
    # travels: ~10 ms of imports there delayed the HELLO's delivery (#15).
    statements = (
        "from highlander._core import sealing\n"
        "key = sealing.conversation_key(sealing.channel_key(b't', b'p'), bytes(16))\n"
        "sealing.load()\n"
        "sealed = sealing.seal(key, 1, 0, b'n', b'x')\n"
        "assert sealing.unseal(key, 1, 0, b'n', sealed) == b'x'\n"
    )
    helpers = ("typing", "cryptography.utils", "cryptography.exceptions")
    assert loaded_after(statements, helpers) == []


@given(st.sampled_from([sealing.NEWCOMER, sealing.INCUMBENT]), st.integers(0, 2**64 - 1))
def test_a_nonce_is_the_direction_three_zeros_and_the_number(direction: int, number: int) -> None:
    assert sealing._nonce(direction, number) == struct.pack(">BxxxQ", direction, number)
