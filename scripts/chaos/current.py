"""Issue #11's counters: ``check_current()`` passing in two processes at once, forked
workers that kept the project, and the window a taken rendezvous leaves.

**Simultaneous passes.**  Every holder (child option ``check_loop``, 20 ms)
and every forked worker (0.5 s) calls ``check_current()`` in a loop and
appends ``pass|fail PID BEGIN END`` (CLOCK_MONOTONIC, taken before and after
the call) to a run-wide file.  A pass proves (by the library's own standard)
that the process held the project at *some* instant of its ``[BEGIN, END]``.
A process holds the project for one unbroken stretch (from its claim or ACK
to its end; a lost lock is never found again), so two *consecutive* passes of
process A, ending at ``e1`` and beginning at ``b2``, prove that A held
throughout ``[e1, b2]``.  A violation is a pass of another process B whose
whole ``[BEGIN, END]`` lies inside such a stretch of A: at the instant B's
check proved B held, A held too.

What it cannot see: two passes whose check spans merely overlap or lie
closer than a loop period apart without being nested as above (each may
have held at a different instant: a fast, legitimate handover looks exactly
like that, so counting ``|t1 - t2| < period`` would accuse every quick
succession); simultaneity shorter than the gap between two checks of one of
the processes (about 20 ms, plus the time a loaded machine delays the loop);
a process that passes only once (a stretch needs two passes); and anything
about processes that do not run the loop (the harness's own queries).
Lines from a pid the harness cannot place on a process are counted but
never used to build a stretch (pids are reused within a run).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from scripts.chaos.log import CheckLine
from scripts.chaos.process import INF, Proc, Who, to_monotonic
from scripts.chaos.schedule import TIMEOUTS

#: How long a holder may keep running after its lock file was taken before it steps
#: down (docs/defaults.md: "the time to wake", milliseconds; 1 s on a loaded machine).
DETECTION_BOUND_NS = 1_000_000_000


def _at(ns: float, t0: int) -> str:
    return f"{(ns - t0) / 1e9:.3f} s"


def simultaneous_passes(
    who: Who, checks: list[CheckLine], t0: int
) -> tuple[list[str], Counter[str]]:
    """Passes of one process inside a proven holding stretch of another; and totals."""
    stats: Counter[str] = Counter()
    runs: dict[int, list[CheckLine]] = {}
    owner: dict[int, Proc] = {}
    passes: list[tuple[int, int, int, CheckLine]] = []  # (begin, end, owner key, line)
    for line in sorted(checks, key=lambda c: c.began):
        stats["pass" if line.passed else "fail"] += 1
        proc = who.at_ns(line.pid, line.began)
        if proc is None:
            stats["unattributed"] += 1
            key = -line.pid  # never forms a stretch (see below), only a pass
        else:
            key = id(proc)
            owner[key] = proc
            runs.setdefault(key, []).append(line)
        if line.passed:
            passes.append((line.began, line.ended, key, line))
    stats["processes"] = len(runs)
    stretches: list[tuple[int, int, int, CheckLine, CheckLine]] = []
    for key, lines in runs.items():
        for first, second in itertools.pairwise(lines):
            if first.passed and second.passed and first.ended <= second.began:
                stretches.append((first.ended, second.began, key, first, second))
    stretches.sort(key=lambda s: s[0])
    listed: list[str] = []
    active: list[tuple[int, int, int, CheckLine, CheckLine]] = []
    i = 0
    for began, ended, key, line in passes:
        while i < len(stretches) and stretches[i][0] <= began:
            active.append(stretches[i])
            i += 1
        active = [s for s in active if s[1] >= began]
        for _, end, holder, first, second in active:
            if holder != key and end >= ended:
                a = owner[holder]
                b = owner.get(key)
                listed.append(
                    f"pid {line.pid} ({_role(b)}) passed check_current() at "
                    f"{_at(began, t0)}..{_at(ended, t0)} while pid {a.pid} ({_role(a)}), "
                    f"which passed at {_at(first.began, t0)} and again at "
                    f"{_at(second.began, t0)}, held throughout"
                )
    return listed, stats


def _role(proc: Proc | None) -> str:
    if proc is None:
        return "not a process of this run"
    return f"{proc.role}, step {proc.step}"


def workers_kept(procs: list[Proc], checks: list[CheckLine]) -> tuple[list[str], int]:
    """Forked workers that kept anything of the rendezvous, or passed ``check_current()``.

    Each worker reports, right after the fork, how many of its descriptors
    refer to the lock file its parent held and how many are listening
    sockets, and ``is_holder``; all must be zero/false (the library closes
    a forked child's copies).  Its own ``check_current()`` must never pass.
    """
    listed: list[str] = []
    workers = [p for p in procs if p.role == "worker"]
    for w in workers:
        kept = w.kept or {}
        what = [f"{key} {kept[key]}" for key in ("lock_copies", "listening") if kept.get(key)]
        what += ["is_holder true"] * bool(kept.get("is_holder"))
        mine = [c for c in checks if c.passed and c.pid == w.pid and w.spawn_ns <= c.began]
        mine = [c for c in mine if c.began <= (w.exit_ns if w.exit_ns is not None else INF)]
        what += [f"{len(mine)} check_current() passes"] * bool(mine)
        if what:
            where = f"worker pid {w.pid} of the holder started at step {w.step}"
            listed.append(f"{where}: {', '.join(what)}")
    return listed, len(workers)


def claims_after_fork_kills(
    kills: list[tuple[Proc, int]], events: list[dict[str, Any]], clock: list[tuple[float, int]]
) -> tuple[int, float]:
    """How many forking holders the harness SIGKILLed with their worker alive, and the
    longest time (s) from such a kill to the next claim (INF: none came)."""
    claims = sorted(to_monotonic(e["ts"], clock) for e in events if e["event"] == "claimed")
    longest, count = 0.0, 0
    for proc, at in kills:
        worker = proc.worker
        if worker is None or (worker.exit_ns is not None and worker.exit_ns < at):
            continue
        count += 1
        following = [c for c in claims if c >= at]
        longest = max(longest, (following[0] - at) / 1e9 if following else INF)
    return count, longest


def excused_overlap(
    older: Proc | None,
    span: tuple[int, float],
    lost: bool,
    newer_start: int,
    losses: list[tuple[int, int, str]],
    saved_ns: list[float],
) -> tuple[float, str, bool] | None:
    """An overlap of two reigns that the documented detection window explains, or None.

    ``span``: the older reign's acquire and end; ``lost``: it stepped down with
    ``lost_rendezvous``; ``saved_ns``: when the older holder sent SAVED.  Its
    rendezvous was taken (a wipe, or a plant at its lock file) after it
    acquired and before the newer reign did; or, while its process was alive
    and before it acquired, in a handover it then committed (``lost`` must
    then say it noticed).  From that moment to the end of its reign it ran
    (not counting time it was stopped, or kept off the CPU by the harness's
    ``starve_holder``: it could not run then either) at most
    :data:`DETECTION_BOUND_NS`,
    plus ``request`` if it had a handover out then (a holder waits for the
    handover's end before it steps down; its ``check_current()`` fails
    meanwhile).  "Then" includes a SAVED sent after the loss and before the
    holder noticed: the library checks the lock file just before SAVED, but a
    loss can still fall between that check and the send.  Only the *older*
    reign is excused: a newer one claiming on a taken rendezvous beside a
    live holder is a double holder.
    Returns (running ns, what was done, whether a handover was out).
    """
    if older is None:
        return None
    acquired, end = span
    after = [(b, note) for b, _, note in losses if acquired <= b <= newer_start]
    inherited = [(b, note) for b, _, note in losses if older.spawn_ns <= b < acquired]
    if after:
        began, note = min(after)
    elif lost and inherited:
        began, note = acquired, f"{max(inherited)[1]} (during its handover)"
    else:
        return None
    request = int(TIMEOUTS["request"] * 1e9)
    out = any(began - request <= at <= end for at in saved_ns)
    ran = (end - began) - older.stopped_ns(began, end, starved=True)
    return (ran, note, out) if ran <= DETECTION_BOUND_NS + request * out else None


def taken_between(losses: list[tuple[int, int, str]], start: float, end: float) -> bool:
    """Whether the rendezvous was taken (wipe, plant at the lock file) within ``[start, end]``."""
    return any(start <= after and before <= end for before, after, _ in losses)


class Taken:
    """:func:`taken_between` for event-log (wall clock) times."""

    def __init__(self, losses: list[tuple[int, int, str]], clock: list[tuple[float, int]]) -> None:
        self.losses, self.clock = losses, clock

    def between(self, start_ts: float | None, end_ts: float) -> bool:
        if start_ts is None:
            return False
        start, end = to_monotonic(start_ts, self.clock), to_monotonic(end_ts, self.clock)
        return taken_between(self.losses, start, end)
