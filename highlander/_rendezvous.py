"""Where a project's instances meet: project root, runtime directory, file names.

Path logic is pure and takes the environment as an argument; the only
function that touches the file system is :func:`ensure_runtime_dir`.

* Project root: explicit argument, ``HIGHLANDER_PROJECT``,
  ``CLAUDE_PROJECT_DIR``, then the working directory; always ``realpath``-ed,
  so two spellings of one directory meet.
* Runtime directory: ``HIGHLANDER_RUNTIME_DIR``, ``/run/user/<uid>/highlander``
  when ``/run/user/<uid>`` exists and is ours, then ``/tmp/highlander-<uid>``.
  ``XDG_RUNTIME_DIR`` and ``TMPDIR`` are deliberately ignored: clients pass
  only an allow-list of variables, so they differ between clients.
* Names: ``<app>-<hash>`` plus ``.sock``, ``.lock``, ``.state``,
  ``.events.jsonl``; a shorter name when the socket path would not fit the
  kernel's ``sun_path``.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping

from highlander._errors import ConfigurationError, SocketPathTooLongError, UnsafeRuntimeDirError
from highlander._values import Value

# The interpreter's built-in SHA-256: hashlib would first load OpenSSL, which
# costs the claim path about 2 ms (the digest is the same).  No stubs exist
# for these private modules, hence the ignores.
try:
    from _sha2 import sha256  # type: ignore[import-not-found]  # CPython >= 3.12
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11
    except ImportError:
        from hashlib import sha256

#: Usable bytes of ``sockaddr_un.sun_path`` (its size minus the terminating NUL).
SUN_PATH_MAX = {"linux": 107, "darwin": 103}
PROJECT_VARS = ("HIGHLANDER_PROJECT", "CLAUDE_PROJECT_DIR")
RUNTIME_VAR = "HIGHLANDER_RUNTIME_DIR"
APP_MAX = 32
HASH_CHARS = 16
_UNSAFE_APP_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def sun_path_limit(platform: str | None = None) -> int:
    """Return the longest socket path the kernel accepts on ``platform``."""
    key = platform or sys.platform
    return SUN_PATH_MAX.get(key, min(SUN_PATH_MAX.values()))


def project_root(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> str:
    """Return the canonical project root (see the module docstring for the order).

    A root that is not an existing directory is a :class:`ConfigurationError`
    naming where it came from: a typo must not silently become another project.
    """
    env = os.environ if env is None else env
    candidates: list[tuple[str, str | os.PathLike[str] | None]] = [("project=", explicit)]
    candidates += [(name, env.get(name) or None) for name in PROJECT_VARS]
    for source, value in candidates:
        if value is not None and os.fspath(value) != "":
            return _existing_dir(os.fspath(value), source)
    return _existing_dir(cwd if cwd is not None else os.getcwd(), "the working directory")


def _existing_dir(path: str, source: str) -> str:
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ConfigurationError(
            f"project root {path!r} (from {source}) is not a directory: "
            "point it at the project's top-level directory"
        )
    return real


def project_key(root: str) -> bytes:
    """Return the 32-byte key of a canonical project root: SHA-256 of its bytes.

    It names the project's files and salts the HMAC key derivation.
    """
    digest: bytes = sha256(os.fsencode(root)).digest()
    return digest


def app_name(app: str) -> str:
    """Return ``app`` reduced to a safe file-name part: ``[A-Za-z0-9._-]``, <= 32 chars."""
    safe = _UNSAFE_APP_CHARS.sub("_", app).lstrip(".")[:APP_MAX]
    if not safe:
        raise ConfigurationError(
            f"app name {app!r} is empty once reduced to letters, digits, '.', '_' and '-': "
            "pass app='my-server'"
        )
    return safe


def choose_runtime_dir(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    uid: int | None = None,
) -> str:
    """Return the runtime directory to use (not yet created or checked)."""
    env = os.environ if env is None else env
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.abspath(os.fspath(explicit))
    if env.get(RUNTIME_VAR):
        return os.path.abspath(env[RUNTIME_VAR])
    uid = os.geteuid() if uid is None else uid
    run_user = f"/run/user/{uid}"
    try:
        st = os.lstat(run_user)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
        return os.path.join(run_user, "highlander")
    return f"/tmp/highlander-{uid}"  # noqa: S108 - per-uid, created 0700 and verified


def ensure_runtime_dir(path: str) -> str:
    """Create ``path`` (mode 0700) if absent and verify that only we can use it.

    Raises :class:`UnsafeRuntimeDirError` for a symlink, a non-directory, a
    foreign owner or any group/other permission bit, with the fix.
    """
    try:
        _make_private_dirs(path)
    except OSError as exc:
        raise UnsafeRuntimeDirError(
            f"cannot create the runtime directory {path}: {exc.strerror}; "
            f"set {RUNTIME_VAR} to a directory you own"
        ) from exc
    st = os.lstat(path)
    uid = os.geteuid()
    hint = f"or set {RUNTIME_VAR} to a private directory"
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeRuntimeDirError(
            f"runtime directory {path} is a symlink, which someone else may have planted: "
            f"remove it (rm {path}) so Highlander can create a real one, {hint}"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeRuntimeDirError(
            f"runtime directory {path} is not a directory: remove it, {hint}"
        )
    if st.st_uid != uid:
        raise UnsafeRuntimeDirError(
            f"runtime directory {path} is owned by uid {st.st_uid}, not by you (uid {uid}): "
            f"another user may control it; remove it as its owner, {hint}"
        )
    if st.st_mode & 0o077:
        raise UnsafeRuntimeDirError(
            f"runtime directory {path} has mode {stat.S_IMODE(st.st_mode):04o}; others could "
            f"reach the socket: chmod 700 {path}, {hint}"
        )
    return path


def _make_private_dirs(path: str) -> None:
    """Create ``path`` and any missing parents, each 0700 whatever the umask."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue  # a concurrent creator won; the checks below still apply
        os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask


