"""``highlander run -- CMD``: make any command (say, a Node MCP server) a singleton.

The wrapper holds the project and runs the command as its child with stdin,
stdout and stderr inherited untouched: the JSON-RPC stream passes byte for
byte, and the wrapper never reads or writes it.  Signals the wrapper gets
are forwarded.  When a successor asks, the child gets ``--on-save-signal``
(default SIGTERM); the wrapper reports PROGRESS while the child winds down
(plus one step per line the child writes to the descriptor named in
``HIGHLANDER_PROGRESS_FD``, if it wants) and SAVED once the child exited.
The wrapper's exit status is the child's (128 + N for a child ended by
signal N).  The child finds the predecessor's handoff (JSON) in
``HIGHLANDER_HANDOFF`` and the reign's generation in ``HIGHLANDER_GENERATION``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from highlander._command_name import command_app
from highlander._errors import HighlanderError
from highlander._highlander import Highlander
from highlander._log import flush
from highlander._progress import Progress
from highlander._termination import signal_child

PROGRESS_VAR = "HIGHLANDER_PROGRESS_FD"
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


def default_app(argv: Sequence[str]) -> str:
    """Name a wrapped command after what it runs, never after its launcher alone.

    ``npx -y @scope/server-files@1.2`` is ``server-files``, ``node
    …/filesystem/dist/index.js`` is ``filesystem-<hash>``: the rules and
    their table are in :mod:`highlander._command_name` and docs/mcp.md.
    """
    return command_app(argv)


def exit_status(returncode: int) -> int:
    """The shell convention: 128 + N for a process ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Wrapper:
    """One wrapped command: its process, its pidfd and the succession bookkeeping."""

    def __init__(self, argv: Sequence[str], save_signal: int) -> None:
        self.argv = list(argv)
        self.save_signal = save_signal
        self.child: subprocess.Popen[bytes] | None = None
        self.pidfd = -1
        self.saving = threading.Event()
        self.progress: Progress | None = None
        self.read_end, self.write_end = os.pipe()
        os.set_inheritable(self.read_end, False)

    def start(self, handle: Highlander) -> None:
        """Spawn the command, handing it the progress descriptor and the handoff."""
        env = {
            **os.environ,
            PROGRESS_VAR: str(self.write_end),
            "HIGHLANDER_GENERATION": str(handle.generation),
            "HIGHLANDER_HANDOFF": json.dumps(handle.handoff),
        }
        self.child = subprocess.Popen(self.argv, env=env, pass_fds=(self.write_end,))  # noqa: S603
        os.close(self.write_end)
        self.pidfd = os.pidfd_open(self.child.pid)
        threading.Thread(target=self._pump_progress, name="highlander-run", daemon=True).start()

    def _pump_progress(self) -> None:
        # Drained always, so a chatty child never blocks on a full pipe.
        with os.fdopen(self.read_end, "rb", buffering=0) as lines:
            for line in lines:
                progress = self.progress
                if progress is not None:
                    progress.advance(line.decode(errors="replace").strip()[:1024])

    def forward(self, signum: int, _frame: Any) -> None:
        """Signal handler: pass the signal on to the child."""
        signal_child(self.pidfd, signum)

    def save(self, progress: Progress) -> dict[str, Any]:
        """The save hook: ask the child to wind down and report until it is gone."""
        assert self.child is not None
        self.saving.set()
        self.progress = progress
        signal_child(self.pidfd, self.save_signal)
        progress.advance(f"sent {signal.Signals(self.save_signal).name} to {self.argv[0]}")
        select.select([self.pidfd], [], [])  # readable once the child has exited
        returncode = self.child.wait()
        return {"command": self.argv, "exit_status": exit_status(returncode)}

    def deposed(self) -> None:
        """Leave with the child's status (after a succession, or when orphaned)."""
        assert self.child is not None
        if self.child.poll() is None:
            signal_child(self.pidfd, self.save_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.child.wait(timeout=5.0)
            signal_child(self.pidfd, signal.SIGKILL)
        flush()
        os._exit(exit_status(self.child.wait()))


def run(
    argv: Sequence[str],
    *,
    save_signal: int = signal.SIGTERM,
    app: str | None = None,
    project: str | None = None,
    runtime_dir: str | None = None,
) -> int:
    """Hold the project, run ``argv``, and return its exit status."""
    wrapper = Wrapper(argv, save_signal)
    name = app or default_app(argv)
    handle = Highlander(
        app=name,
        project=project,
        runtime_dir=runtime_dir,
        on_save=wrapper.save,
        on_deposed=wrapper.deposed,
    )
    try:
        handle.acquire()
    except HighlanderError as exc:
        flush()
        sys.stderr.write(f"highlander: {exc}\n")
        return 1
    if not handle.is_holder:  # OBSERVE/WARN: run anyway, beside the holder
        return exit_status(subprocess.call(list(argv)))  # noqa: S603 - the user's command
    try:
        wrapper.start(handle)
    except OSError as exc:
        handle.release()
        sys.stderr.write(f"highlander: cannot run {argv[0]}: {exc.strerror}\n")
        return 127
    for signum in FORWARDED:
        signal.signal(signum, wrapper.forward)
    assert wrapper.child is not None
    returncode = wrapper.child.wait()
    if wrapper.saving.is_set():
        # A succession asked the child to stop: let it finish; on_deposed exits.
        bound = handle.settings.timeouts if handle.settings else None
        wait = (bound.exit_grace + bound.request) if bound else 10.0
        threading.Event().wait(wait)
    handle.release()
    return exit_status(returncode)
