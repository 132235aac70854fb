"""The built-in SHA-256 and its HMAC are hashlib's and hmac's, byte for byte."""

from __future__ import annotations

import hashlib
import hmac
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from highlander._core.sha import BLOCK, hmac_sha256, sha256_digest

# Keys around the block size: shorter ones are padded, longer ones hashed first.
KEYS = st.one_of(
    st.binary(max_size=2 * BLOCK + 1),
    st.sampled_from([b"", bytes(BLOCK - 1), bytes(BLOCK), b"\xff" * (BLOCK + 1)]),
)


@given(st.binary(max_size=4096))
def test_sha256_is_hashlibs(data: bytes) -> None:
    assert sha256_digest(data) == hashlib.sha256(data).digest()


@given(KEYS, st.binary(max_size=4096))
def test_hmac_sha256_is_hmacs(key: bytes, data: bytes) -> None:
    assert hmac_sha256(key, data) == hmac.digest(key, data, "sha256")


def test_rfc_4231_case_2() -> None:
    """The RFC's own vector, independent of this interpreter's hmac module."""
    tag = hmac_sha256(b"Jefe", b"what do ya want for nothing?")
    assert tag.hex() == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"


def test_loads_no_openssl() -> None:
    """A fresh interpreter computes both without ``_hashlib`` (OpenSSL) or ``hashlib``."""
    probe = (
        "import sys; from highlander._core.sha import hmac_sha256; hmac_sha256(b'k', b'd'); "
        "print(sorted(m for m in sys.modules if m in ('_hashlib', 'hashlib', 'hmac')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
