"""The bench's child processes: their program, and starting and ending them by pid.

The child program runs as ``holder``, ``newcomer``, ``baseline`` or ``storm``; the bench
writes it into its scratch directory (:func:`write_child_script`) and every
benchmark starts it through :class:`Children`, which ends each child by pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from scripts.bench.env import APP, HOLD, TOKEN, WAIT, BenchError, child_env
from tests.support import proctools  # the test suite's process helpers, reused rather than copied

#: The benchmark's child program: ``holder``, ``newcomer``, ``baseline`` or ``storm``.
#: It reports JSON lines on the pipe named by HL_BENCH_FD and never writes stdout.
#: HL_BENCH_TIMEOUTS (JSON, optional) is passed to ``Highlander`` as ``Timeouts(**...)``.
#: HL_BENCH_APP_IMPORTS (optional): import asyncio and anyio first, as the baseline does.
#: ``storm`` is a holder with the library's default anti-thrash limit; if ``acquire()``
#: raises a HighlanderError it reports ``refused`` (class, reason) and exits 1.
CHILD_SOURCE = """\
import json
import os
import sys
import time

from highlander import Highlander, HighlanderError, Timeouts

ROLE = sys.argv[1]
FD = int(os.environ["HL_BENCH_FD"])
HOLD = float(os.environ.get("HL_BENCH_HOLD", "600"))
PROFILE = os.environ.get("HL_BENCH_PROFILE", "")
MARKS = bool(os.environ.get("HL_BENCH_MARKS"))
TIMEOUTS = json.loads(os.environ.get("HL_BENCH_TIMEOUTS") or "null")


def report(**fields):
    os.write(FD, (json.dumps({"pid": os.getpid(), **fields}) + "\\n").encode())


def save(progress):
    return {"saved_by": os.getpid()}


def deposed():
    report(event="deposed")
    os._exit(0)


def mark(what):
    if MARKS:
        sys.stderr.write(f"HL_BENCH_MARK {what}\\n")
        sys.stderr.flush()


def profile_threads():
    # --profile: every thread started from now on runs under its own cProfile.
    import cProfile
    import threading

    run = threading.Thread.run

    def profiled(self):
        profile = cProfile.Profile()
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()
            profile.dump_stats(os.path.join(PROFILE, f"thread-{self.ident}.prof"))

    threading.Thread.run = profiled
    return cProfile.Profile()


def main():
    if ROLE == "baseline" or os.environ.get("HL_BENCH_APP_IMPORTS"):
        # The application: asyncio and anyio are what any MCP SDK server has
        # loaded anyway (benchmark 4 compares a holder with the baseline, both
        # with them loaded, so the difference is what holding adds).
        import asyncio  # noqa: F401

        import anyio  # noqa: F401
    if ROLE == "baseline":
        report(event="ready")
        time.sleep(HOLD)
        return
    # Back-to-back successions are the point here, not a restart loop to stop;
    # but a storm is what anti-thrash is for: it keeps the default limit.
    hl = Highlander(
        app="bench",
        on_save=save,
        on_deposed=deposed,
        timeouts=Timeouts(**TIMEOUTS) if TIMEOUTS else None,
        **({} if ROLE == "storm" else {"thrash_limit": 1_000_000}),
    )
    if ROLE == "storm":
        try:
            hl.acquire()
        except HighlanderError as exc:
            reason = getattr(exc, "reason", None)
            report(event="refused", error=type(exc).__name__, reason=reason, detail=str(exc))
            sys.exit(1)
        report(event="ready", outcome=hl.outcome.value, generation=hl.generation)
        time.sleep(HOLD)
        return
    if ROLE == "holder":
        hl.acquire()
        report(event="ready", outcome=hl.outcome.value, generation=hl.generation)
        if MARKS:  # --profile: a quiet moment, then mark what follows as serving
            time.sleep(0.5)
            mark("serving")
            report(event="serving")
        time.sleep(HOLD)
        return
    profile = profile_threads() if PROFILE else None
    mark("start")
    if profile is not None:
        profile.enable()
    wall = time.time()
    start = time.perf_counter()
    hl.acquire()
    seconds = time.perf_counter() - start
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.path.join(PROFILE, "main.prof"))
    mark("end")
    report(
        event="acquired",
        seconds=seconds,
        started_at=wall,
        outcome=hl.outcome.value,
        generation=hl.generation,
        handoff=hl.handoff,
    )
    hl.release()
    if PROFILE:  # let the serving thread end, so its profile is written
        import threading

        for thread in threading.enumerate():
            if thread.name.startswith("highlander-") and thread.name != "highlander-log":
                thread.join(5)


