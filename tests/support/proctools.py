"""Real child processes for the process-level tests: spawn, hear from, and always end them."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.paths import PROGRAMS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from highlander._core.deadlines import Timeouts
    from highlander._host.settings import Settings

CHILD = PROGRAMS / "child.py"
TOKEN = "test-token-0123456789abcdef"
#: Hang guard for waits on a child (not a performance assertion).
WAIT = 30.0


@dataclass
class Child:
    """One child process and the read end of its report pipe."""

    proc: subprocess.Popen[bytes]
    reports: int
    buffer: bytes = b""
    heard: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def next_report(self, timeout: float = WAIT) -> dict[str, Any] | None:
        """The next report line, or None if the child closed the pipe."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"child {self.pid} sent no report in {timeout} s")
            if not readable([self.reports], left):
                continue
            chunk = os.read(self.reports, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        report: dict[str, Any] = json.loads(line)
        self.heard.append(report)
        return report

    def wait_for(self, event: str, timeout: float = WAIT) -> dict[str, Any]:
        """Skip reports until one of kind ``event``; fail if the child ends first."""
        while True:
            report = self.next_report(timeout)
            if report is None:
                raise AssertionError(f"child {self.pid} ended without {event!r}: {self.finish()}")
            if report.get("event") == event:
                return report

    def finish(self, timeout: float = WAIT) -> tuple[int, bytes, bytes]:
        """Wait for exit; return (status, stdout, stderr)."""
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err


class Children:
    """Starts children for one test and ends every one of them by pid afterwards."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.project = tmp / "project"
        self.project.mkdir(exist_ok=True)
        self.runtime = tmp / "rt"
        self.witness = tmp / "witness.log"
        self.started: list[Child] = []
        #: Descriptors a test wants closed at the end.
        self.keep: list[int] = []
        #: Start each child in a process group of its own (the chaos harness's children).
        self.own_groups = False

    def settings(self, app: str, timeouts: Timeouts | None = None) -> Settings:
        """This test's settings for ``app`` in-process, as its children resolve theirs."""
        from highlander._host.settings import Settings

        return Settings.resolve(
            app=app,
            project=str(self.project),
            mode=None,
            token=TOKEN,
            timeouts=timeouts,
            runtime_dir=str(self.runtime),
            env=self.env(),
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HIGHLANDER_", "CLAUDE_"))}
        env.update(
            HIGHLANDER_TOKEN=TOKEN,
            HIGHLANDER_RUNTIME_DIR=str(self.runtime),
            HIGHLANDER_PROJECT=str(self.project),
        )
        env.update(extra)
        return env

    def start(self, env: dict[str, str] | None = None, **cfg: Any) -> Child:
        cfg.setdefault("witness", str(self.witness))
        environment = dict(env or self.env())
        environment["HL_CHILD"] = json.dumps(cfg)
        return self.spawn([sys.executable, str(CHILD)], environment)

    def spawn(self, argv: list[str], env: dict[str, str]) -> Child:
        """Start ``argv`` with a report pipe (its fd in HL_READY_FD); end it at cleanup."""
        read_end, write_end = os.pipe()
        proc = subprocess.Popen(
            argv,
            env={**env, "HL_READY_FD": str(write_end)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(write_end,),
            process_group=0 if self.own_groups else None,
        )
        os.close(write_end)
        child = Child(proc, read_end)
        self.started.append(child)
        return child

    def cleanup(self) -> None:
        """Kill and reap every child still running; safe to call twice."""
        keep, self.keep = self.keep, []
        started, self.started = self.started, []
        for fd in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
        for child in started:
            if child.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                child.proc.communicate(timeout=WAIT)
            os.close(child.reports)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every event logged in this test's runtime dir (of ``kind``, if given)."""
        lines: list[dict[str, Any]] = []
        for path in self.runtime.glob("*.events.jsonl"):
            lines += [json.loads(line) for line in path.read_text().splitlines()]
        lines.sort(key=lambda e: e["ts"])
        return [e for e in lines if kind is None or e["event"] == kind]

    def reigns(self) -> list[tuple[int, int, int, int]]:
        """Belief intervals: (pid, generation, acquire_ns, end_ns or max), monotonic clock.

        A reign begins at its acquire line (written once ``acquire()`` has
        returned) and ends at the earlier of its release line (the start of
        ``on_deposed``) and its library's ``relinquished`` event: from that
        event on, ``is_holder`` and ``check_current()`` say no, and a
        committed holder runs ``on_deposed`` only after its successor may
        hold.  A real overlap still shows: a ``relinquished`` after the
        successor's acquire line.  A ``resumed`` (over etcd, a commit that
        did not apply) takes its reign's ``relinquished`` back.
        """
        # Event timestamps are wall-clock seconds; the witness lines are monotonic.
        offset = time.time_ns() - time.monotonic_ns()
        let_go: dict[tuple[int, int], int] = {}
        for e in self.events():
            key = (e["pid"], e.get("generation", -1))
            if e["event"] == "resumed":  # (etcd) its commit did not apply: the reign went on
                let_go.pop(key, None)
            elif e["event"] == "relinquished":
                let_go.setdefault(key, int(e["ts"] * 1e9) - offset)
        opened: dict[int, tuple[int, int]] = {}
        intervals = []
        for line in self.witness.read_text().splitlines():
            what, pid, gen, at = line.split()
            if what == "acquire":
                opened[int(pid)] = (int(gen), int(at))
            elif int(pid) in opened:
                gen0, start = opened.pop(int(pid))
                intervals.append((int(pid), gen0, start, int(at)))
            # else: a release with no acquire line: its reign ended (a lease bound
            # passed under load) before it could say it held; it never acted.
        intervals += [(pid, gen, start, 2**63) for pid, (gen, start) in opened.items()]
        ended = [
            (pid, gen, start, min(end, let_go.get((pid, gen), end)))
            for pid, gen, start, end in intervals
        ]
        return sorted(ended, key=lambda r: r[2])


def readable(fds: list[int], timeout: float) -> list[int]:
    """Which of ``fds`` are readable within ``timeout`` (epoll: no ceiling on fd numbers).

    ``select()`` refuses descriptors from 1024 on, which a long chaos run passes.
    """
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        return [key.fd for key, _ in sel.select(timeout)]


def wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Wait (bounded) until every thread of ``pid`` shows stopped (``T``) in ``/proc``.

    ``kill(SIGSTOP)`` returns before the threads have stopped; one that was
    on another CPU (or in a syscall) may still finish what it was doing.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = set()
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
                states.add(stat.rsplit(")", 1)[1].split()[0])
        if states == {"T"}:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not stop within {timeout} s")


def assert_no_overlap(reigns: list[tuple[int, int, int, int]]) -> None:
    """At no instant did two processes both hold the project."""
    for before, after in itertools.pairwise(reigns):
        assert before[3] <= after[2], f"two holders at once: {before} and {after}"


def wait_until_one_left(children: list[Child], timeout: float = 60.0) -> Child:
    """Read every child's reports until only one still has its pipe open; return it.

    A child closes its pipe only by exiting, so this waits (event-driven, on
    the pipes) for all but one to end.
    """
    deadline = time.monotonic() + timeout
    open_pipes = {child.reports: child for child in children}
    while len(open_pipes) > 1:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(open_pipes)} children still running after {timeout} s")
        for fd in readable(list(open_pipes), left):
            child = open_pipes[fd]
            chunk = os.read(fd, 65536)
            if not chunk:
                del open_pipes[fd]
                continue
            child.buffer += chunk
            while b"\n" in child.buffer:
                line, child.buffer = child.buffer.split(b"\n", 1)
                child.heard.append(json.loads(line))
    (survivor,) = open_pipes.values()
    return survivor


def wipe(path: str | os.PathLike[str]) -> None:
    """Remove a runtime directory as a /tmp cleaner would, while a holder may live in it.

    A live holder republishes its socket the moment it sees it deleted, so
    one pass can find the directory no longer empty; a cleaner goes on until
    it is gone (bounded: a hang guard).
    """
    import shutil

    deadline = time.monotonic() + WAIT
    while os.path.lexists(path):
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
