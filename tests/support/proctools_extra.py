"""More real processes for the guard tests: helpers, grandchildren, other uids.

Everything started here is registered with :class:`Extras` and ended by pid
(or through a pidfd, for processes that are not our children) in teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import IO, Any

from tests.support.proctools import CHILD, WAIT, Child, Children

#: The uid of "another user" in these tests (no passwd entry needed).
OTHER_UID = 12345


class Extras:
    """Plain processes and grandchildren of one test, all ended in :meth:`cleanup`."""

    def __init__(self, kids: Children) -> None:
        self.kids = kids
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pidfds: list[int] = []
        self.files: list[IO[bytes]] = []

    # -- plain processes ---------------------------------------------------------

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` (stdio to /dev/null unless given); ended by pid in cleanup."""
        for stream in ("stdin", "stdout", "stderr"):
            kwargs.setdefault(stream, subprocess.DEVNULL)
        proc = subprocess.Popen(argv, **kwargs)
        self.procs.append(proc)
        return proc

    def helper(self, code: str, *args: str) -> Child:
        """Run ``code`` under this Python with a report pipe (fd in ``HL_READY_FD``).

        The helper is registered as one of ``kids``' children, so the usual
        cleanup ends it by pid; ``report(**fields)`` is predefined for it.
        """
        prelude = textwrap.dedent(
            """
            import json, os
            _fd = int(os.environ["HL_READY_FD"])
            def report(**fields):
                line = json.dumps({"pid": os.getpid(), **fields}) + "\\n"
                os.write(_fd, line.encode())
            """
        )
        argv = [sys.executable, "-c", prelude + textwrap.dedent(code), *args]
        return self.kids.spawn(argv, dict(os.environ))

    # -- grandchildren -----------------------------------------------------------

    def start_via_parent(
        self, env: dict[str, str] | None = None, **cfg: Any
    ) -> tuple[Child, int, int]:
        """Start tests/programs/child.py through an intermediate parent process.

        Returns ``(intermediate, grandchild_pid, grandchild_pidfd)``: the
        intermediate is a :class:`Child` whose report pipe carries the
        grandchild's reports; it waits for the grandchild and can be killed to
        orphan it.  The pidfd (readable once the grandchild has exited) is also
        what cleanup kills it through, so a reused pid is never signalled.
        """
        cfg.setdefault("witness", str(self.kids.witness))
        read_end, write_end = os.pipe()
        environment = dict(env or self.kids.env())
        environment["HL_CHILD"] = json.dumps(cfg)
        environment["HL_READY_FD"] = str(write_end)
        code = textwrap.dedent(
            """
            import os, subprocess, sys
            fd = int(os.environ["HL_READY_FD"])
            child = subprocess.Popen(
                [sys.executable, sys.argv[1]], pass_fds=(fd,), stdin=subprocess.DEVNULL
            )
            os.close(fd)
            sys.exit(child.wait())
            """
        )
        log = open(self.kids.tmp / "grandchild.stderr", "ab")  # noqa: SIM115 - closed in cleanup
        self.files.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(CHILD)],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            pass_fds=(write_end,),
        )
        os.close(write_end)
        intermediate = Child(proc, read_end)
        self.kids.started.append(intermediate)
        ready = intermediate.wait_for("ready")
        grandchild = int(ready["pid"])
        assert grandchild != proc.pid
        pidfd = os.pidfd_open(grandchild)
        self.pidfds.append(pidfd)
        return intermediate, grandchild, pidfd

    def grandchild_stderr(self) -> str:
        path = self.kids.tmp / "grandchild.stderr"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- teardown ----------------------------------------------------------------

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=WAIT)
        for fd in self.pidfds:
            if not exited(fd, 0):
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                exited(fd, WAIT)
            os.close(fd)
        for handle in self.files:
            handle.close()


def exited(pidfd: int, timeout: float) -> bool:
    """Whether the process behind ``pidfd`` has exited, waiting up to ``timeout`` (select)."""
    readable, _, _ = select.select([pidfd], [], [], timeout)
    return bool(readable)


def events(kids: Children) -> list[dict[str, Any]]:
    """Every event of the test's runtime directory, oldest first per file."""
    lines: list[dict[str, Any]] = []
    for path in sorted(Path(kids.runtime).glob("*.events.jsonl")):
        lines += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return lines


def last_stderr_line(err: bytes) -> str:
    lines = err.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""
