"""The ``highlander`` command line (it and the ``_cli_*`` modules alone write to stdout).

Exit statuses (docs/guide.md has the table per command): 0 success (for
``status``: a holder answers); 1 failure (the message says why and what to
do); 2 usage error; 3 no holder (``status``, ``stop``); 4 a holder holds
the project but did not answer a signed STATUS (``status``); ``run``
returns the command's, or 0 once its reign ended through Highlander
(docs/mcp.md has its table).

With ``--json`` every call prints exactly one JSON document on stdout,
errors included (``{"error": ..., "exit": N}``); only ``events --follow``
streams, one JSON object per line.  ``status``, ``events`` and ``doctor``
only look: they create nothing and log nothing (:mod:`highlander._commands.inspect`).
Every option a subcommand accepts changes what it does; an option that
would mean nothing there (``token --project``, ``run --json``) is a usage
error that says why.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, NoReturn

from highlander import __version__
from highlander._commands.cli_common import (
    FAILURE,
    OK,
    USAGE,
    event_line,
    fail,
    look_at,
    print_json,
)
from highlander._commands.cli_status import status
from highlander._commands.cli_stop import stop

PROJECT_HELP = (
    "the project's top-level directory (default: $HIGHLANDER_PROJECT, else "
    "$CLAUDE_PROJECT_DIR, else the working directory)"
)
RUNTIME_HELP = "where holders meet (default: $HIGHLANDER_RUNTIME_DIR, else /tmp/highlander-<uid>)"
JSON_HELP = "print one JSON document on stdout (errors too)"
LOOKUP_APP_HELP = "the app (default: the only app with state for the project)"


class _Parser(argparse.ArgumentParser):
    """argparse, plus a JSON error document on stdout when ``--json`` was asked for."""

    #: Set by :func:`main` before parsing (subcommand parsers share it).
    json_wanted = False

    def error(self, message: str) -> NoReturn:
        """Report a usage error (also as JSON with ``--json``) and exit with status 2."""
        if _Parser.json_wanted:
            print_json({"error": message, "exit": USAGE, "usage": self.format_usage().strip()})
        super().error(message)


class _Rejected(argparse.Action):
    """An option this subcommand does not take: a usage error saying why and what to do."""

    def __init__(self, option_strings: Sequence[str], dest: str, why: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.why = why

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        """Refuse the option (exit status 2)."""
        parser.error(f"{option_string}: {self.why}")


def _count(text: str) -> int:
    """``events -n``: a count of 0 or more (0: every event)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{value} is negative: give 0 or more (0 prints every event)"
        )
    return value


def _where(
    parser: argparse.ArgumentParser,
    app_help: str,
    *,
    json_option: bool = True,
    backend: bool = False,
) -> None:
    """The options that say which holder a subcommand is about (and ``--json``)."""
    parser.add_argument("--project", help=PROJECT_HELP)
    parser.add_argument("--app", help=app_help)
    parser.add_argument("--runtime-dir", help=RUNTIME_HELP)
    if backend:
        parser.add_argument(
            "--backend",
            help="where holders meet: local, or etcd://h1:2379,... (default "
            "HIGHLANDER_BACKEND, else local); on etcd, status reads the holder key and "
            "stop asks over etcd",
        )
    if json_option:
        parser.add_argument("--json", action="store_true", help=JSON_HELP)


