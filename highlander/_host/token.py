"""The shared secret that keys every frame's HMAC.

``HIGHLANDER_TOKEN`` (or the ``token=`` argument) is the secret.  Without it,
a per-user secret file in the runtime directory (0600, published atomically:
written under an ``O_EXCL`` temporary name, then hard-linked into place)
keys the HMAC, and a one-time warning on stderr says what that does and does
not protect against.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping

from highlander._core.errors import UnsafeSecretError
from highlander._core.values import Value
from highlander._host.files import kind
from highlander._host.log import warn_once

TOKEN_VAR = "HIGHLANDER_TOKEN"  # noqa: S105 - a variable name, not a secret
SECRET_FILE = "secret"  # noqa: S105 - a file name, not a secret
MIN_TOKEN_CHARS = 16
# O_NONBLOCK: a FIFO planted under the secret's name must not hang the open.
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class Token(Value):
    """The secret bytes and where they came from (for ``doctor`` and logs)."""

    secret: bytes
    source: str

    def __repr__(self) -> str:
        return f"Token(source={self.source!r}, secret=<{len(self.secret)} bytes>)"


def resolve_token(
    explicit: str | bytes | None = None,
    *,
    runtime_dir: str,
    env: Mapping[str, str] | None = None,
) -> Token:
    """Return the token: ``explicit``, else ``HIGHLANDER_TOKEN``, else the secret file.

    An empty value counts as absent (an IDE that failed to substitute a
    variable often passes an empty string).
    """
    env = os.environ if env is None else env
    if explicit and explicit.strip():
        secret = explicit.strip().encode() if isinstance(explicit, str) else explicit.strip()
        source = "token= argument"
    elif env.get(TOKEN_VAR, "").strip():
        secret = env[TOKEN_VAR].strip().encode()
        source = TOKEN_VAR
    else:
        path = os.path.join(runtime_dir, SECRET_FILE)
        warn_once(
            "token-file",
            "token_from_secret_file",
            path=path,
            message=f"{TOKEN_VAR} is not set; using the per-user secret file {path}. It keeps "
            "other users out, but any process running as you can read it and take over the "
            f"project. Set {TOKEN_VAR} in the MCP config of every client to require the token.",
        )
        return Token(load_or_create_secret(runtime_dir), f"secret file {path}")
    if len(secret) < MIN_TOKEN_CHARS:
        warn_once(
            "token-short",
            "token_too_short",
            source=source,
            bytes=len(secret),
            message=f"{source} is only {len(secret)} bytes; use at least 32 random characters, "
            "e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'",
        )
    return Token(secret, source)


def load_or_create_secret(runtime_dir: str) -> bytes:
    """Return the per-user secret from ``runtime_dir``, creating it if absent.

    Concurrent first calls agree on one secret: each writes a private
    temporary file and the first ``link`` into place wins.
    """
    path = os.path.join(runtime_dir, SECRET_FILE)
    if not os.path.lexists(path):
        _publish_secret(path)
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError as exc:
        raise UnsafeSecretError(
            f"cannot open the secret file {path}: {exc.strerror}; remove it "
            f"(a new one is created) or set {TOKEN_VAR}"
        ) from exc
    try:
        problem = _secret_problem(os.fstat(fd))
        if problem:
            raise UnsafeSecretError(
                f"secret file {path} {problem}: remove it (a new one is created) or set {TOKEN_VAR}"
            )
        secret = os.read(fd, 4096).strip()
    finally:
        os.close(fd)
    if len(secret) < MIN_TOKEN_CHARS:
        raise UnsafeSecretError(
            f"secret file {path} is empty or truncated: remove it (a new one is created) "
            f"or set {TOKEN_VAR}"
        )
    return secret


def _secret_problem(st: os.stat_result) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return f"is {kind(st.st_mode)}, not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by you"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}, readable by others"
    return None


def _publish_secret(path: str) -> None:
    tmp = f"{path}.{os.urandom(8).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(os.urandom(32).hex().encode() + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        # If another process published first, everyone reads its secret.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
