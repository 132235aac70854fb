"""``highlander stop``: ask the holder to save and leave; ``--force``: the verified kill.

A plain ``stop`` talks to the holder (SAVE with intent STOP) and shows its
progress on stderr.  Every way it can fail names what to do next; when the
holder cannot be asked (a hung ``on_save``, a stopped process, no socket),
that is ``stop --force``: the process the holder's record names is ended
without a save (SIGTERM, SIGKILL after ``term_grace``), and only if the
kernel confirms it is the holder (:func:`highlander._shell.control.force_stop`).
The kill is recorded in the project's event log (``terminated``/``killed``,
or ``identity_mismatch`` for a process that was not signalled).
"""

from __future__ import annotations

import argparse
import json
import sys

from highlander._commands.cli_common import NO_HOLDER, OK, fail, look_at, print_json

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._core.messages import ProgressReport


def stop(args: argparse.Namespace) -> int:
    """Run ``highlander stop [--force]``; return the exit status."""
    from highlander._commands.inspect import NoApp  # noqa: PLC0415
    from highlander._host.event_log import EventLog  # noqa: PLC0415
    from highlander._host.waiting import BLOCKING, run_blocking  # noqa: PLC0415
    from highlander._shell.control import force_stop, lock_is_held, request_stop  # noqa: PLC0415

    try:
        settings = look_at(args)
    except NoApp as exc:
        return fail(args, f"no holder: {exc}", NO_HOLDER, held=False)
    if not lock_is_held(settings.paths.lock):
        message = f"no holder for {settings.app} in {settings.root}"
        return fail(args, message, NO_HOLDER, held=False)
    handoff = None
    if args.force:
        # A kill is an act on the project: it goes into its event log, even though
        # looking (status) leaves none.  The runtime directory exists: a lock is held.
        path, mode = settings.paths.events, settings.mode.value
        settings.events = EventLog(path, app=settings.app, mode=mode, quiet=True)
        pid = run_blocking(force_stop(settings, BLOCKING))
    else:
        pid, handoff = run_blocking(request_stop(settings, show_progress, BLOCKING))
    if args.json:
        print_json({"stopped": pid, "handoff": handoff, "forced": args.force})
    elif args.force:
        sys.stdout.write(f"ended pid {pid} without a save (stop --force)\n")
    else:
        sys.stdout.write(f"stopped pid {pid}; handoff: {json.dumps(handoff)}\n")
    return OK


def show_progress(step: ProgressReport) -> None:
    """One line on stderr per PROGRESS frame of the holder's save."""
    count = f" {step.done}/{step.total}" if step.total is not None else ""
    sys.stderr.write(f"saving #{step.counter}{count} {step.note}\n")
    sys.stderr.flush()
