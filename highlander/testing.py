"""Test your own server's succession: an isolated sandbox, real processes, your ``on_save``.

In your ``conftest.py``::

    pytest_plugins = ["highlander.testing"]

and a test takes the ``highlander_sandbox`` fixture::

    def test_my_save_hands_over(highlander_sandbox):
        handoff = highlander_sandbox.succession("my_server:save", app="my-server").handoff
        assert handoff == {"notes": {}}

The fixture gives the test a runtime directory, project directory, token and
HOME of its own (the fencing floor lives under ``~/.local/state``) and sets
``HIGHLANDER_RUNTIME_DIR``, ``HIGHLANDER_PROJECT``, ``HIGHLANDER_TOKEN`` and
``HOME`` for the test and every process it starts.  Every process started
through the sandbox is ended by its pid when the test ends.

The plugin is opt-in (no ``pytest11`` entry point): installing Highlander
does not add a fixture to every pytest run on the machine.  Nothing here
imports pytest unless pytest is the one importing this module, and
``import highlander`` never imports this module.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The variables a sandbox sets; the others of Highlander's are removed.
_CLEARED = ("HIGHLANDER_MODE", "CLAUDE_PROJECT_DIR")
#: Hang guard for every wait here (not a performance assertion).
WAIT = 30.0
#: How often the event log is read while waiting for an event.
_POLL = 0.01


@dataclass(frozen=True)
class Succession:
    """What :meth:`Sandbox.succession` saw: a real handover between two processes."""

    handoff: dict[str, Any] | None
    """What the holder's ``on_save`` returned, as the newcomer received it."""
    outcome: str
    """The newcomer's outcome (``succeeded`` when the holder handed over)."""
    generation: int
    """The newcomer's fencing generation."""
    holder_pid: int
    """The pid of the holder that saved."""
    holder_status: int
    """The holder's exit status (0: it handed over and left)."""
    holder_stderr: str
    """Everything the holder wrote on stderr (its log lines, a traceback)."""


@dataclass
class Sandbox:
    """A runtime dir, project, token and HOME of a test's own, and the processes it started."""

    runtime_dir: Path
    project: Path
    home: Path
    token: str
    _started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def create(cls, base: Path) -> Sandbox:
        """A sandbox under ``base`` (the runtime dir under /tmp: socket paths are short)."""
        project, home = base / "project", base / "home"
        project.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)
        runtime = Path(tempfile.mkdtemp(prefix="hl-test-"))
        return cls(runtime, project, home, f"test-{os.urandom(16).hex()}")

    def variables(self) -> dict[str, str]:
        """The environment variables that point Highlander at this sandbox."""
        return {
            "HIGHLANDER_RUNTIME_DIR": str(self.runtime_dir),
            "HIGHLANDER_PROJECT": str(self.project),
            "HIGHLANDER_TOKEN": self.token,
            "HOME": str(self.home),
        }

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment with the sandbox's variables (and ``extra``) in it."""
        env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        return {**env, **self.variables(), **extra}

    def start(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the project directory (stdin a pipe you may close, stderr kept).

        The process is ended by its pid when the sandbox closes.
        """
        proc = subprocess.Popen(  # noqa: S603 - the test's own command
            list(argv),
            cwd=self.project,
            env=env or self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._started.append(proc)
        return proc

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every event in the sandbox's event logs (of ``kind``, if given), oldest first."""
        found: list[dict[str, Any]] = []
        for path in self.runtime_dir.glob("*.events.jsonl"):
            found += [json.loads(line) for line in path.read_text().splitlines() if line]
        found.sort(key=lambda event: str(event["ts"]))
        return [event for event in found if kind is None or event["event"] == kind]

    def wait_for_event(self, kind: str, pid: int, timeout: float = WAIT) -> dict[str, Any]:
        """The first event ``kind`` logged by ``pid``; ``TimeoutError`` if none comes in time."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events(kind):
                if event.get("pid") == pid:
                    return event
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {kind!r} event from pid {pid} in {timeout} s")
            time.sleep(_POLL)

    def succession(
        self, on_save: str, *, app: str, env: dict[str, str] | None = None, timeout: float = WAIT
    ) -> Succession:
        """Run a real succession against your ``on_save`` (``"module:function"``).

        A holder process imports the module, holds the project with that hook
        and waits; a newcomer process with the same app takes over.  The
        holder runs your hook, hands over and leaves; the newcomer reports
        the handoff it received.  Both import what this test can import
        (its ``sys.path`` is their ``PYTHONPATH``); ``env`` replaces their
        environment (start from :meth:`env`).
        """
        env = env or self.env(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        argv = [sys.executable, "-m", "highlander.testing", on_save, app]
        holder = self.start([*argv, "holder"], env=env)
        self.wait_for_event("claimed", holder.pid, timeout)
        newcomer = self.start([*argv, "newcomer"], env=env)
        out, err = newcomer.communicate(timeout=timeout)
        if newcomer.returncode != 0 or not out:
            raise AssertionError(f"the newcomer failed ({newcomer.returncode}): {err.decode()}")
        report: dict[str, Any] = json.loads(out)
        _, holder_err = holder.communicate(timeout=timeout)
        return Succession(
            handoff=report["handoff"],
            outcome=report["outcome"],
            generation=report["generation"],
            holder_pid=holder.pid,
            holder_status=holder.returncode,
            holder_stderr=holder_err.decode(errors="replace"),
        )

    def close(self) -> None:
        """End every process started here by its pid, then remove the runtime dir."""
        from highlander._host.termination import signal_child  # noqa: PLC0415 - the only signaller

        for proc in self._started:
            if proc.poll() is None:
                # Not reaped yet, so the pid is still this child's: its pidfd names it.
                with contextlib.suppress(ProcessLookupError):
                    pidfd = os.pidfd_open(proc.pid)
                    try:
                        signal_child(pidfd, signal.SIGKILL)
                    finally:
                        os.close(pidfd)
            with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
                proc.communicate(timeout=WAIT)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)


def _hook(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def _serve(target: str, app: str, role: str) -> None:
    """One side of :meth:`Sandbox.succession`: hold with the hook; a newcomer reports and leaves."""
    from highlander import Highlander  # noqa: PLC0415 - only the runner needs it

    hl = Highlander.ensure_singleton(app=app, on_save=_hook(target))
    if role == "holder":
        threading.Event().wait()  # until deposed: the default on_deposed leaves with status 0
    # The report is this runner's stdout, which no server speaks on.
    report = {"handoff": hl.handoff, "outcome": str(hl.outcome), "generation": hl.generation}
    hl.release()
    sys.stdout.write(json.dumps(report))


if "pytest" in sys.modules:  # loaded by pytest as a plugin: pytest is already imported
    import pytest

    @pytest.fixture
    def highlander_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
        """A :class:`Sandbox` whose variables are set for this test; its processes end with it."""
        sandbox = Sandbox.create(tmp_path / "highlander")
        for name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
        for name, value in sandbox.variables().items():
            monkeypatch.setenv(name, value)
        try:
            yield sandbox
        finally:
            sandbox.close()


if __name__ == "__main__":
    _serve(*sys.argv[1:4])
