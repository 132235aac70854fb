"""Where a project's instances meet: project root, runtime directory, file names.

Path logic is pure and takes the environment as an argument; the only
function that creates anything is :func:`ensure_runtime_dir` (and the names
key, :mod:`highlander._host.names_key`); :func:`verify_runtime_dir` only looks.

* Project root: explicit argument, ``HIGHLANDER_PROJECT``,
  ``CLAUDE_PROJECT_DIR``, then the working directory; always ``realpath``-ed,
  so two spellings of one directory meet.
* Runtime directory: ``runtime_dir=``, ``HIGHLANDER_RUNTIME_DIR``, else one
  place per user that never depends on the session: ``/tmp/highlander-<uid>``.
  ``/run/user/<uid>`` is not used: it appears and vanishes with login
  sessions (and is emptied at logout), so two starts on either side of a
  login would meet in different places.  ``XDG_RUNTIME_DIR`` and ``TMPDIR``
  are deliberately ignored: clients pass only an allow-list of variables,
  so they differ between clients.
* A squatted default (another user created ``/tmp/highlander-<uid>`` first,
  or a symlink stands there) is not a dead end: the user falls back, once
  and for good, to ``/tmp/highlander-<uid>-<12 random hex>``, a name nobody
  else can guess, recorded in ``~/.cache/highlander/runtime-dir`` so every
  later start of that user goes there too (:func:`fall_back`).
* Names: ``<stem>-<hash>`` plus ``.lock``, ``.state``, ``.events.jsonl``,
  where the stem is the app's name or, for a name that is not a short plain
  file name, a readable prefix and a hash of the exact name
  (:func:`app_stem`): apps are never merged.  The socket is named by a keyed
  hash; a shorter name when a socket path would not fit ``sun_path``.
"""

from __future__ import annotations

import enum
import os
import re
import stat
import sys
from collections.abc import Mapping

from highlander._core.errors import (
    ConfigurationError,
    SocketPathTooLongError,
    UnsafeRuntimeDirError,
)
from highlander._core.sha import sha256_digest
from highlander._core.values import Value
from highlander._host.app_name import HASH_CHARS, app_stem, short_hash

# Re-exported: the names key used to live here.
from highlander._host.names_key import NAMES_KEY as NAMES_KEY  # noqa: PLC0414
from highlander._host.names_key import names_key as names_key  # noqa: PLC0414
from highlander._host.names_key import read_names_key as read_names_key  # noqa: PLC0414

#: Usable bytes of ``sockaddr_un.sun_path`` (its size minus the terminating NUL).
SUN_PATH_MAX = {"linux": 107, "darwin": 103}
PROJECT_VARS = ("HIGHLANDER_PROJECT", "CLAUDE_PROJECT_DIR")
RUNTIME_VAR = "HIGHLANDER_RUNTIME_DIR"


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
    return _existing_dir(*project_source(explicit, env=env, cwd=cwd))


def project_source(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> tuple[str, str]:
    """Where the project root comes from: ``(path as given, source)``, nothing checked.

    ``source`` is ``"project="``, the environment variable's name, or
    ``"the working directory"``.
    """
    env = os.environ if env is None else env
    candidates: list[tuple[str, str | os.PathLike[str] | None]] = [("project=", explicit)]
    candidates += [(name, env.get(name) or None) for name in PROJECT_VARS]
    for source, value in candidates:
        if value is not None and os.fspath(value) != "":
            return os.fspath(value), source
    return (cwd if cwd is not None else _working_directory()), "the working directory"


def _working_directory() -> str:
    try:
        return os.getcwd()
    except FileNotFoundError:  # deleted under us: still the project asked for
        return os.environ.get("PWD", ".")


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
    return sha256_digest(os.fsencode(root))


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
    return settled_fallback(uid, env) or default_runtime_dir(uid)


def default_runtime_dir(uid: int) -> str:
    """The place a user's instances meet unless told otherwise (and unless squatted)."""
    return f"/tmp/highlander-{uid}"  # noqa: S108 - per-uid, created 0700 and verified


def home_dir(uid: int, env: Mapping[str, str]) -> str | None:
    """``uid``'s home: ``HOME`` (every client passes it on), else the password database's."""
    if env.get("HOME"):
        return env["HOME"]
    import pwd  # noqa: PLC0415 - a built-in module, needed only here

    try:
        return pwd.getpwuid(uid).pw_dir or None
    except KeyError:
        return None


def _marker(uid: int, env: Mapping[str, str]) -> str | None:
    home = home_dir(uid, env)
    return os.path.join(home, ".cache", "highlander", "runtime-dir") if home else None


def settled_fallback(uid: int, env: Mapping[str, str]) -> str | None:
    """The fallback this user settled on after finding the default squatted, if any."""
    marker = _marker(uid, env)
    if marker is None:
        return None
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        text = os.read(fd, 256).decode(errors="replace").strip()
    finally:
        os.close(fd)
    prefix = default_runtime_dir(uid) + "-"
    suffix = text[len(prefix) :]
    return text if text.startswith(prefix) and _SUFFIX.fullmatch(suffix) else None


#: The unguessable part of a fallback's name.
_SUFFIX = re.compile(r"[0-9a-f]{12}")


def fall_back(uid: int, env: Mapping[str, str], squatted: UnsafeRuntimeDirError) -> str:
    """Settle, for good, on a fallback another user cannot guess; return it (created, safe).

    Raises ``squatted`` (with the fix) when there is no home to record the
    choice in: without the record, the next start could not find it again.
    """
    marker = _marker(uid, env)
    if marker is None:
        raise squatted
    try:
        _make_private_dirs(os.path.dirname(marker))
        tmp = f"{marker}.{os.urandom(6).hex()}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{default_runtime_dir(uid)}-{os.urandom(6).hex()}\n")
        try:
            os.link(tmp, marker)  # the first writer wins; a concurrent one reads its choice
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise UnsafeRuntimeDirError(
            f"{squatted} (no fallback either: {marker}: {exc.strerror})"
        ) from exc
    chosen = settled_fallback(uid, env)
    if chosen is None:
        raise UnsafeRuntimeDirError(f"{squatted} (no fallback either: {marker} is not usable)")
    return ensure_runtime_dir(chosen)


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
    return verify_runtime_dir(path)


