"""docs/protocol.md's test vectors, recomputed from the code: the doc cannot drift."""

from __future__ import annotations

import hashlib
import re

import pytest

from highlander._core.codec import (
    NEED_DATA,
    FrameDecoder,
    decode_payload,
    encode_frame,
    encode_payload,
)
from highlander._core.connection import Connection
from highlander._core.signing import NO_NONCE, Direction, derive_key, mac_input, sign
from highlander._core.state import Role
from tests.support.paths import DOCS

DOC = DOCS / "protocol.md"


def _vectors() -> dict[str, dict[str, str]]:
    blocks = re.findall(r"```test-vector\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    vectors: dict[str, dict[str, str]] = {}
    for block in blocks:
        fields = dict(line.split(": ", 1) for line in block.strip().splitlines())
        vectors[fields.pop("name")] = fields
    return vectors


VECTORS = _vectors()
COMMON = VECTORS["common"]


def test_doc_has_the_vectors() -> None:
    assert set(VECTORS) == {"common", "hello", "save"}


def test_key_derivation_matches_the_doc() -> None:
    project_key = hashlib.sha256(COMMON["project_root"].encode()).digest()
    assert project_key.hex() == COMMON["project_key"]
    assert derive_key(COMMON["token"].encode(), project_key).hex() == COMMON["key"]


@pytest.mark.parametrize("name", ["hello", "save"])
def test_frame_matches_the_doc(name: str) -> None:
    vector = VECTORS[name]
    key = bytes.fromhex(COMMON["key"])
    inc = bytes.fromhex(COMMON["incumbent_nonce"])
    new = NO_NONCE if name == "hello" else bytes.fromhex(COMMON["newcomer_nonce"])
    direction = Direction(int(vector["direction"]))
    seq = int(vector["seq"])
    payload = vector["payload"].encode()

    # The documented payload is exactly what our encoder produces for it.
    decoded_seq, message = decode_payload(payload)
    assert decoded_seq == seq
    assert encode_payload(message, seq) == payload

    prefix = mac_input(direction, inc, new, seq, payload)[: -len(payload)]
    assert prefix.hex() == vector["mac_input_prefix"]
    tag = sign(key, direction, inc, new, seq, payload)
    assert tag.hex() == vector["mac"]
    assert encode_frame(payload + tag).hex() == vector["frame"]


def test_documented_frames_are_accepted_by_a_real_connection() -> None:
    """A newcomer accepts the HELLO vector; an incumbent with that nonce accepts SAVE."""
    key = bytes.fromhex(COMMON["key"])
    inc_nonce = bytes.fromhex(COMMON["incumbent_nonce"])
    new_nonce = bytes.fromhex(COMMON["newcomer_nonce"])

    newcomer = Connection(Role.NEWCOMER, key=key, nonce=new_nonce, now=0.0)
    newcomer.receive_data(bytes.fromhex(VECTORS["hello"]["frame"]))
    hello = newcomer.next_event(0.0)
    assert hello.TYPE == "HELLO"  # type: ignore[union-attr]
    assert newcomer.next_event(0.0) is NEED_DATA

    incumbent = Connection(Role.INCUMBENT, key=key, nonce=inc_nonce, now=0.0)
    incumbent.send(hello, 0.0)  # type: ignore[arg-type]
    incumbent.receive_data(bytes.fromhex(VECTORS["save"]["frame"]))
    save = incumbent.next_event(0.0)
    assert save.TYPE == "SAVE"  # type: ignore[union-attr]
    assert incumbent.peer_nonce == new_nonce


def test_vector_frames_split_cleanly() -> None:
    decoder = FrameDecoder()
    decoder.feed(bytes.fromhex(VECTORS["hello"]["frame"]) + bytes.fromhex(VECTORS["save"]["frame"]))
    first, second = decoder.next_frame(), decoder.next_frame()
    assert isinstance(first, bytes)
    assert isinstance(second, bytes)
    assert first[:-32] == VECTORS["hello"]["payload"].encode()
    assert second[:-32] == VECTORS["save"]["payload"].encode()
    assert decoder.next_frame() is NEED_DATA
