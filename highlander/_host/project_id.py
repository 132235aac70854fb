"""A project's identity across machines: one key on every host, wherever the checkout is.

The local backend names a project by its real path; a backend shared between
hosts (etcd, issue #15) needs a key two hosts agree on while their checkouts
live in different places.  :func:`derive`: the ``project_id=`` argument, else
``HIGHLANDER_PROJECT_ID`` (empty counts as unset, as clients pass a variable
empty to mean "not set"), else git's: the remote, normalised
(:func:`normalise_remote`), then ``//`` and the project's path inside the
repository (``github.com/Org/Repo//sub/dir``; at the top just
``github.com/Org/Repo``, the id a person would write).  A normalised remote
never contains ``//``, so the split is unambiguous.

Git is read from its files, never by running ``git`` (a process on the
claim's clock, and git may be absent): the repository's own ``config``,
through a ``gitdir:`` file and ``commondir`` for worktrees and submodules.
``include``, ``insteadOf`` and the global config are not read, so a remote
spelled through an alias keys as the alias: set ``HIGHLANDER_PROJECT_ID`` then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from highlander._core.errors import ProjectIdError
from highlander._core.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Literal

ENV_VAR = "HIGHLANDER_PROJECT_ID"
#: Longest id, in UTF-8 bytes: it is part of every etcd key of the project.
MAX_BYTES = 512
FIX = (
    "set HIGHLANDER_PROJECT_ID (the same on every host) or pass project_id=..., "
    "or run inside a git repository with an 'origin' remote"
)
#: The schemes git reaches another host with, and the port each implies.
DEFAULT_PORTS = {"ssh": 22, "git+ssh": 22, "ssh+git": 22, "git": 9418, "http": 80, "https": 443}
# Patterns, compiled at first use (``re`` keeps them): an explicit id, the etcd
# newcomer's usual case, needs none, and compiling six at import cost ~1 ms.
_SCHEME = r"([A-Za-z][A-Za-z0-9+.-]*)://"
_HELPER = r"[A-Za-z][A-Za-z0-9+.-]*::"
# git's own rule: scp-like when a colon comes before any slash.
_SCP = r"(?s)(?:[^@/]*@)?(\[[^\]/]*\]|[^:/\[\]]+):(.*)"
_SECTION = r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]'
_KEY = r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=(.*))?"
_USERINFO = r"(?s)^([A-Za-z][A-Za-z0-9+.-]*:/*)?.*@"
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b"}


class ProjectId(Value):
    """A project's key, the same on every host, and where it came from."""

    key: str
    source: Literal["argument", "environment", "git"]


def normalise_remote(url: str) -> str:
    """The one spelling of a git remote's repository: ``host[:port]/path``; pure.

    ``git@github.com:Org/Repo.git``, ``ssh://git@github.com/Org/Repo`` and
    ``https://user:token@github.com/Org/Repo.git/`` all give
    ``github.com/Org/Repo``: scheme, user and credentials (and any query) are
    dropped, so a secret never reaches a key or a message; the host is
    lower-cased; a port other than the scheme's default is kept (it may be
    another server); empty and ``.`` segments and a trailing ``.git`` go.
    The scp form has no port (``host:2222/r`` is the path ``2222/r``), and its
    path counts from the root as on hosting services.  The path's case is
    kept: GitHub ignores it but a self-hosted GitLab or a plain ssh server may
    not, and folding would merge two projects into one claim, where keeping
    it at worst asks hosts to spell the remote alike.

    Raises :class:`ProjectIdError` for a remote that names no other host: a
    local path or ``file://`` is a different repository on each host (or none).
    """
    text = url.strip()
    scheme = re.match(_SCHEME, text)
    if scheme:
        host, path = _url_parts(scheme.group(1).lower(), text)
    elif re.match(_HELPER, text):
        raise _refused(text, "goes through a git remote helper")
    elif scp := re.fullmatch(_SCP, text):
        host, path = scp.group(1).lower(), scp.group(2)
        if host in DEFAULT_PORTS or host == "file":  # "https:/user:token@...", a URL mistyped
            raise _refused(text, "is not a valid URL")
    else:
        raise _refused(text, _LOCAL)
    segments = [part for part in path.split("/") if part not in {"", "."}]
    if segments and segments[-1].endswith(".git"):
        segments[-1] = segments[-1][: -len(".git")]
        segments = [part for part in segments if part]
    if ".." in segments or not segments or not host:
        raise _refused(text, "has '..' in its path" if ".." in segments else "names no repository")
    return host + "/" + "/".join(segments)


def _url_parts(scheme: str, text: str) -> tuple[str, str]:
    from urllib.parse import urlsplit  # noqa: PLC0415 - only the git default needs it

    if scheme not in DEFAULT_PORTS:
        raise _refused(text, _LOCAL if scheme == "file" else f"has an unknown scheme {scheme!r}")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:  # a bad port, or unbalanced brackets around an IPv6 host
        raise _refused(text, "is not a valid URL") from None
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    if port is not None and port != DEFAULT_PORTS[scheme]:
        host += f":{port}"
    return host, parts.path