class DirFault(enum.Enum):
    """What makes a runtime directory unsafe to meet in (:func:`dir_fault`)."""

    SYMLINK = "symlink"  # someone else may have planted it
    NOT_DIRECTORY = "not_directory"
    FOREIGN = "foreign"  # owned by another uid: another user may control it
    OPEN = "open"  # group or other permission bits: others could reach the socket

    @property
    def squatted(self) -> bool:
        """Whether someone else may control the path (not merely too open): not ours to fix."""
        return self is not DirFault.OPEN


def dir_fault(st: os.stat_result, uid: int) -> DirFault | None:
    """The one rule for a runtime directory (``st``: its lstat), for the claim and for doctor."""
    if stat.S_ISLNK(st.st_mode):
        return DirFault.SYMLINK
    if not stat.S_ISDIR(st.st_mode):
        return DirFault.NOT_DIRECTORY
    if st.st_uid != uid:
        return DirFault.FOREIGN
    return DirFault.OPEN if st.st_mode & 0o077 else None


def verify_runtime_dir(path: str) -> str:
    """Check an existing ``path`` as :func:`ensure_runtime_dir` does, creating nothing."""
    st = os.lstat(path)
    uid = os.geteuid()
    fault = dir_fault(st, uid)
    if fault is None:
        return path
    hint = f"or set {RUNTIME_VAR} to a private directory"
    message = {
        DirFault.SYMLINK: f"runtime directory {path} is a symlink, which someone else may have "
        f"planted: remove it (rm {path}) so Highlander can create a real one, {hint}",
        DirFault.NOT_DIRECTORY: f"runtime directory {path} is not a directory: remove it, {hint}",
        DirFault.FOREIGN: f"runtime directory {path} is owned by uid {st.st_uid}, not by you "
        f"(uid {uid}): another user may control it; remove it as its owner, {hint}",
        DirFault.OPEN: f"runtime directory {path} has mode {stat.S_IMODE(st.st_mode):04o}; "
        f"others could reach the socket: chmod 700 {path}, {hint}",
    }[fault]
    raise UnsafeRuntimeDirError(message, squatted=fault.squatted)


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
    #: The socket's name without ``.sock`` (also the stem of its private names).
    socket_stem: str

    def private_socket(self, tag: str) -> str:
        """The name a new listener binds before it is renamed to :attr:`socket`."""
        return os.path.join(self.runtime_dir, f".{self.socket_stem}.{tag}")


def project_paths(
    runtime_dir: str,
    app: str,
    root: str,
    *,
    limit: int | None = None,
    secret: bytes | None = None,
) -> ProjectPaths:
    """Name the files of ``app`` for project ``root`` inside ``runtime_dir``.

    The regular name is ``<app>-<16 hex of the project key>``; when a
    socket path (the public one, or the private name a listener binds before
    renaming it into place) would exceed ``limit`` (default: this platform's
    ``sun_path``), a 16-character hash of app and project replaces it.

    With ``secret`` (the runtime directory's :func:`names_key`), the socket
    is named by a keyed hash instead: every user can list bound socket paths
    (``ss -xl``, ``/proc/net/unix``), and they must not tell another user
    which app runs for which project.  The other files stay readable by name:
    only the owner can list the directory.
    """
    limit = sun_path_limit() if limit is None else limit
    # The hashes take the exact name: for a plain name (its own stem) they
    # are what earlier versions computed from the name they had reduced.
    name = app.encode()
    key = project_key(root)
    regular = f"{app_stem(app)}-{key.hex()[:HASH_CHARS]}"
    short = "h" + short_hash(name + b"\0" + key, HASH_CHARS - 1)
    opaque = None
    if secret is not None:
        opaque = "s" + short_hash(
            b"highlander-socket\0" + secret + b"\0" + name + b"\0" + key, HASH_CHARS - 1
        )
    for base in (regular, short):
        stem = opaque or base
        socket = os.path.join(runtime_dir, stem + ".sock")
        longest = max(len(os.fsencode(socket)), _private_len(runtime_dir, stem))
        if longest <= limit:
            join = os.path.join
            return ProjectPaths(
                runtime_dir=runtime_dir,
                base=base,
                socket=socket,
                lock=join(runtime_dir, base + ".lock"),
                state=join(runtime_dir, base + ".state"),
                events=join(runtime_dir, base + ".events.jsonl"),
                socket_stem=stem,
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
