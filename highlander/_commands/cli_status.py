"""``highlander status``: who holds the project, and does it answer (exit 0, 3 or 4)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from highlander._commands.cli_common import (
    NO_HOLDER,
    NOT_ANSWERING,
    OK,
    event_line,
    look_at,
    print_json,
    root_of,
)


def status(args: argparse.Namespace) -> int:
    """Run ``highlander status``: 0 a holder answers, 3 none, 4 held but not answering."""
    from highlander._commands.inspect import NoApp  # noqa: PLC0415
    from highlander._host.event_log import read_events  # noqa: PLC0415
    from highlander._host.waiting import BLOCKING, run_blocking  # noqa: PLC0415
    from highlander._shell.control import query_status, uptime  # noqa: PLC0415

    try:
        settings = look_at(args)
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
        print_json(data)
    else:
        _print_status(data)
    return OK if reply is not None else NOT_ANSWERING


def _no_holder(args: argparse.Namespace, settings: Any, problem: str | None) -> int:
    """``status`` with nobody holding the project (exit 3)."""
    from highlander._host.event_log import read_events  # noqa: PLC0415

    app = settings.app if settings is not None else None
    where = settings.root if settings is not None else root_of(args)
    if args.json:
        print_json(
            {
                "held": False,
                "app": app,
                "project": where,
                "socket": None,
                "answers": False,
                "problem": problem,
                "last_events": read_events(settings.paths.events, 5) if settings else [],
            }
        )
    else:
        sys.stdout.write(f"no holder for {app or 'any app'} in {where}\n")
    return NO_HOLDER


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
    out += [f"  {event_line(event)}" for event in data["last_events"]]
    sys.stdout.write("\n".join(out) + "\n")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