_LOCAL = "is a local path, which is another repository (or none) on every other host"


def _refused(text: str, problem: str) -> ProjectIdError:
    # Hide up to the last '@' before cutting the query: a password may hold '/', '?' or '#'.
    shown = re.sub(_USERINFO, r"\1***@", text).partition("?")[0].partition("#")[0]
    return ProjectIdError(f"the remote {shown!r} {problem}: {FIX}")


def check_id(value: str, source: str) -> str:
    """Return ``value`` if it can be a project id; else raise :class:`ProjectIdError`.

    An id is non-empty, printable (so no NUL, newline or control character),
    at most :data:`MAX_BYTES` bytes of UTF-8 and has no whitespace at either
    end (two hosts whose ids differ only there would never meet).
    """
    size = len(value.encode("utf-8", "surrogatepass"))
    if not value:
        problem = "is empty"
    elif size > MAX_BYTES:
        problem = f"is {size} bytes long (at most {MAX_BYTES})"
    elif not value.isprintable():
        problem = "has a character that is not printable"
    elif value.strip() != value:
        problem = "starts or ends with whitespace"
    else:
        return value
    fix = FIX if source == "git" else f"give {source} printable text, the same on every host"
    raise ProjectIdError(f"the project id from {source} ({value[:80]!r}) {problem}: {fix}")


def derive(
    project: str | os.PathLike[str], explicit: str | None, environ: Mapping[str, str]
) -> ProjectId:
    """The id of the project at ``project``: argument, then environment, then git.

    See the module docstring.  Raises :class:`ProjectIdError`, naming the fix,
    when the given id is invalid or none can be derived: no repository holds
    ``project``, it has no remote, several and none named ``origin``, or its
    remote is a local path.
    """
    if explicit is not None:
        return ProjectId(key=check_id(explicit, "project_id="), source="argument")
    if environ.get(ENV_VAR):
        return ProjectId(key=check_id(environ[ENV_VAR], ENV_VAR), source="environment")
    return ProjectId(key=check_id(_from_git(os.path.realpath(project)), "git"), source="git")


def _from_git(start: str) -> str:
    root = start
    while not os.path.lexists(os.path.join(root, ".git")):
        if os.path.dirname(root) == root:
            raise ProjectIdError(f"no git repository holds {start}: {FIX}")
        root = os.path.dirname(root)
    gitdir = os.path.join(root, ".git")
    if not os.path.isdir(gitdir):
        line = (_read(gitdir) or "").partition("\n")[0]
        if not line.startswith("gitdir:"):
            raise ProjectIdError(f"{gitdir} is neither a directory nor a 'gitdir:' file: {FIX}")
        gitdir = os.path.join(root, line[len("gitdir:") :].strip())
        if not os.path.isdir(gitdir):
            raise ProjectIdError(f"{root}/.git points at {gitdir}, which is not a directory: {FIX}")
    common = (_read(os.path.join(gitdir, "commondir")) or "").strip()
    remotes = _remotes(_read(os.path.join(gitdir, common, "config")) or "")
    names = ["origin"] if "origin" in remotes else sorted(remotes)
    if len(names) != 1:
        which = f"the remotes {', '.join(names)} and none is" if names else "no remote"
        raise ProjectIdError(f"the git repository at {root} has {which} named 'origin': {FIX}")
    try:
        remote = normalise_remote(remotes[names[0]])
    except ProjectIdError as exc:
        raise ProjectIdError(f"in the git repository at {root}, {exc}") from None
    inside = os.path.relpath(start, root)
    return remote if inside == "." else f"{remote}//{inside}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ProjectIdError(f"cannot read {path} ({exc.strerror}): {FIX}") from None


def _remotes(config: str) -> dict[str, str]:
    """Each remote's first ``url`` in a git config file (the one git fetches from)."""
    found: dict[str, str] = {}
    section = subsection = None
    lines = iter(config.splitlines())
    for first in lines:
        line = first
        while (len(line) - len(line.rstrip("\\"))) % 2:  # an unescaped '\' continues the value
            line = line[:-1] + next(lines, "")
        if head := re.match(_SECTION, line):
            section, subsection = head.group(1).lower(), head.group(2)
            if subsection is not None:
                subsection = re.sub(r"\\(.)", r"\1", subsection)
            elif "." in section:  # the old [remote.origin] spelling
                section, _, subsection = section.partition(".")
            line = line[head.end() :]
        entry = re.fullmatch(_KEY, line)
        if section != "remote" or subsection is None or not entry or not entry.group(2):
            continue
        if entry.group(1).lower() == "url" and (url := _value(entry.group(2))):
            found.setdefault(subsection, url)
    return found


def _value(raw: str) -> str:
    out: list[str] = []
    quoted = False
    chars = iter(raw)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            out.append(_ESCAPES.get(following, following))
        elif char == '"':
            quoted = not quoted
        elif char in "#;" and not quoted:
            break
        else:
            out.append(char)
    # git keeps quoted blanks at the ends, but no URL has any: normalise_remote strips them.
    return "".join(out).strip()