main()
"""


def write_child_script(base: Path) -> Path:
    """Write the child program into ``base``; return its path."""
    script = base / "bench_child.py"
    script.write_text(CHILD_SOURCE)
    return script


class Child(proctools.Child):
    """A test-suite child (tests/support/proctools.py) whose errors carry its stderr's tail."""

    def __init__(self, proc: subprocess.Popen[bytes], reports: int, stderr_path: Path) -> None:
        super().__init__(proc, reports)
        self.stderr_path = stderr_path
        self.spawned = 0.0

    def next_report(self, timeout: float = WAIT) -> dict[str, Any] | None:
        """The next report line, or ``None`` if the child closed the pipe."""
        try:
            return super().next_report(timeout)
        except TimeoutError as exc:
            raise BenchError(f"{exc}{self.tail()}") from None

    def expect(self, event: str, timeout: float = WAIT) -> dict[str, Any]:
        """Skip reports until one of kind ``event``; fail if the child ends first."""
        deadline = time.monotonic() + timeout
        while True:
            report = self.next_report(max(0.0, deadline - time.monotonic()))
            if report is None:
                status = self.proc.poll()
                raise BenchError(
                    f"child {self.pid} ended (status {status}) before {event!r}{self.tail()}"
                )
            if report.get("event") == event:
                return report

    def wait_exit(self, timeout: float = WAIT) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError(f"child {self.pid} did not exit within {timeout} s") from None

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            text = self.stderr_path.read_text(errors="replace").strip()
            if text:
                return "; its stderr ends with:\n" + "\n".join(text.splitlines()[-15:])
        return ""


class Children:
    """Starts children in one scratch directory and ends every one of them by pid."""

    def __init__(self, scratch: Path, child_script: Path) -> None:
        self.scratch = scratch
        self.script = child_script
        self.pycache = scratch.parent / "pycache"
        self.project = scratch / "project"
        self.project.mkdir()
        self.runtime = scratch / "rt"
        self.started: list[Child] = []

    def settings(self) -> Any:
        """The library's ``Settings`` for this scratch project, as its children resolve them."""
        # Imported here, after the bench has pointed the bytecode cache at its scratch.
        from highlander._host.settings import Settings  # noqa: PLC0415

        return Settings.resolve(
            app=APP,
            project=self.project,
            mode=None,
            token=TOKEN,
            timeouts=None,
            runtime_dir=self.runtime,
        )

    def env(self) -> dict[str, str]:
        env = child_env(self.pycache)
        env.update(
            HIGHLANDER_TOKEN=TOKEN,
            HIGHLANDER_RUNTIME_DIR=str(self.runtime),
            HIGHLANDER_PROJECT=str(self.project),
            HL_BENCH_HOLD=str(HOLD),
        )
        return env

    def start(
        self,
        role: str,
        flags: tuple[str, ...] = (),
        extra: dict[str, str] | None = None,
        *,
        script: Path | None = None,
        label: str = "child",
    ) -> Child:
        """Start ``script`` (default: the bench child) in ``role``; its ``spawned`` is
        ``perf_counter()`` taken just before ``Popen``."""
        read_end, write_end = os.pipe()
        environment = self.env() | (extra or {})
        environment["HL_BENCH_FD"] = str(write_end)
        stderr_path = self.scratch / f"{label}-{len(self.started)}-{role}.stderr"
        try:
            with open(stderr_path, "wb") as stderr:
                spawned = time.perf_counter()
                proc = subprocess.Popen(
                    [sys.executable, *flags, str(script or self.script), role],
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    pass_fds=(write_end,),
                )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        child = Child(proc, read_end, stderr_path)
        child.spawned = spawned
        self.started.append(child)
        return child

    def end(self, child: Child) -> None:
        """Kill ``child`` by its pid if it still runs, then reap it (bounded)."""
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.proc.wait(timeout=WAIT)
        if child.reports >= 0:
            os.close(child.reports)
            child.reports = -1

    def cleanup(self) -> None:
        for child in self.started:
            self.end(child)


@contextlib.contextmanager
def children(base: Path, name: str, child_script: Path) -> Iterator[Children]:
    scratch = base / name
    scratch.mkdir()
    kids = Children(scratch, child_script)
    try:
        yield kids
    finally:
        kids.cleanup()


def newcomer(
    kids: Children,
    outcome: str,
    flags: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
) -> tuple[Child, dict[str, Any]]:
    """Start a fresh newcomer child; its ``acquired`` report, which must say ``outcome``."""
    child = kids.start("newcomer", flags, extra)
    got = child.expect("acquired")
    if got["outcome"] != outcome:
        raise BenchError(f"the newcomer ended {got['outcome']}, not {outcome}{child.tail()}")
    return child, got


def check_exit(child: Child) -> None:
    """Wait (bounded) for ``child`` to exit; fail unless its status is 0."""
    status = child.wait_exit()
    if status != 0:
        raise BenchError(f"child {child.pid} exited {status}{child.tail()}")
