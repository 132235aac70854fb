"""``highlander doctor``: check this machine and configuration, each finding with its fix."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from highlander._core.errors import ConfigurationError, HighlanderError, SocketPathTooLongError
from highlander._host.files import problem, unsafe
from highlander._host.modes import MODE_VAR, resolve_mode
from highlander._host.rendezvous import (
    NAMES_KEY,
    RUNTIME_VAR,
    DirFault,
    choose_runtime_dir,
    default_runtime_dir,
    dir_fault,
    project_paths,
    project_root,
    project_source,
    read_names_key,
    settled_fallback,
    sun_path_limit,
)
from highlander._host.token import MIN_TOKEN_CHARS, SECRET_FILE, TOKEN_VAR

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of the report: a verdict, what was checked, and the fix if needed."""

    verdict: str
    check: str
    detail: str
    fix: str = ""


def diagnose(
    *, app: str, project: str | None, runtime_dir: str | None, env: Mapping[str, str]
) -> list[Finding]:
    """Run every check; never raises for what it checks."""
    findings: list[Finding] = []
    directory = choose_runtime_dir(runtime_dir, env=env)
    findings.append(_runtime_dir(directory, env))
    findings.extend(_runtime_files(directory))
    root, found = _project(project, env)
    findings.append(found)
    if root is not None:
        findings.append(_socket_path(directory, app, root))
    findings.append(_proc())
    findings.append(_pidfd())
    findings.append(_token(env, directory))
    try:
        mode = resolve_mode(None, env)
        source = MODE_VAR if env.get(MODE_VAR) else "default"
        findings.append(Finding(OK, "mode", f"{mode.value} (from {source})"))
    except HighlanderError as exc:
        findings.append(Finding(FAIL, "mode", str(exc), f"fix {MODE_VAR}"))
    return findings


#: How to fix a project root that is not a directory, by where it came from.
_PROJECT_FIXES = {
    "project=": "pass the project's top-level directory: --project DIR (project= in code)",
    "the working directory": "cd into the project's top-level directory, or pass --project DIR",
}


def _project(project: str | None, env: Mapping[str, str]) -> tuple[str | None, Finding]:
    """The project root, and the finding about it (``None``: no usable project)."""
    given, source = project_source(project, env=env)
    try:
        root = project_root(project, env=env)
    except ConfigurationError:
        fix = _PROJECT_FIXES.get(
            source, f"set {source} to the project's top-level directory, or unset it"
        )
        return None, Finding(FAIL, "project", f"{given} (from {source}) is not a directory", fix)
    return root, Finding(OK, "project", f"{root} (from {source})")


def _socket_path(directory: str, app: str, root: str) -> Finding:
    try:
        # The socket's name comes from the directory's key, made at the first start (not
        # here: doctor creates nothing); before that, a stand-in of the same length.
        secret = (read_names_key(directory) if _private(directory) else None) or bytes(32)
        paths = project_paths(directory, app, root, secret=secret)
    except SocketPathTooLongError as exc:
        return Finding(FAIL, "socket path", str(exc), f"set {RUNTIME_VAR} to a shorter path")
    except HighlanderError as exc:  # an unusable names key: its message is the fix
        return Finding(FAIL, "socket path", f"cannot be named ({type(exc).__name__})", str(exc))
    size = len(os.fsencode(paths.socket))
    return Finding(OK, "socket path", f"{paths.socket} ({size} of {sun_path_limit()} bytes)")


def _runtime_dir(path: str, env: Mapping[str, str]) -> Finding:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return Finding(OK, "runtime dir", f"{path} (created on first use, mode 0700)")
    special = _default_place(path, st, env)
    if special is not None:
        return special
    fault, mode = dir_fault(st, os.geteuid()), stat.S_IMODE(st.st_mode)
    if fault is DirFault.OPEN:
        return Finding(FAIL, "runtime dir", f"{path} has mode {mode:04o}", f"chmod 700 {path}")
    if fault is not None:
        what = {
            DirFault.SYMLINK: "is a symlink",
            DirFault.NOT_DIRECTORY: "is not a directory",
        }.get(fault, f"is owned by uid {st.st_uid}")
        fix = f"rm -r {path} (it is recreated) or set {RUNTIME_VAR} to a private directory"
        return Finding(FAIL, "runtime dir", f"{path} {what}", fix)
    return Finding(OK, "runtime dir", f"{path} (mode {mode:04o}, yours)")


