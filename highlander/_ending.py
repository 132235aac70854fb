"""How a reign ends: what ``check_current()`` says afterwards, and the default ``on_deposed``."""

from __future__ import annotations

import contextlib
import os
import sys

from highlander._host.bounds import report_all_suppressed
from highlander._host.event_log import Outcome
from highlander._host.log import flush

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from highlander._host.waiting import Runtime

_HELD = "another process holds it now"
#: What ``check_current()`` says while the reign's commit to a successor is in flight.
COMMITTING = (
    "its successor may hold from any moment now (if the commit does not apply, "
    "this process holds again and is_holder says so)"
)
#: What ``check_current()`` says once a reign ended other than by a successor.
_ENDINGS = {
    Outcome.STOPPED: "it was stopped (`highlander stop`)",
    Outcome.ORPHANED: "the client that started this process is gone",
    Outcome.STEPPED_DOWN: "this process could not serve it any more and stepped down",
    Outcome.LOST_RENDEZVOUS: "its lock file or runtime directory was deleted or replaced",
    Outcome.LEASE_LOST: "its etcd lease could not be renewed in time (or it was fenced out)",
}


def ending(outcome: Outcome | None) -> str:
    """How a reign that ended as ``outcome`` (``None``: released or deposed) ended, in words."""
    return _ENDINGS.get(outcome, _HELD) if outcome is not None else _HELD


async def run_deposed_hook(runtime: Runtime, hook: Callable[[], Any] | None) -> None:
    """Run the application's ``on_deposed`` (by :mod:`highlander._shell.hooks`), or leave."""
    from highlander._shell.hooks import call_hook  # noqa: PLC0415 - off the claim path

    if hook is None:
        leave_process()
    else:
        await call_hook(runtime, hook)


def leave_process() -> None:
    """The default ``on_deposed``: the state is saved and handed over; leave now.

    ``os._exit`` because a thread blocked reading stdin (the usual stdio
    server) would otherwise keep the process alive.
    """
    report_all_suppressed()  # os._exit skips atexit: say what the rate limit held back
    flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)
