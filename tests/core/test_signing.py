"""Key derivation and frame MACs: every bound input changes the tag."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from highlander._core.sha import hkdf_sha256
from highlander._core.signing import (
    HKDF_INFO,
    KEY_BYTES,
    NO_NONCE,
    Direction,
    derive_key,
    mac_input,
    sign,
    verify,
)
from tests.support.imports import loaded_after

TOKEN = b"test-token"
PROJECT = hashlib.sha256(b"/project").digest()
KEY = derive_key(TOKEN, PROJECT)
INC = bytes.fromhex("22" * 16)
NEW = bytes.fromhex("11" * 16)
PAYLOAD = b'{"counter":1,"done":null,"note":"","seq":1,"total":null,"type":"PROGRESS","v":1}'
OUT = Direction.INCUMBENT_TO_NEWCOMER


def _hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """RFC 5869, written out independently of the library."""
    prk = hmac.digest(salt, ikm, "sha256")
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes([counter]), "sha256")
        out += block
        counter += 1
    return out[:length]


def test_derive_key_is_deterministic_and_32_bytes() -> None:
    key = derive_key(TOKEN, PROJECT)
    assert key == derive_key(TOKEN, PROJECT)
    assert isinstance(key, bytes)
    assert len(key) == KEY_BYTES == 32


def test_derive_key_is_documented_hkdf() -> None:
    assert HKDF_INFO == b"highlander/v1"
    assert derive_key(TOKEN, PROJECT) == _hkdf_sha256(TOKEN, PROJECT, HKDF_INFO, 32)


def _cryptographys_hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
    """The reference: cryptography's HKDF, which DESIGN.md names for the key."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


def test_derive_key_is_cryptographys_hkdf() -> None:
    assert derive_key(TOKEN, PROJECT) == _cryptographys_hkdf(TOKEN, PROJECT, HKDF_INFO)


@settings(max_examples=300, deadline=None)
@given(secret=st.binary(max_size=96), salt=st.binary(max_size=96), info=st.binary(max_size=64))
def test_hkdf_sha256_is_cryptographys_hkdf(secret: bytes, salt: bytes, info: bytes) -> None:
    assert hkdf_sha256(secret, salt, info) == _cryptographys_hkdf(secret, salt, info)


def test_deriving_a_key_loads_no_cryptography() -> None:
    """The frames' key on a newcomer's path: no cryptography, no typing, no OpenSSL (fresh)."""
    statements = "from highlander._core.signing import derive_key; derive_key(b't', bytes(32))"
    heavy = ("cryptography", "typing", "_hashlib", "hashlib", "hmac")
    assert loaded_after(statements, heavy) == []


def test_derive_key_depends_on_token() -> None:
    keys = {derive_key(token, PROJECT) for token in [b"test-token", b"test-tokeN", b"", b"x" * 64]}
    assert len(keys) == 4


def test_derive_key_depends_on_project_key() -> None:
    other = hashlib.sha256(b"/other-project").digest()
    assert derive_key(TOKEN, PROJECT) != derive_key(TOKEN, other)


def test_derive_key_is_not_the_token_or_a_plain_hash() -> None:
    key = derive_key(TOKEN, PROJECT)
    assert key not in {TOKEN, hashlib.sha256(TOKEN).digest(), PROJECT}


# -- mac_input --------------------------------------------------------------------------


def test_mac_input_layout_is_exact() -> None:
    data = mac_input(OUT, INC, NEW, 0x0102030405060708, PAYLOAD)
    assert len(data) == 1 + 1 + 16 + 16 + 8 + len(PAYLOAD)
    assert data[0] == 1  # protocol version first
    assert data[1] == int(OUT) == 2
    assert data[2:18] == INC
    assert data[18:34] == NEW
    assert data[34:42] == bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert data[42:] == PAYLOAD


def test_mac_input_direction_bytes() -> None:
    assert mac_input(Direction.NEWCOMER_TO_INCUMBENT, INC, NEW, 0, b"")[1] == 1
    assert mac_input(Direction.INCUMBENT_TO_NEWCOMER, INC, NEW, 0, b"")[1] == 2


def test_mac_input_hello_uses_zero_newcomer_nonce() -> None:
    assert bytes(16) == NO_NONCE
    data = mac_input(OUT, INC, NO_NONCE, 0, b"{}")
    assert data == b"\x01\x02" + INC + bytes(16) + bytes(8) + b"{}"


