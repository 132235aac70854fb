"""The project's derived HMAC key, kept in the runtime directory between conversations.

The cache was made when deriving the key imported cryptography for its
HKDF, about 10 ms on each side of a succession before HELLO could be
verified.  The HKDF is the stdlib's HMAC now (:func:`highlander._core.sha.hkdf_sha256`,
microseconds), so the cache saves little; it stays, with its checks, until
it is retired as its own change (the runtime directory's layout, doctor and
the docs name it).  The first conversation for a project derives the key
(:func:`highlander._core.signing.derive_key`) and stores it beside the
project's other files (``<base>.key``, 0600, in the 0700 runtime
directory); later conversations, on either side, read it back.

The file is a 32-byte tag, then the 32-byte key, where the tag is
``HMAC-SHA256(token, TAG_LABEL | project key | key)``.  A file whose tag
does not check out (another token, another project, a torn write,
something planted) is not used: the key is derived again and the file
replaced.  A file that is not our own regular file, or is readable by
others, is not used either.

What it exposes: the key signs frames for this one project only; reading
it takes the runtime directory's owner or root, who can read the token
itself from any holder's environment (``/proc/<pid>/environ``).  Storing
is best-effort: a full disk or a read-only directory costs the next
conversation a derivation, nothing else (docs/threat-model.md).
"""

from __future__ import annotations

import os
import stat

from highlander._core.errors import HighlanderError
from highlander._core.sha import hmac_sha256, same_tag
from highlander._host.files import discard, install, open_regular, stage

#: What the tag's HMAC covers first, so it can never equal a frame's MAC or the key.
TAG_LABEL = b"highlander/key-cache/v1\0"
_PART = 32


def cache_path(runtime_dir: str, base: str) -> str:
    """The cache file of the project whose files in ``runtime_dir`` are named ``base.*``."""
    return os.path.join(runtime_dir, base + ".key")


def load(path: str, token: bytes, project_key: bytes) -> bytes | None:
    """The key stored at ``path`` for this token and project; ``None`` if unusable or absent."""
    try:
        fd = open_regular(path, os.O_RDONLY)
    except (OSError, HighlanderError):
        return None
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            return None
        data = os.read(fd, 2 * _PART + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != 2 * _PART:
        return None
    tag, key = data[:_PART], data[_PART:]
    return key if same_tag(_tag(token, project_key, key), tag) else None


def store(path: str, token: bytes, project_key: bytes, key: bytes) -> None:
    """Keep ``key`` at ``path`` for the next conversation; never raises for a file problem."""
    try:
        staged = stage(path, _tag(token, project_key, key) + key)
    except (OSError, HighlanderError):
        return
    try:
        install(staged, path)
    except (OSError, HighlanderError):
        discard(staged)


def _tag(token: bytes, project_key: bytes, key: bytes) -> bytes:
    return hmac_sha256(token, TAG_LABEL + project_key + key)
