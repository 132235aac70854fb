"""The must-be-zero counters of issue #10, and how each newcomer ended.

* **Healthy holders signalled**: every ``terminated``/``killed`` event whose
  target (by pid and start time) was, in the ``hello + stall`` seconds
  before it, never stopped (by the harness or by itself), was not
  configured to hang (``save`` stall or forever, ``hang_when_deposed``) and
  was not a newcomer that had stopped itself before its ACK.  Such a target
  answered and advanced: "hung" was the load, or a deaf serving loop.
* **Wedged projects**: a newcomer that waited longer than
  :data:`WEDGE_BOUND` from its spawn to its verdict (``ready``, its exit,
  or the harness's SIGKILL), not counting the time it was itself stopped,
  or that is still waiting, not stopped, when the run ends.
* **Concurrent saves**: two saves of one holder pid whose ``start`` ..
  ``end`` lines (the save witness, CLOCK_MONOTONIC) overlap.  A save whose
  process died mid-save ends at the harness's exit stamp of that process.
* **A newcomer failed on SAVED's descriptors** (counted among the invalid
  messages): a SAVED read after the incumbent's ACK deadline carries a lock
  copy that holds nothing; the newcomer must ask again, not fail.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from scripts.chaos.log import SaveLine
from scripts.chaos.process import INF, Proc, Who, to_monotonic
from scripts.chaos.schedule import TIMEOUTS

#: How far back a stop excuses a signal: a holder is called hung after missing
#: ``hello`` (it did not answer) or ``stall`` (its save did not advance).
WINDOW_NS = (TIMEOUTS["hello"] + TIMEOUTS["stall"]) * 1e9
#: How late the harness may hear ``before_ack`` after the child stopped itself.
HEARD_LATE_NS = 2e9
#: The longest a newcomer may wait for its verdict (seconds).  With the chaos
#: timeouts one handover is bounded by hello + ceiling + request + exit_grace +
#: term_grace (0.5 + 2 + 2 + 0.5 + 0.3 = 5.3 s), and ending a hung holder by
#: hello + stall + term_grace (1.4 s); the settling phase must converge within
#: CONVERGENCE_BOUND (20 s) of the last disturbance.  A newcomer may wait out
#: several handovers in a row (a storm queues 64 of them, ~0.3 s each on two
#: cores), so the bound is 3 x CONVERGENCE_BOUND = 60 s: ten worst-case
#: handovers plus a storm, still far below "forever" (a wedged project leaves
#: newcomers waiting until the end of the run).
WEDGE_BOUND = 60.0
#: A child's configuration, in the few words that say what it was asked to do.
_CFG_KEYS = ("save", "steps", "step_delay", "before_ack", "nofile", "hang_when_deposed")


def _at(ns: float, t0: int) -> str:
    return "never" if ns == INF else f"{(ns - t0) / 1e9:.3f} s"


def _cfg(proc: Proc) -> str:
    cfg = proc.cfg or {}
    return ", ".join(f"{key}={cfg[key]}" for key in _CFG_KEYS if key in cfg) or "no config"


def healthy_signals(
    who: Who, events: list[dict[str, Any]], clock: list[tuple[float, int]]
) -> tuple[list[str], Counter[str]]:
    """Signals to a healthy child, each with its evidence; and why the others were fair."""
    t0 = clock[0][1]
    listed: list[str] = []
    fair: Counter[str] = Counter()
    hung: dict[tuple[int, int], dict[str, Any]] = {}
    #: (incumbent, newcomer) -> when the incumbent began that newcomer's save.
    asked: dict[tuple[int, int], float] = {}
    for e in events:
        if e["event"] == "hung":
            hung[(e["pid"], e.get("peer_pid", -1))] = e
        if e["event"] == "save_requested":
            asked[(e["pid"], e.get("peer_pid", -1))] = to_monotonic(e["ts"], clock)
        if e["event"] not in ("terminated", "killed"):
            continue
        target = who.identity(e.get("peer_pid", -1), e.get("start_time"))
        if target is None or target.role != "child":
            continue  # counted among the wrong signals
        at = to_monotonic(e["ts"], clock)
        if target.stopped_during(at - WINDOW_NS, at):
            fair["stopped"] += 1
        elif target.hangs:
            fair["configured to hang"] += 1
        elif target.self_stop_ns is not None and target.self_stop_ns <= at + HEARD_LATE_NS:
            fair["stopped itself before its ACK"] += 1
        elif _past_ceiling(hung, asked, e["pid"], target.pid, at):
            fair["its save ran past the absolute ceiling"] += 1
        else:
            why = hung.get((e["pid"], target.pid), {}).get("phase", "? (no hung event)")
            sent = "; ".join(f"{n} at {_at(b, t0)}" for n, b, _ in target.signals) or "none"
            ready = _at(target.ready_ns if target.ready_ns is not None else INF, t0)
            listed.append(
                f"{e.get('signal')} from pid {e['pid']} to pid {target.pid} at {_at(at, t0)} "
                f"(hung phase {why}); target started at step {target.step} ({_cfg(target)}), "
                f"ready heard {ready}, harness signals: {sent}, "
                f"exit {_at(target.exit_ns or INF, t0)} status {target.returncode}"
            )
    return listed, fair


def _past_ceiling(
    hung: dict[tuple[int, int], dict[str, Any]],
    asked: dict[tuple[int, int], float],
    killer: int,
    target: int,
    at: float,
) -> bool:
    """A kill for ``ceiling`` once the save had run that long: fair by design.

    Guarantee 6: a save is never killed *before* the absolute ceiling,
    however loaded the machine (a starved saver is spared at ``stall``, not
    at ``ceiling``).  The save must really have begun ``ceiling`` before.
    """
    if hung.get((killer, target), {}).get("phase") != "ceiling":
        return False
    began = asked.get((target, killer))
    return began is not None and at - began >= TIMEOUTS["ceiling"] * 1e9


def wedged(
    procs: list[Proc], end_ns: int | None, t0: int, bound: float = WEDGE_BOUND
) -> tuple[list[str], float, str]:
    """Newcomers that waited longer than ``bound`` seconds for a verdict; and the longest
    wait, with whom.  ``bound``: :data:`WEDGE_BOUND` on one machine (the etcd run
    derives its own the same way, scripts/chaos/etcd_check.py)."""
    listed: list[str] = []
    longest, who = 0.0, ""
    end = float(end_ns) if end_ns is not None else INF
    for p in procs:
        if p.role != "child":
            continue
        verdict: float
        if p.ready_ns is not None:
            verdict, how = p.ready_ns, "ready"
        elif p.exit_ns is not None and p.exit_ns < end:
            verdict, how = p.exit_ns, f"exit status {p.returncode}"
        else:
            verdict, how = end, "still waiting at the end of the run"
        if p.kill_began_ns is not None and p.kill_began_ns < verdict:
            verdict, how = p.kill_began_ns, "SIGKILLed by the harness"
        if verdict == INF:
            continue
        waited = (verdict - p.spawn_ns - p.stopped_ns(p.spawn_ns, verdict)) / 1e9
        if waited > longest:
            longest, who = waited, f"pid {p.pid}, step {p.step}, {how}"
        still = how.startswith("still") and not p.stopped_at(verdict)
        if waited > bound or still:
            listed.append(
                f"pid {p.pid} (step {p.step}, {_cfg(p)}) spawned at {_at(p.spawn_ns, t0)} "
                f"waited {waited:.1f} s (not counting its own stops) until {_at(verdict, t0)}: "
                f"{how}; last said: {p.last_error()[:160]!r}"
            )
    return listed, longest, who


def concurrent_saves(who: Who, saves: list[SaveLine], t0: int) -> list[str]:
    """Saves of one holder pid that overlap in time."""
    listed: list[str] = []
    running: dict[int, list[tuple[int, float]]] = {}  # pid -> [(start ns, latest end ns)]
    for line in sorted(saves, key=lambda s: s.ns):
        mine = [(start, limit) for start, limit in running.get(line.pid, []) if limit > line.ns]
        if line.what == "end":
            running[line.pid] = mine[1:]
            continue
        proc = who.at_ns(line.pid, line.ns)
        for start, limit in mine:
            step = f"step {proc.step}" if proc is not None else "not a process of this run"
            listed.append(
                f"pid {line.pid} ({step}): a save started at {_at(line.ns, t0)} while the one "
                f"started at {_at(start, t0)} was running (its process ended {_at(limit, t0)})"
            )
        exit_ns = proc.exit_ns if proc is not None and proc.exit_ns is not None else INF
        running[line.pid] = [*mine, (line.ns, exit_ns)]
    return listed


def newcomers(procs: list[Proc]) -> tuple[Counter[str], list[str]]:
    """How each child ended (held, refused and why, killed, ...); and the tracebacks."""
    verdicts: Counter[str] = Counter()
    crashes: list[str] = []
    for p in procs:
        if p.role != "child":
            continue
        crash = p.exception()
        if crash:
            crashes.append(f"pid {p.pid} (step {p.step}): {crash}")
        if p.ready is not None:
            verdicts["held the project"] += 1
        elif crash:
            verdicts[f"crashed: {crash.split(' (at ')[0][:90]}"] += 1
        elif p.returncode == 1:
            verdicts[_refusal(p.last_error())] += 1
        elif p.returncode is not None and p.returncode < 0:
            by = "the harness" if p.kill_began_ns is not None else "a signal"
            verdicts[f"killed before holding (by {by})"] += 1
        else:
            verdicts[f"ended with status {p.returncode}"] += 1
    return verdicts, crashes


#: What a newcomer says when SAVED's descriptors were not the project's: between two
#: Highlander processes only a stale offer can cause it, and that is asked again now.
_BAD_HANDOVER = ("SAVED carried descriptors", "SAVED arrived with")


def refused_saved(procs: list[Proc]) -> list[str]:
    """Children that failed on the descriptors SAVED carried (the must-be-zero messages)."""
    return [
        f"pid {p.pid} (step {p.step}): {p.last_error()[:160]}"
        for p in procs
        if p.role == "child"
        and p.returncode == 1
        and any(said in p.last_error() for said in _BAD_HANDOVER)
    ]


#: The one-line error for a file that is not what it should be (UnsafeFileError).
_UNSAFE = re.compile(r"remove (\S+) \(it [^)]*\) and start again")
_FILES = ((".lock", "lock file"), (".state", "record"), (".events.jsonl", "event log"))


def _refusal(line: str) -> str:
    text = line.lower()
    unsafe = _UNSAFE.search(line)
    if unsafe is not None:
        path = unsafe.group(1)
        which = next((name for end, name in _FILES if path.endswith(end)), "socket path")
        which = "socket path" if path.endswith(".sock") else which
        return f"refused in one line: something planted at the {which}"
    for needle, label in (
        ("vanished while in use", "refused: the runtime dir vanished while in use"),
        ("cannot hold the project", "refused in one line: cannot hold the project (disk full?)"),
        ("cannot take the project over", "declined: cannot prepare the takeover"),
        ("it is a directory", "refused: a directory at the socket path"),
        ("is a directory, so nobody", "refused: a directory at the socket path"),
        ("no holder's record names it", "refused: a listener no record names, not signalled"),
        ("never signal", "refused: holder not verifiable, not signalled"),
        ("will not", "refused: holder not verifiable, not signalled"),
        ("record is missing", "refused: holder unreachable and no record"),
        ("nobody answers", "refused: holder unreachable"),
        ("thrash", "refused: anti-thrash"),
        ("database space exceeded", "refused: etcd full (its NOSPACE alarm)"),
    ):
        if needle in text:
            return label
    return f"failed: {line[:70]}"
