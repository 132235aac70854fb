"""Benchmarks 6 and 7 (the identity/watchdog issue): verify a peer, replace a stopped one.

6. ``highlander._host.identity.mismatch(Expected(...))`` against a live holder
   child, in this process, each call timed on its own: the record-based check
   a newcomer runs before it signals a holder that never said HELLO (the
   record's pid, start time, exe, uid, boot id, and the project's lock file
   open in ``/proc/<pid>/fd``), and the cheaper HELLO-based one (pid, start
   time, exe, uid only).
7. A holder child is SIGSTOPped; a fresh newcomer child, with ``hello`` and
   ``term_grace`` passed explicitly, times its own ``acquire()``: the HELLO
   timeout, SIGTERM (it stays pending on a stopped process), ``term_grace``,
   SIGKILL, then the claim.  Slow (about 4 s a run): ``--skip-slow`` skips it.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.bench.cases import wait_until
from scripts.bench.children import Child, Children, check_exit, children, newcomer
from scripts.bench.env import BenchError, proc_stat
from scripts.bench.results import Row

#: Timed calls per identity check, after IDENTITY_WARMUP untimed ones.
IDENTITY_CALLS = 1000
IDENTITY_WARMUP = 100
#: Benchmark 7's newcomer timeouts (the library's defaults, passed explicitly).
HELLO = 2.0
TERM_GRACE = 2.0
#: Benchmark 7's allowance over hello + term_grace.
SLACK = 0.1


# -- 6. identity verification from /proc --------------------------------------


def _per_call_us(check: Callable[[], str | None], calls: int) -> list[float]:
    """Time ``calls`` calls of ``check`` one by one (µs); every call must find no mismatch."""
    for _ in range(IDENTITY_WARMUP):
        check()
    clock = time.perf_counter_ns
    samples: list[float] = []
    problems: list[str] = []
    for _ in range(calls):
        start = clock()
        problem = check()
        samples.append((clock() - start) / 1000)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise BenchError(f"{len(problems)} of {calls} checks failed, the first: {problems[0]}")
    return samples


def bench_identity(base: Path, script: Path) -> list[Row]:
    # Imported here, after the bench has pointed the bytecode cache at its scratch.
    from highlander._host.identity import Expected, mismatch  # noqa: PLC0415
    from highlander._host.record import read_record  # noqa: PLC0415
    from highlander._shell.observe import record_target  # noqa: PLC0415

    with children(base, "identity", script) as kids:
        holder = kids.start("holder")
        holder.expect("ready")
        settings = kids.settings()
        # The target exactly as a newcomer builds it from the holder's record.
        by_record = record_target(settings, read_record(settings.paths.state))
        if by_record is None or by_record.pid != holder.pid or by_record.lock_path is None:
            raise BenchError(f"the holder's record does not name it: {by_record!r}")
        by_hello = Expected(by_record.pid, by_record.start_time, by_record.exe, by_record.uid)
        record_us = _per_call_us(lambda: mismatch(by_record), IDENTITY_CALLS)
        hello_us = _per_call_us(lambda: mismatch(by_hello), IDENTITY_CALLS)
        fds = len(os.listdir(f"/proc/{holder.pid}/fd"))
    how = f"per call, {IDENTITY_CALLS} calls after {IDENTITY_WARMUP} untimed, in-process"
    return [
        Row(
            "identity_record",
            "6. identity check of a peer, record-based",
            "µs",
            record_us,
            target=100.0,
            note=(
                f"{how}; pid, start time, exe, uid, boot id, and the lock file among the "
                f"holder's {fds} open fds (/proc/<pid>/fd)"
            ),
        ),
        Row(
            "identity_hello",
            "6. identity check of a peer, HELLO-based",
            "µs",
            hello_us,
            note=f"{how}; pid, start time, exe, uid (no boot id, no lock file)",
        ),
    ]


# -- 7. SIGSTOPped incumbent replaced --------------------------------------------


def _state(pid: int) -> str:
    """The one-letter state of ``pid`` (field 3 of /proc/<pid>/stat; T = stopped)."""
    return proc_stat(pid)[0].decode()


def _events(kids: Children, pid: int) -> dict[str, float]:
    """When (``ts``) process ``pid`` logged each event to the project's event log."""
    seen: dict[str, float] = {}
    for path in kids.runtime.glob("*.events.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("pid") == pid:
                seen.setdefault(record["event"], record["ts"])
    return seen


def _stopped_run(kids: Children) -> dict[str, float]:
    """SIGSTOP a holder child; a fresh newcomer times its ``acquire()``; its timeline (s)."""
    holder = kids.start("holder")
    holder.expect("ready")
    # Our own unreaped child: its pid cannot name another process.
    os.kill(holder.pid, signal.SIGSTOP)
    wait_until(lambda: _state(holder.pid) == "T", "the holder to stop")
    timeouts = {"hello": HELLO, "term_grace": TERM_GRACE}
    incoming, got = newcomer(
        kids, "claimed_stale", extra={"HL_BENCH_TIMEOUTS": json.dumps(timeouts)}
    )
    status = holder.wait_exit()
    if status != -signal.SIGKILL:
        raise BenchError(f"the stopped holder ended with status {status}, not -SIGKILL")
    check_exit(incoming)
    for child in (holder, incoming):
        kids.end(child)
    return _timeline(kids, incoming, got)


def _timeline(kids: Children, incoming: Child, got: dict[str, Any]) -> dict[str, float]:
    seen = _events(kids, incoming.pid)
    missing = {"hung", "terminated", "killed", "claimed"} - seen.keys()
    if missing:
        raise BenchError(f"the newcomer logged no {sorted(missing)} (it logged {sorted(seen)})")
    return {
        "seconds": float(got["seconds"]),
        "hung": seen["hung"] - got["started_at"],
        "grace": seen["killed"] - seen["terminated"],
        "claim": seen["claimed"] - seen["killed"],
    }


def bench_stopped(base: Path, runs: int, script: Path) -> list[Row]:
    with children(base, "stopped", script) as kids:
        timelines = [_stopped_run(kids) for _ in range(runs)]
    budget = HELLO + TERM_GRACE

    def ms(key: str) -> float:
        return statistics.median(t[key] for t in timelines) * 1000

    seconds = [t["seconds"] for t in timelines]
    return [
        Row(
            "stopped",
            "7. SIGSTOPped incumbent replaced",
            "s",
            seconds,
            target=budget + SLACK,
            note=(
                f"newcomer's own acquire(), timeouts hello={HELLO:g} s, term_grace="
                f"{TERM_GRACE:g} s; every run claimed_stale, the stopped holder ended "
                f"-SIGKILL; medians from its event log: hung at {ms('hung'):.1f} ms, "
                f"SIGTERM to SIGKILL {ms('grace'):.1f} ms, SIGKILL to claimed {ms('claim'):.1f} ms"
            ),
            extra={"hello_s": HELLO, "term_grace_s": TERM_GRACE, "timelines": timelines},
        ),
        Row(
            "stopped_overshoot",
            "7. SIGSTOPped incumbent: over hello + term_grace",
            "ms",
            [(s - budget) * 1000 for s in seconds],
        ),
    ]
