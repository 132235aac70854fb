"""The app name ``highlander run -- CMD`` gives a command when ``--app`` does not.

The name is the command's identity: two different servers must never get
the same one (they would depose each other and hand one's state to the
other), and one server started by two clients must get the same one both
times.  So it comes from the whole command, not from its first word:

* known launchers and their options are skipped (``npx``, ``uvx``,
  ``docker run``, ``env VAR=…``: the table in docs/mcp.md), and the name is
  the package, image, module or script they run (``npx -y @scope/x@1.2``
  is ``x``);
* a script with a generic name (``index.js``, ``main.py``, ``server.py``) is
  named after its directory, skipping ``dist``, ``src`` and the like
  (``…/filesystem/dist/index.js`` is ``filesystem``);
* whenever the name alone might stand for another command (a generic
  script, code given inline with ``-c``/``-e``, a shell string, an option or
  a launcher form the table does not know, a name that had to be tidied), a
  short hash of the whole normalised command is appended:
  ``filesystem-1a2b3c4d``.

Pure: no I/O, and the same command always gets the same name.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

from highlander._commands.launchers import LAUNCHERS, Form, Operand, Special
from highlander._host.app_name import short_hash

#: Hex digits of the hash that tells ambiguous commands apart.
HASH_CHARS = 8
#: Script and directory names that say nothing about which server it is.
GENERIC = frozenset(
    {"index", "main", "__main__", "server", "app", "cli", "run", "start", "serve", "mod"}
    | {"mcp", "stdio", "entry", "bin", "dist", "build", "src", "lib", "out", "cmd"}
)
#: Directories skipped, besides the generic names, when naming a script by its place.
_PLACES = frozenset({"scripts", "node_modules", "site-packages", "..", "~"})
_PLACES |= frozenset({"usr", "local", "opt", "home", "srv", "tmp", "var"})
_PYTHON = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_UNTIDY = re.compile(r"[^A-Za-z0-9._-]")
_READABLE_MAX = 64
#: Shell strings and wrappers nest; deeper than this, the command is its hash.
_MAX_DEPTH = 8


#: Programs that are launchers only with a subcommand; any other use is an unknown form.
_SUBCOMMANDED = frozenset(words[0] for words in LAUNCHERS if len(words) > 1)


def command_app(argv: Sequence[str]) -> str:
    """The app name of ``argv`` (see the module docstring); never empty."""
    name, ambiguous = _read(list(argv), 0)
    readable = _UNTIDY.sub("_", name).lstrip(".")[:_READABLE_MAX]
    if readable != name or not readable:
        ambiguous = True
    if not ambiguous:
        return readable
    words = [os.path.basename(argv[0]) if argv else "", *argv[1:]]
    digest = short_hash("\0".join(words).encode("utf-8", "surrogatepass"), HASH_CHARS)
    return f"{readable or 'command'}-{digest}"


def _program(word: str) -> str:
    base = os.path.basename(word)
    return "python" if _PYTHON.fullmatch(base) else base


def _read(words: list[str], depth: int) -> tuple[str, bool]:
    """``(name, ambiguous)`` of the command ``words``."""
    if not words or depth > _MAX_DEPTH:
        return "", True
    key = [_program(words[0]), *words[1:3]]
    for size in (3, 2, 1):
        form = LAUNCHERS.get(tuple(key[:size])) if len(key) >= size else None
        if form is not None:
            return _operand(form, words[size:], key[0], depth)
    if key[0] in _SUBCOMMANDED:
        return key[0], True  # a launcher's form this table does not know
    return _script(words[0])


def _operand(form: Form, rest: list[str], program: str, depth: int) -> tuple[str, bool]:
    """Skip ``form``'s options in ``rest``, then name what its operand runs."""
    ambiguous, kind, index = False, form.operand, 0
    module_operand = False
    while index < len(rest):
        word = rest[index]
        if word == "--":
            index += 1
            break
        if form.assignments and _ASSIGNMENT.match(word):
            index += 1
            continue
        if not word.startswith("-") or (word == "-" and word not in form.flags):
            break
        index, found, unknown = _option(form, rest, index)
        ambiguous = ambiguous or unknown
        if found is None:
            continue
        special, value = found
        if special in _FINAL:
            return _final(special, value, program, depth, ambiguous)
        if special is Special.BIN:
            kind = Operand.COMMAND  # the package is given; the operand is the command it has
        module_operand = module_operand or special is Special.MODULE_FLAG
    if index >= len(rest):
        return program, True  # nothing to run named: the launcher alone says nothing
    if module_operand:
        return _module(rest[index], ambiguous)
    if kind is Operand.COMMAND:
        name, nested = _read(rest[index:], depth + 1)
        return name, ambiguous or nested
    name, unsure = _NAMERS[kind](rest[index])
    return name, ambiguous or unsure


