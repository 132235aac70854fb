"""Faults of the etcd backend that ``child.py`` installs in itself when its configuration asks.

Each delays one step of our own code, the way a loaded host or a member slow
to answer would, while the session's lease stays renewed (the keeper runs on
the session's own loop thread): nothing of etcd or the kernel is replaced.

* ``after_move`` ``{"delay": s}``: as an incumbent, learn ``s`` late that its
  move applied (``moved`` reports when etcd answered, ``at``: its wall clock);
* ``before_move`` ``{"delay": s}``: as an incumbent, say ``moving`` after a
  timely ACK and move ``s`` later (what etcd becomes meanwhile is the test's);
  ``{"stop": true}``: say ``before_move`` (``at``: its monotonic clock, in ns)
  and stop itself with a real SIGSTOP there, so the chaos harness can make
  etcd full before the move (``etcd_full_at_move``) and resume it; ``"once":
  true``: only in its first handover;
* ``slow_begin`` ``{"delay": s}``: as a successor, begin ``s`` after it learned
  that the move applied (its requests to etcd slow; seed 27 of
  ``make chaos-etcd``, docs/reliability.md).
"""

from __future__ import annotations

import importlib
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any


def install(cfg: dict[str, Any], report: Callable[..., None]) -> None:
    """Install what ``cfg`` asks for (nothing unless the backend is etcd)."""
    if not os.environ.get("HIGHLANDER_BACKEND", "").startswith("etcd"):
        return
    if cfg.get("after_move"):
        _slow_after_move(float(cfg["after_move"]["delay"]), report)
    how = cfg.get("before_move")
    if how and how.get("stop"):
        _stop_before_move(bool(how.get("once")), report)
    elif how:
        _slow_before_move(float(how["delay"]), report)
    if cfg.get("slow_begin"):
        _slow_begin(float(cfg["slow_begin"]["delay"]), report)


def _slow_after_move(delay: float, report: Callable[..., None]) -> None:
    module = importlib.import_module("highlander._shell.etcd_serving")
    moves = module.incumbent_moves

    async def slow_moves(client: Any, *args: Any, **kwargs: Any) -> Any:
        then = await moves(client, *args, **kwargs)
        report(event="moved", then=str(then), at=time.time())
        # On the session's own loop (not anyio's): its sleep.
        await client.runtime.sleep(delay)
        return then

    module.incumbent_moves = slow_moves


def _slow_before_move(delay: float, report: Callable[..., None]) -> None:
    module = importlib.import_module("highlander._shell.etcd_serving")
    moves = module.incumbent_moves

    async def late_moves(client: Any, *args: Any, **kwargs: Any) -> Any:
        report(event="moving")
        await client.runtime.sleep(delay)  # the session's own loop: the keeper renews meanwhile
        then = await moves(client, *args, **kwargs)
        report(event="moved", then=str(then))
        return then

    module.incumbent_moves = late_moves


def stop_here() -> None:
    """Stop this process with a real SIGSTOP before this thread's next instruction.

    Sent to this thread: kill(getpid()) goes to the main thread, and another
    thread ran on until that one was scheduled (a chaos incumbent sent its
    move, which the stop was to hold back; tests/chaos/test_self_stop.py).
    Also ``child.py``'s ``before_ack`` and ``stop_after_event`` stops.
    """
    signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)


def _stop_before_move(once: bool, report: Callable[..., None]) -> None:
    module = importlib.import_module("highlander._shell.etcd_serving")
    moves = module.incumbent_moves
    used: list[bool] = []

    async def stopped_moves(client: Any, *args: Any, **kwargs: Any) -> Any:
        if not (once and used):
            used.append(True)
            report(event="before_move", at=time.monotonic_ns())
            stop_here()
        return await moves(client, *args, **kwargs)

    module.incumbent_moves = stopped_moves


def _slow_begin(delay: float, report: Callable[..., None]) -> None:
    module = importlib.import_module("highlander._shell.etcd_takeover")
    hold = module._hold

    def slow_hold(backend: Any, *args: Any, **kwargs: Any) -> Any:
        report(event="move_seen")
        time.sleep(delay)  # this thread only: the session's thread renews the lease meanwhile
        return hold(backend, *args, **kwargs)

    module._hold = slow_hold