def _private(path: str) -> bool:
    """Whether ``path`` is a directory of ours that only we can use (doctor may write there)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return dir_fault(st, os.geteuid()) is None


def _default_place(path: str, st: os.stat_result, env: Mapping[str, str]) -> Finding | None:
    """The squatted default (not a dead end) or the fallback in use; ``None`` otherwise."""
    uid = os.geteuid()
    default = default_runtime_dir(uid)
    fault = dir_fault(st, uid)
    if path == default and fault is not None and fault.squatted:
        return Finding(
            WARN,
            "runtime dir",
            f"{path} is not yours to use (another user's, a symlink or not a directory); "
            "the next start falls back, for good, to a private "
            f"{default}-<random> recorded in ~/.cache/highlander/runtime-dir",
            f"nothing to do; or set {RUNTIME_VAR}",
        )
    if path != default and path == settled_fallback(uid, env):
        what = f"the fallback: {default} was squatted (recorded in ~/.cache/highlander/runtime-dir)"
        return Finding(OK, "runtime dir", f"{path} ({what})")
    return None


#: What each name in the runtime directory must be (by suffix); others are not ours.
_EXPECTED = (
    (".sock", "a socket"),
    (".lock", "a regular file"),
    (".state", "a regular file"),
    (".events.jsonl", "a regular file"),
    (".events.jsonl.1", "a regular file"),
    (".tmp", "a regular file"),
)


def _expected_kind(name: str) -> str | None:
    if name in (SECRET_FILE, NAMES_KEY):
        return "a regular file"
    if name.startswith("."):  # a listener's private name before its rename
        return "a socket"
    return next((kind for suffix, kind in _EXPECTED if name.endswith(suffix)), None)


def _runtime_files(directory: str) -> list[Finding]:
    """One finding per file in the runtime directory that Highlander could not use."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []  # absent, or not a directory: the runtime dir check says so
    findings: list[Finding] = []
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.endswith(".key") and entry.name != NAMES_KEY:
            findings.append(_leftover_key(entry.path))
            continue
        want = _expected_kind(entry.name)
        if want is None:
            continue
        try:
            why = problem(entry.stat(follow_symlinks=False), want=want)
        except OSError:
            continue  # removed meanwhile
        if why is not None:
            fix = str(unsafe(entry.path, why))
            findings.append(Finding(FAIL, "runtime file", f"{entry.path}: {why}", fix))
    if not findings:
        findings.append(Finding(OK, "runtime files", f"every file in {directory} is as expected"))
    return findings


def _leftover_key(path: str) -> Finding:
    # Highlander before the key cache was retired kept each project's derived key
    # there; nothing reads it now, and a derived key is better not left lying about.
    detail = f"{path}: a project's derived key, left by an earlier Highlander; nothing reads it"
    return Finding(WARN, "runtime file", detail, f"rm -f {path}")


def _proc() -> Finding:
    if os.path.isdir("/proc/self") and os.path.exists("/proc/self/stat"):
        return Finding(OK, "/proc", "process identity is read from /proc")
    return Finding(WARN, "/proc", "no /proc: identity comes from psutil", "")


def _pidfd() -> Finding:
    try:
        fd = os.pidfd_open(os.getpid())
    except (AttributeError, OSError) as exc:
        return Finding(
            FAIL,
            "pidfd",
            f"pidfd_open is unavailable ({exc}): hung holders cannot be ended safely",
            "Linux >= 5.3 and Python >= 3.9 are needed for the verified kill",
        )
    os.close(fd)
    return Finding(OK, "pidfd", "pidfd_open works: signals go only to verified processes")


def _token(env: Mapping[str, str], directory: str) -> Finding:
    value = env.get(TOKEN_VAR, "").strip()
    if value and len(value) < MIN_TOKEN_CHARS:
        return Finding(
            WARN,
            "token",
            f"{TOKEN_VAR} is only {len(value)} characters",
            "generate one with `highlander token`",
        )
    if value:
        return Finding(OK, "token", f"from {TOKEN_VAR} ({len(value)} characters)")
    return Finding(
        WARN,
        "token",
        f"{TOKEN_VAR} is not set: the per-user secret file {os.path.join(directory, SECRET_FILE)} "
        "keys the HMAC (other users are kept out; your own processes are not)",
        "set HIGHLANDER_TOKEN in every client's MCP config (`highlander token` prints one)",
    )


def python_ok() -> Finding:
    """Report the interpreter (informational)."""
    return Finding(OK, "python", sys.version.split()[0])
