"""What the command line's subcommands share: exit statuses, output, and what they look at.

The command line (:mod:`highlander.cli` and the ``_cli_*`` modules) is the
only code in Highlander that writes to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

OK, FAILURE, USAGE, NO_HOLDER, NOT_ANSWERING = 0, 1, 2, 3, 4


def print_json(data: Any) -> None:
    """Write ``data`` to stdout as one JSON document."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def fail(args: argparse.Namespace, message: str, status: int = FAILURE, **data: Any) -> int:
    """Say what went wrong: one line on stderr, and with ``--json`` one document on stdout."""
    sys.stderr.write(f"highlander: {message}\n")
    if getattr(args, "json", False):
        print_json({"error": message, "exit": status, **data})
    return status


def app_of(args: argparse.Namespace) -> str:
    """The app named, or the only one that has files for this project (else NoApp/error)."""
    if args.app:
        return str(args.app)
    from highlander._commands.inspect import only_app  # noqa: PLC0415

    return only_app(args.project, args.runtime_dir, os.environ)


def look_at(args: argparse.Namespace) -> Any:
    """Settings to look at (or stop) the holder: creates nothing, logs nothing."""
    from highlander._commands.inspect import look  # noqa: PLC0415

    return look(app=app_of(args), project=args.project, runtime_dir=args.runtime_dir)


def root_of(args: argparse.Namespace) -> str:
    """The project root the command is about."""
    from highlander._host.rendezvous import project_root  # noqa: PLC0415

    return project_root(args.project)


def event_line(event: dict[str, Any]) -> str:
    """One event of the log as a line for a human: local time, kind, the other fields."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.get("ts", 0))))
    skip = {"ts", "event", "app", "mode"}
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in skip and v is not None)
    return f"{when} {event.get('event', '?'):<15} {rest}"