@pytest.mark.parametrize(("inc", "new"), [(INC[:15], NEW), (INC, NEW + b"\x00"), (b"", b"")])
def test_mac_input_rejects_wrong_nonce_length(inc: bytes, new: bytes) -> None:
    with pytest.raises(ValueError, match="nonces must be 16 bytes"):
        mac_input(OUT, inc, new, 0, PAYLOAD)


def test_direction_reverse() -> None:
    assert Direction.NEWCOMER_TO_INCUMBENT.reverse is Direction.INCUMBENT_TO_NEWCOMER
    assert Direction.INCUMBENT_TO_NEWCOMER.reverse is Direction.NEWCOMER_TO_INCUMBENT


# -- sign / verify --------------------------------------------------------------------------


def test_sign_is_hmac_sha256_of_mac_input() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    assert len(tag) == 32
    expected = hmac.new(KEY, mac_input(OUT, INC, NEW, 1, PAYLOAD), hashlib.sha256).digest()
    assert tag == expected


def test_verify_accepts_the_right_tag() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    assert verify(KEY, tag, OUT, INC, NEW, 1, PAYLOAD) is True


def test_any_flipped_payload_byte_fails() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    for i in range(len(PAYLOAD)):
        for mask in (0x01, 0x80, 0xFF):
            tampered = bytearray(PAYLOAD)
            tampered[i] ^= mask
            assert verify(KEY, tag, OUT, INC, NEW, 1, bytes(tampered)) is False, (i, mask)


def test_any_flipped_tag_byte_fails() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    for i in range(len(tag)):
        for mask in (0x01, 0x80, 0xFF):
            tampered = bytearray(tag)
            tampered[i] ^= mask
            assert verify(KEY, bytes(tampered), OUT, INC, NEW, 1, PAYLOAD) is False, (i, mask)


@pytest.mark.parametrize("tag", [b"", bytes(32), bytes(31), bytes(33)])
def test_wrong_tags_fail(tag: bytes) -> None:
    assert verify(KEY, tag, OUT, INC, NEW, 1, PAYLOAD) is False


def test_truncated_or_extended_tag_fails() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    assert verify(KEY, tag[:-1], OUT, INC, NEW, 1, PAYLOAD) is False
    assert verify(KEY, tag + b"\x00", OUT, INC, NEW, 1, PAYLOAD) is False


def test_payload_extension_fails() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    assert verify(KEY, tag, OUT, INC, NEW, 1, PAYLOAD + b" ") is False
    assert verify(KEY, tag, OUT, INC, NEW, 1, PAYLOAD[:-1]) is False


def test_every_bound_input_changes_the_tag() -> None:
    base = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    variants = {
        "direction": sign(KEY, OUT.reverse, INC, NEW, 1, PAYLOAD),
        "incumbent nonce": sign(KEY, OUT, NEW, NEW, 1, PAYLOAD),
        "newcomer nonce": sign(KEY, OUT, INC, INC, 1, PAYLOAD),
        "newcomer nonce zero": sign(KEY, OUT, INC, NO_NONCE, 1, PAYLOAD),
        "swapped nonces": sign(KEY, OUT, NEW, INC, 1, PAYLOAD),
        "seq": sign(KEY, OUT, INC, NEW, 2, PAYLOAD),
        "seq high byte": sign(KEY, OUT, INC, NEW, 1 + 2**56, PAYLOAD),
        "key": sign(derive_key(b"other-token", PROJECT), OUT, INC, NEW, 1, PAYLOAD),
    }
    for name, tag in variants.items():
        assert tag != base, name
    assert len(set(variants.values())) == len(variants)


@pytest.mark.parametrize(
    ("direction", "inc", "new", "seq"),
    [
        (OUT.reverse, INC, NEW, 1),
        (OUT, NEW, NEW, 1),
        (OUT, INC, INC, 1),
        (OUT, INC, NO_NONCE, 1),
        (OUT, INC, NEW, 0),
        (OUT, INC, NEW, 2),
    ],
    ids=["direction", "incumbent-nonce", "newcomer-nonce", "zero-nonce", "seq-0", "seq-2"],
)
def test_verify_fails_when_a_bound_input_differs(
    direction: Direction, inc: bytes, new: bytes, seq: int
) -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    assert verify(KEY, tag, direction, inc, new, seq, PAYLOAD) is False


def test_verify_fails_with_another_key() -> None:
    tag = sign(KEY, OUT, INC, NEW, 1, PAYLOAD)
    other = derive_key(TOKEN, hashlib.sha256(b"/elsewhere").digest())
    assert verify(other, tag, OUT, INC, NEW, 1, PAYLOAD) is False
