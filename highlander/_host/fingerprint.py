"""What a server is, for share mode: its build and its configuration fingerprint (docs/mcp.md).

Two servers may serve each other's clients only if they would behave the
same: the same command line, the same working directory and the same
environment, less the variables that only describe the terminal or the
client's session (:data:`IGNORED`, :data:`IGNORED_PREFIXES`) and
Highlander's own.  Anything else differing (a credential in the client's
MCP config ``env``, a flag, another checkout) gives another fingerprint, so
the newcomer does not attach: a client's calls never run with another
client's configuration.

The build is the server's version (``build=``, else ``HIGHLANDER_BUILD``);
without one, the size and modification time of the program's main file
stand for it, so an edited server counts as an upgrade.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

from highlander._core.errors import ConfigurationError
from highlander._core.sharing import Build, ShareMode

#: Variables that say where a terminal or a client session is, not what the server does.
IGNORED = frozenset({
    "_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "TERM", "COLORTERM", "WINDOWID",
    "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "TMUX", "TMUX_PANE", "STY", "GPG_TTY",
    "DBUS_SESSION_BUS_ADDRESS", "XDG_VTNR", "XDG_SEAT", "SECURITYSESSIONID", "WT_SESSION",
    "WT_PROFILE_ID", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT",
    "GIT_ASKPASS", "MallocNanoZone", "__CF_USER_TEXT_ENCODING",
})  # fmt: skip
#: Prefixes of the same kind (and Highlander's own, which do not change the server).
IGNORED_PREFIXES = (
    "HIGHLANDER_", "SSH_", "TERM_", "XDG_SESSION_", "VSCODE_", "ITERM_", "KITTY_",
    "KONSOLE_", "GNOME_TERMINAL_", "ALACRITTY_", "WEZTERM_", "LC_TERMINAL",
)  # fmt: skip

SHARE_VAR = "HIGHLANDER_SHARE"
BUILD_VAR = "HIGHLANDER_BUILD"


def relevant(env: Mapping[str, str]) -> dict[str, str]:
    """The environment that can change what a server does (see the module docstring)."""
    return {
        name: value
        for name, value in env.items()
        if name not in IGNORED and not name.startswith(IGNORED_PREFIXES)
    }


def fingerprint(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> str:
    """A digest of the command line, the working directory and :func:`relevant` env."""
    import hashlib  # noqa: PLC0415 - share mode only, off the free claim's path

    from highlander._core.canonical import canonical_json  # noqa: PLC0415

    config = {"argv": list(argv), "cwd": cwd, "env": relevant(env)}
    return hashlib.sha256(canonical_json(config)).hexdigest()[:32]


def command_line() -> list[str]:
    """This process's command line as started: the interpreter's real path, then its arguments."""
    argv = list(getattr(sys, "orig_argv", sys.argv))
    return [os.path.realpath(sys.executable), *argv[1:]]


def default_build() -> str:
    """The main file's size and modification time (``file:...``), or ``""`` if none."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ""
    return f"file:{st.st_size}:{st.st_mtime_ns}"


def share_mode(given: ShareMode | str | bool | None, env: Mapping[str, str]) -> ShareMode:
    """``share=`` (``True`` is ``on``), else ``HIGHLANDER_SHARE``, else ``off``."""
    if isinstance(given, bool):
        return ShareMode.ON if given else ShareMode.OFF
    spelled = (given if given is not None else env.get(SHARE_VAR, "")).strip().lower() or "off"
    try:
        return ShareMode(spelled)
    except ValueError:
        raise ConfigurationError(
            f"share mode {spelled!r} is not one of off, on, only: set share= or "
            f"{SHARE_VAR} to one of them (docs/mcp.md)"
        ) from None


def this_build(given: str | None, env: Mapping[str, str]) -> Build:
    """This server's :class:`Build`: ``build=``, else ``HIGHLANDER_BUILD``, else the main file."""
    version = given if given is not None else env.get(BUILD_VAR) or default_build()
    return Build(version[:128], fingerprint(command_line(), os.getcwd(), env))