def _wind_down(text: str) -> float:
    """``run --wind-down``: seconds, more than 0 and at most the longest allowed."""
    from highlander._commands.run import check_wind_down  # noqa: PLC0415
    from highlander._core.errors import ConfigurationError  # noqa: PLC0415

    try:
        return check_wind_down(float(text))
    except ValueError as exc:
        if isinstance(exc, ConfigurationError):
            raise argparse.ArgumentTypeError(str(exc)) from None
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``highlander`` command."""
    parser = _Parser(
        prog="highlander",
        description="There can be only one: inspect and control Highlander holders.",
        epilog="Exit statuses: 0 ok, 1 failure, 2 usage, 3 no holder, 4 holder not answering "
        "(status); run: the command's (0 once deposed). With --json, one JSON document on "
        "stdout, errors too.",
    )
    parser.add_argument("--version", action="version", version=f"highlander {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description)

    _where(
        command(
            "status",
            "who holds the project",
            "Show who holds the project (pid, uptime, generation, mode) and whether it "
            "answers a signed STATUS. Creates and logs nothing. Exit 0: a holder answers; "
            "3: nobody holds the project; 4: a holder that does not answer.",
        ),
        LOOKUP_APP_HELP,
        backend=True,
    )
    stopping = command(
        "stop",
        "ask the holder to save and leave",
        "Ask the holder to save and leave; its handoff is printed. When it cannot be asked "
        "(a hung on_save, a stopped process, no socket), --force ends it without a save. "
        "Exit 0: stopped; 1: failed (the message says what to do); 3: no holder.",
    )
    _where(stopping, LOOKUP_APP_HELP, backend=True)
    stopping.add_argument(
        "--force",
        action="store_true",
        help="end the holder without a save: SIGTERM, then SIGKILL, and only once the "
        "kernel confirms it is the process its record names (pid, start time, "
        "executable, uid, holding the lock)",
    )
    events = command(
        "events",
        "the project's event log",
        "Print the project's event log, oldest first: every decision its holders and "
        "newcomers took (claims, successions, refusals, kills). Creates and logs nothing.",
    )
    _where(events, LOOKUP_APP_HELP)
    events.add_argument(
        "-n", type=_count, default=20, help="how many recent events (default 20; 0: all of them)"
    )
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    _where(
        command(
            "doctor",
            "check this machine and configuration",
            "Check this machine and configuration (runtime directory and its files, project, "
            "socket path, /proc, pidfd, token, mode); every problem comes with its fix. "
            "Creates and logs nothing. Exit 1 if a check failed.",
        ),
        "the app whose socket path to check (default: app)",
    )
    token = command(
        "token",
        "print a new token and IDE config snippets",
        "Print a new random HIGHLANDER_TOKEN and MCP config snippets for Claude Desktop, "
        "Claude Code, VS Code and Cursor. A token is not tied to a project: give the same "
        "one to every client that starts the server.",
    )
    token.add_argument("--app", help="the server's name in the snippets (default: my-server)")
    token.add_argument("--json", action="store_true", help=JSON_HELP)
    unbound = "a token is not tied to a project or a runtime directory: drop it"
    for option in ("--project", "--runtime-dir"):
        token.add_argument(option, action=_Rejected, why=unbound, nargs="?")
    run = command(
        "run",
        "make any command a singleton",
        "Run CMD as the project's one instance: a newcomer asks the running CMD to wind "
        "down (--on-save-signal) and takes over once it exited. CMD's stdin, stdout and "
        "stderr pass untouched; the exit status is CMD's (128+N if signal N ended it).",
    )
    _where(
        run,
        "the app (default: named after the package or script CMD runs, so "
        "`npx -y @scope/server-files` is server-files and `python3 srv.py` is srv, "
        "with a short hash added when that name is ambiguous)",
        json_option=False,
    )
    run.add_argument(
        "--json",
        action=_Rejected,
        nargs=0,
        why="stdout is CMD's own (an MCP server's JSON-RPC stream) and run prints nothing "
        "on it: drop --json (`highlander status --json` reports on the holder)",
    )
    run.add_argument(
        "--on-save-signal",
        default="SIGTERM",
        help="the signal that asks CMD to wind down when a newcomer takes over (default: SIGTERM)",
    )
    run.add_argument(
        "--wind-down",
        type=_wind_down,
        default=None,
        metavar="SECONDS",
        help="how long the command's tree has to exit before it is killed (default 30)",
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    words = list(sys.argv[1:] if argv is None else argv)
    _Parser.json_wanted = "--json" in (words[: words.index("--")] if "--" in words else words)
    args = build_parser().parse_args(words)
    handler = {
        "status": status,
        "stop": stop,
        "events": _events,
        "doctor": _doctor,
        "token": _token,
        "run": _run,
    }[args.command]
    from highlander._core.errors import HighlanderError  # noqa: PLC0415

    try:
        on_etcd = _etcd_backend(args)
        if on_etcd is not None:
            return _on_etcd(args, on_etcd)
        return int(handler(args))
    except HighlanderError as exc:
        return fail(args, str(exc))
    except KeyboardInterrupt:
        return 130


def _events(args: argparse.Namespace) -> int:
    from highlander._host.event_log import read_new_events, snapshot_events  # noqa: PLC0415

    settings = look_at(args)
    path = settings.paths.events
    history, offset = snapshot_events(path)
    shown = history[-args.n :] if args.n else history
    if args.json and not args.follow:
        print_json(shown)  # one document: the list
        return OK
    for event in shown:
        sys.stdout.write((json.dumps(event) if args.json else event_line(event)) + "\n")
    sys.stdout.flush()
    while args.follow:  # until interrupted, like tail -f; with --json, one object per line
        time.sleep(0.25)
        new, offset = read_new_events(path, offset)
        for event in new:
            sys.stdout.write((json.dumps(event) if args.json else event_line(event)) + "\n")
        sys.stdout.flush()
    return OK


def _doctor(args: argparse.Namespace) -> int:
    from highlander._commands.doctor import FAIL, diagnose, python_ok  # noqa: PLC0415

    findings = [
        python_ok(),
        *diagnose(
            app=args.app or "app",
            project=args.project,
            runtime_dir=args.runtime_dir,
            env=os.environ,
        ),
    ]
    if args.json:
        print_json([asdict(finding) for finding in findings])
    else:
        for finding in findings:
            line = f"{finding.verdict:<4} {finding.check:<12} {finding.detail}"
            if finding.fix:
                line += f"\n     fix: {finding.fix}"
            sys.stdout.write(line + "\n")
    return FAILURE if any(finding.verdict == FAIL for finding in findings) else OK


def _token(args: argparse.Namespace) -> int:
    from highlander._commands.snippets import NOTES, snippets  # noqa: PLC0415

    token = secrets.token_urlsafe(32)
    found = snippets(token, args.app or "my-server")
    if args.json:
        print_json({"token": token, "snippets": found})
        return OK
    sys.stdout.write(f"{token}\n\n")
    sys.stdout.write("".join(f"{note}\n" for note in NOTES) + "\n")
    for client, text in found.items():
        sys.stdout.write(f"# {client}\n{text}\n\n")
    return OK


def _run(args: argparse.Namespace) -> int:
    from highlander._commands.run import run  # noqa: PLC0415

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return fail(args, "run needs a command: highlander run -- CMD ARGS...", USAGE)
    name = args.on_save_signal.upper()
    try:
        signum = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError:
        return fail(args, f"unknown signal {args.on_save_signal!r}: name one, like SIGTERM", USAGE)
    return run(
        cmd,
        save_signal=signum,
        app=args.app,
        project=args.project,
        runtime_dir=args.runtime_dir,
        wind_down=args.wind_down,
    )


def _etcd_backend(args: argparse.Namespace) -> str | None:
    """The etcd cluster a holder-facing command is about, if any (``--backend``, env)."""
    if args.command not in ("status", "stop"):
        return None  # events are each host's own log; the rest is about this machine
    # Resolved first: a value that names no backend fails before anything is looked at.
    from highlander._host.backend_choice import choose_backend  # noqa: PLC0415

    return choose_backend(args.backend, os.environ)


def _on_etcd(args: argparse.Namespace, backend: str) -> int:
    from highlander._commands.cli_etcd import etcd_status, etcd_stop  # noqa: PLC0415

    return (etcd_stop if args.command == "stop" else etcd_status)(args, backend)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
