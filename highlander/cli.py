"""The ``highlander`` command line (the one module that writes to stdout).

Exit statuses (docs/guide.md has the table per command): 0 success (for
``status``: a holder answers); 1 failure (the message says why); 2 usage
error; 3 no holder (``status``, ``stop``); 4 a holder holds the project but
did not answer a signed STATUS (``status``); ``run`` returns the command's,
or 0 once its reign ended through Highlander (docs/mcp.md has its table).

With ``--json`` every call prints exactly one JSON document on stdout,
errors included (``{"error": ..., "exit": N}``); only ``events --follow``
streams, one JSON object per line.  ``status``, ``events`` and ``doctor``
only look: they create nothing and log nothing (:mod:`highlander._inspect`).
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

OK, FAILURE, USAGE, NO_HOLDER, NOT_ANSWERING = 0, 1, 2, 3, 4


class _Parser(argparse.ArgumentParser):
    """argparse, plus a JSON error document on stdout when ``--json`` was asked for."""

    #: Set by :func:`main` before parsing (subcommand parsers share it).
    json_wanted = False

    def error(self, message: str) -> NoReturn:
        """Report a usage error (also as JSON with ``--json``) and exit with status 2."""
        if _Parser.json_wanted:
            _print({"error": message, "exit": USAGE, "usage": self.format_usage().strip()})
        super().error(message)


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


def _wind_down(text: str) -> float:
    """``run --wind-down``: seconds, more than 0 and at most the longest allowed."""
    from highlander._errors import ConfigurationError  # noqa: PLC0415
    from highlander._run import check_wind_down  # noqa: PLC0415

    try:
        return check_wind_down(float(text))
    except ValueError as exc:
        if isinstance(exc, ConfigurationError):
            raise argparse.ArgumentTypeError(str(exc)) from None
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``highlander`` command."""
    shared = _Parser(add_help=False)
    shared.add_argument("--project", help="project root (default: HIGHLANDER_PROJECT, cwd)")
    shared.add_argument("--app", help="app name (default: the only app found for the project)")
    shared.add_argument("--runtime-dir", help="runtime directory (default: as the library)")
    shared.add_argument("--json", action="store_true", help="print data as JSON")
    parser = _Parser(
        prog="highlander",
        description="There can be only one: inspect and control Highlander holders.",
        epilog="Exit statuses: 0 ok, 1 failure, 2 usage, 3 no holder, 4 holder not answering "
        "(status); run: the command's (0 once deposed). With --json, one JSON document on "
        "stdout, errors too.",
    )
    parser.add_argument("--version", action="version", version=f"highlander {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("status", parents=[shared], help="who holds the project")
    sub.add_parser("stop", parents=[shared], help="ask the holder to save and leave")
    events = sub.add_parser("events", parents=[shared], help="the project's event log")
    events.add_argument(
        "-n", type=_count, default=20, help="how many recent events (default 20; 0: all of them)"
    )
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sub.add_parser("doctor", parents=[shared], help="check this machine and configuration")
    sub.add_parser("token", parents=[shared], help="print a new token and IDE config snippets")
    run = sub.add_parser("run", parents=[shared], help="make any command a singleton")
    run.add_argument(
        "--on-save-signal", default="SIGTERM", help="signal asking the command to wind down"
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
        "status": _status,
        "stop": _stop,
        "events": _events,
        "doctor": _doctor,
        "token": _token,
        "run": _run,
    }[args.command]
    from highlander._errors import HighlanderError  # noqa: PLC0415

    try:
        return int(handler(args))
    except HighlanderError as exc:
        return _fail(args, str(exc))
    except KeyboardInterrupt:
        return 130


def _fail(args: argparse.Namespace, message: str, status: int = FAILURE, **data: Any) -> int:
    """Say what went wrong: one line on stderr, and with ``--json`` one document on stdout."""
    sys.stderr.write(f"highlander: {message}\n")
    if getattr(args, "json", False):
        _print({"error": message, "exit": status, **data})
    return status


def _app(args: argparse.Namespace) -> str:
    """The app named, or the only one that has files for this project (else NoApp/error)."""
    if args.app:
        return str(args.app)
    from highlander._inspect import only_app  # noqa: PLC0415

    return only_app(args.project, args.runtime_dir, os.environ)


def _settings(args: argparse.Namespace) -> Any:
    """Settings to look at (or stop) the holder: creates nothing, logs nothing."""
    from highlander._inspect import look  # noqa: PLC0415

    return look(app=_app(args), project=args.project, runtime_dir=args.runtime_dir)


def _print(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _status(args: argparse.Namespace) -> int:
    from highlander._control import query_status, uptime  # noqa: PLC0415
    from highlander._events import read_events  # noqa: PLC0415
    from highlander._inspect import NoApp  # noqa: PLC0415
    from highlander._waiting import BLOCKING, run_blocking  # noqa: PLC0415

    try:
        settings = _settings(args)
    except NoApp as exc:  # nothing ever ran for this project here: no holder
        return _no_holder(args, None, str(exc))
    found = run_blocking(query_status(settings, BLOCKING))
    if not found.held:
        return _no_holder(args, settings, None)
    record, reply = found.record, found.reply
    data: dict[str, Any] = {
        "held": found.held,
        "app": settings.app,
        "project": settings.root,
        "socket": found.socket,
        "answers": reply is not None,
        "problem": found.problem,
    }
    if record is not None:
        data.update(
            pid=record.pid,
            exe=record.exe,
            uptime_s=round(uptime(record) or 0.0, 1),
            generation=reply.generation if reply else record.generation,
            mode=reply.mode if reply else record.mode,
            busy=reply.busy if reply else None,
        )
    data["last_events"] = read_events(settings.paths.events, 5)
    if args.json:
        _print(data)
    else:
        _print_status(data)
    return OK if reply is not None else NOT_ANSWERING


def _no_holder(args: argparse.Namespace, settings: Any, problem: str | None) -> int:
    """``status`` with nobody holding the project (exit 3)."""
    from highlander._events import read_events  # noqa: PLC0415

    app = settings.app if settings is not None else None
    if args.json:
        _print(
            {
                "held": False,
                "app": app,
                "project": settings.root if settings is not None else _root(args),
                "socket": None,
                "answers": False,
                "problem": problem,
                "last_events": read_events(settings.paths.events, 5) if settings else [],
            }
        )
    else:
        where = settings.root if settings is not None else _root(args)
        sys.stdout.write(f"no holder for {app or 'any app'} in {where}\n")
    return NO_HOLDER


def _root(args: argparse.Namespace) -> str:
    from highlander._rendezvous import project_root  # noqa: PLC0415

    return project_root(args.project)


def _print_status(data: dict[str, Any]) -> None:
    rows = [
        ("holder", f"pid {data.get('pid', '?')} ({data.get('exe', '?')})"),
        ("app", data["app"]),
        ("project", data["project"]),
        ("uptime", _duration(data.get("uptime_s"))),
        ("generation", data.get("generation", "?")),
        ("mode", data.get("mode", "?")),
        ("socket", data["socket"]),
        ("answers", "yes (signed STATUS)" if data["answers"] else f"no: {data['problem']}"),
    ]
    out = [f"{name:<11} {value}" for name, value in rows]
    out.append("last events")
    out += [f"  {_event_line(event)}" for event in data["last_events"]]
    sys.stdout.write("\n".join(out) + "\n")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _event_line(event: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(event.get("ts", 0))))
    skip = {"ts", "event", "app", "mode"}
    rest = " ".join(f"{k}={v}" for k, v in event.items() if k not in skip and v is not None)
    return f"{when} {event.get('event', '?'):<15} {rest}"


def _stop(args: argparse.Namespace) -> int:
    from highlander._control import lock_is_held, request_stop  # noqa: PLC0415
    from highlander._inspect import NoApp  # noqa: PLC0415
    from highlander._messages import ProgressReport  # noqa: PLC0415
    from highlander._waiting import BLOCKING, run_blocking  # noqa: PLC0415

    try:
        settings = _settings(args)
    except NoApp as exc:
        return _fail(args, f"no holder: {exc}", NO_HOLDER, held=False)
    if not lock_is_held(settings.paths.lock):
        message = f"no holder for {settings.app} in {settings.root}"
        return _fail(args, message, NO_HOLDER, held=False)

    def show(step: ProgressReport) -> None:
        count = f" {step.done}/{step.total}" if step.total is not None else ""
        sys.stderr.write(f"saving #{step.counter}{count} {step.note}\n")
        sys.stderr.flush()

    pid, handoff = run_blocking(request_stop(settings, show, BLOCKING))
    if args.json:
        _print({"stopped": pid, "handoff": handoff})
    else:
        sys.stdout.write(f"stopped pid {pid}; handoff: {json.dumps(handoff)}\n")
    return OK


def _events(args: argparse.Namespace) -> int:
    from highlander._events import read_new_events, snapshot_events  # noqa: PLC0415

    settings = _settings(args)
    path = settings.paths.events
    history, offset = snapshot_events(path)
    shown = history[-args.n :] if args.n else history
    if args.json and not args.follow:
        _print(shown)  # one document: the list
        return OK
    for event in shown:
        sys.stdout.write((json.dumps(event) if args.json else _event_line(event)) + "\n")
    sys.stdout.flush()
    while args.follow:  # until interrupted, like tail -f; with --json, one object per line
        time.sleep(0.25)
        new, offset = read_new_events(path, offset)
        for event in new:
            sys.stdout.write((json.dumps(event) if args.json else _event_line(event)) + "\n")
        sys.stdout.flush()
    return OK


def _doctor(args: argparse.Namespace) -> int:
    from highlander._doctor import FAIL, diagnose, python_ok  # noqa: PLC0415

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
        _print([asdict(finding) for finding in findings])
    else:
        for finding in findings:
            line = f"{finding.verdict:<4} {finding.check:<12} {finding.detail}"
            if finding.fix:
                line += f"\n     fix: {finding.fix}"
            sys.stdout.write(line + "\n")
    return FAILURE if any(finding.verdict == FAIL for finding in findings) else OK


def _token(args: argparse.Namespace) -> int:
    from highlander._snippets import snippets  # noqa: PLC0415

    token = secrets.token_urlsafe(32)
    found = snippets(token, args.app or "my-server")
    if args.json:
        _print({"token": token, "snippets": found})
        return 0
    sys.stdout.write(f"{token}\n\n")
    for client, text in found.items():
        sys.stdout.write(f"# {client}\n{text}\n\n")
    return 0


def _run(args: argparse.Namespace) -> int:
    from highlander._run import run  # noqa: PLC0415

    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        return _fail(args, "run needs a command: highlander run -- CMD ARGS...", USAGE)
    name = args.on_save_signal.upper()
    try:
        signum = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError:
        return _fail(args, f"unknown signal {args.on_save_signal!r}", USAGE)
    return run(
        cmd,
        save_signal=signum,
        app=args.app,
        project=args.project,
        runtime_dir=args.runtime_dir,
        wind_down=args.wind_down,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