class ProjectPaths(Value):
    """The files one (app, project) pair uses inside the runtime directory."""

    runtime_dir: str
    base: str
    socket: str
    lock: str
    state: str
    events: str

    def private_socket(self, tag: str) -> str:
        """The name a new listener binds before it is renamed to :attr:`socket`."""
        return os.path.join(self.runtime_dir, f".{self.base}.{tag}")


def project_paths(
    runtime_dir: str, app: str, root: str, *, limit: int | None = None
) -> ProjectPaths:
    """Name the files of ``app`` for project ``root`` inside ``runtime_dir``.

    The regular name is ``<app>-<16 hex of the project key>``; when a
    socket path (the public one, or the private name a listener binds before
    renaming it into place) would exceed ``limit`` (default: this platform's
    ``sun_path``), a 16-character hash of app and project replaces it.
    """
    limit = sun_path_limit() if limit is None else limit
    safe = app_name(app)
    key = project_key(root)
    regular = f"{safe}-{key.hex()[:HASH_CHARS]}"
    short = "h" + sha256(safe.encode() + b"\0" + key).hexdigest()[: HASH_CHARS - 1]
    for base in (regular, short):
        socket = os.path.join(runtime_dir, base + ".sock")
        longest = max(len(os.fsencode(socket)), _private_len(runtime_dir, base))
        if longest <= limit:
            join = os.path.join
            return ProjectPaths(
                runtime_dir=runtime_dir,
                base=base,
                socket=socket,
                lock=join(runtime_dir, base + ".lock"),
                state=join(runtime_dir, base + ".state"),
                events=join(runtime_dir, base + ".events.jsonl"),
            )
    needed = _private_len(runtime_dir, short)
    raise SocketPathTooLongError(
        f"the socket path in runtime directory {runtime_dir} would be {needed} bytes; the kernel "
        f"allows {limit} (sun_path): set {RUNTIME_VAR} to a shorter directory, "
        f"e.g. /tmp/hl-{os.geteuid()}"
    )


PRIVATE_TAG_CHARS = 8


def _private_len(runtime_dir: str, base: str) -> int:
    return len(os.fsencode(os.path.join(runtime_dir, f".{base}.{'x' * PRIVATE_TAG_CHARS}")))
