"""The ``highlander`` command line (the one module that writes to stdout).

Exit statuses: 0 success; 1 failure (the message says why); 2 usage error;
3 no holder (``status``, ``stop``); ``run`` returns the command's status.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from highlander import __version__

NO_HOLDER = 3


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``highlander`` command."""
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--project", help="project root (default: HIGHLANDER_PROJECT, cwd)")
    shared.add_argument("--app", help="app name (default: the only app found for the project)")
    shared.add_argument("--runtime-dir", help="runtime directory (default: as the library)")
    shared.add_argument("--json", action="store_true", help="print data as JSON")
    parser = argparse.ArgumentParser(
        prog="highlander",
        description="There can be only one: inspect and control Highlander holders.",
        epilog="Exit statuses: 0 ok, 1 failure, 2 usage, 3 no holder; run: the command's.",
    )
    parser.add_argument("--version", action="version", version=f"highlander {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("status", parents=[shared], help="who holds the project")
    sub.add_parser("stop", parents=[shared], help="ask the holder to save and leave")
    events = sub.add_parser("events", parents=[shared], help="the project's event log")
    events.add_argument("-n", type=int, default=20, help="how many recent events (default 20)")
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    sub.add_parser("doctor", parents=[shared], help="check this machine and configuration")
    sub.add_parser("token", parents=[shared], help="print a new token and IDE config snippets")
    run = sub.add_parser("run", parents=[shared], help="make any command a singleton")
    run.add_argument(
        "--on-save-signal", default="SIGTERM", help="signal asking the command to wind down"
    )
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit status."""
    args = build_parser().parse_args(argv)
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
        sys.stderr.write(f"highlander: {exc}\n")
        return 1
    except KeyboardInterrupt:
        return 130


def _app(args: argparse.Namespace) -> str:
    """The app named, or the only one that has files for this project."""
    if args.app:
        return str(args.app)
    from highlander._errors import ConfigurationError  # noqa: PLC0415
    from highlander._rendezvous import (  # noqa: PLC0415
        HASH_CHARS,
        choose_runtime_dir,
        project_key,
        project_root,
    )

    digest = project_key(project_root(args.project)).hex()[:HASH_CHARS]
    directory = choose_runtime_dir(args.runtime_dir)
    found = sorted(
        os.path.basename(path)[: -len(f"-{digest}.state")]
        for path in glob.glob(os.path.join(glob.escape(directory), f"*-{digest}.state"))
    )
    if len(found) == 1:
        return found[0]
    known = ", ".join(found) if found else "none"
    raise ConfigurationError(f"pass --app (apps with state for this project: {known})")


def _settings(args: argparse.Namespace) -> Any:
    from highlander._events import EventLog  # noqa: PLC0415
    from highlander._settings import Settings  # noqa: PLC0415

    settings = Settings.resolve(
        app=_app(args),
        project=args.project,
        mode=None,
        token=None,
        timeouts=None,
        runtime_dir=args.runtime_dir,
    )
    # The command reports what it finds itself; the holder logs what it was asked.
    settings.events = EventLog(None, app=settings.app, mode=settings.mode.value, quiet=True)
    return settings


def _print(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _status(args: argparse.Namespace) -> int:
    from highlander._control import query_status, uptime  # noqa: PLC0415
    from highlander._events import read_events  # noqa: PLC0415
    from highlander._waiting import BLOCKING, run_blocking  # noqa: PLC0415

    settings = _settings(args)
    found = run_blocking(query_status(settings, BLOCKING))
    record, reply = found.record, found.reply
    data: dict[str, Any] = {
        "held": found.held,
        "app": settings.app,
        "project": settings.root,
        "socket": found.socket,
        "answers": reply is not None,
        "problem": found.problem,
    }
    if found.held and record is not None:
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
    elif not found.held:
        sys.stdout.write(f"no holder for {settings.app} in {settings.root}\n")
    else:
        _print_status(data)
    return 0 if found.held else NO_HOLDER


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
    from highlander._messages import ProgressReport  # noqa: PLC0415
    from highlander._waiting import BLOCKING, run_blocking  # noqa: PLC0415

    settings = _settings(args)
    if not lock_is_held(settings.paths.lock):
        sys.stderr.write(f"highlander: no holder for {settings.app} in {settings.root}\n")
        return NO_HOLDER

    def show(step: ProgressReport) -> None:
        count = f" {step.done}/{step.total}" if step.total is not None else ""
        sys.stderr.write(f"saving #{step.counter}{count} {step.note}\n")
        sys.stderr.flush()

    pid, handoff = run_blocking(request_stop(settings, show, BLOCKING))
    if args.json:
        _print({"stopped": pid, "handoff": handoff})
    else:
        sys.stdout.write(f"stopped pid {pid}; handoff: {json.dumps(handoff)}\n")
    return 0


def _events(args: argparse.Namespace) -> int:
    from highlander._events import read_new_events, snapshot_events  # noqa: PLC0415

    settings = _settings(args)
    path = settings.paths.events
    history, offset = snapshot_events(path)
    for event in history[-args.n :] if args.n else history:
        sys.stdout.write((json.dumps(event) if args.json else _event_line(event)) + "\n")
    sys.stdout.flush()
    while args.follow:  # until interrupted, like tail -f
        time.sleep(0.25)
        new, offset = read_new_events(path, offset)
        for event in new:
            sys.stdout.write((json.dumps(event) if args.json else _event_line(event)) + "\n")
        sys.stdout.flush()
    return 0


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
    return 1 if any(finding.verdict == FAIL for finding in findings) else 0


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
        sys.stderr.write("highlander: run needs a command: highlander run -- CMD ARGS...\n")
        return 2
    name = args.on_save_signal.upper()
    try:
        signum = signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError:
        sys.stderr.write(f"highlander: unknown signal {args.on_save_signal!r}\n")
        return 2
    return run(
        cmd,
        save_signal=signum,
        app=args.app,
        project=args.project,
        runtime_dir=args.runtime_dir,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