#: Options whose value, not the operand, is what the command runs.
_FINAL = frozenset({Special.MODULE, Special.CODE, Special.SHELL})


def _final(
    special: Special, value: str, program: str, depth: int, ambiguous: bool
) -> tuple[str, bool]:
    """Name what ``-m mod``, ``-c code`` or a shell string runs."""
    if special is Special.MODULE:
        return _module(value, ambiguous)
    if special is Special.SHELL:  # a shell string can do anything: always hashed
        try:
            words = shlex.split(value)
        except ValueError:
            return program, True
        return _read(words, depth + 1)[0] or program, True
    return program, True  # inline code: nothing to name


def _option(
    form: Form, rest: list[str], index: int
) -> tuple[int, tuple[Special, str] | None, bool]:
    """Read the option at ``rest[index]``: ``(next index, (special, value) or None, unknown)``."""
    word = rest[index]
    following = rest[index + 1] if index + 1 < len(rest) else ""
    if word.startswith("--"):
        name, equals, inline = word.partition("=")
        options = [(name, inline if equals else None)]
    else:  # a cluster of short options: -it, -uB, -mpkg, -e=X
        options = []
        for at, letter in enumerate(word[1:], start=2):
            value = word[at:].removeprefix("=") or None
            options.append((f"-{letter}", value))
            if (
                f"-{letter}" in form.valued
                or f"-{letter}" in form.special
                or word[at : at + 1] == "="
            ):
                break
    unknown = False
    for name, value in options:
        takes_value = name in form.valued or (
            name in form.special and form.special[name] is not Special.MODULE_FLAG
        )
        if takes_value and value is None:
            given, index = following, index + 1
        else:
            given = value or ""
        if name in form.special:
            return index + 1, (form.special[name], given), unknown
        known = takes_value or name in form.flags or name.startswith(form.prefixes or ("\0",))
        unknown = unknown or not known
    return index + 1, None, unknown


def _module(module: str, ambiguous: bool) -> tuple[str, bool]:
    """``python -m pkg.mod``: the module, whole; a lone generic one says nothing."""
    return module, ambiguous or not module or module.lower() in GENERIC


def _package(spec: str) -> tuple[str, bool]:
    """``@scope/name@1.2``, ``name==1.2``, ``name[extra]`` -> ``name``; URLs and paths by place."""
    if spec.startswith((".", "/", "~")):
        return _script(spec)
    if ":" in spec:  # github:user/repo, git+https://…, file:…: where, not what
        name, _ = _script(spec.split(":", 1)[1].split("#", 1)[0].removesuffix(".git"))
        return name, True
    parts = spec.split("/")
    name = parts[1] if spec.startswith("@") and len(parts) > 1 else parts[0]
    name = re.split(r"[@=<>!~;\[ (]", name, maxsplit=1)[0]
    return name, not name


def _image(ref: str) -> tuple[str, bool]:
    """``ghcr.io/org/server:1.2@sha256:…`` -> ``server``."""
    name = ref.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return name, not name or name.lower() in GENERIC


def _specifier(operand: str) -> tuple[str, bool]:
    """A script path, a URL (its path counts) or an ``npm:``/``jsr:`` package."""
    if operand.startswith(("npm:", "jsr:")):
        return _package(operand[4:])
    if "://" in operand:
        path = operand.split("://", 1)[1].split("?", 1)[0]
        return _script("/".join(path.split("/")[1:]))
    return _script(operand)


def _script(path: str) -> tuple[str, bool]:
    """A script's stem; a generic one is named after its nearest telling directory."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    stem = os.path.splitext(parts[-1])[0] if parts else ""
    if stem and stem.lower() not in GENERIC:
        return stem, False
    for place in reversed(parts[:-1]):
        if place.lower() not in GENERIC and place not in _PLACES and not place.startswith("@"):
            return place, True
    return stem, True


_NAMERS = {Operand.PACKAGE: _package, Operand.IMAGE: _image, Operand.SCRIPT: _specifier}
