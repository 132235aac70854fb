"""``highlander run -- CMD``: make any command (say, a Node MCP server) a singleton.

The wrapper holds the project and runs the command with stdin, stdout and
stderr inherited untouched: the JSON-RPC stream passes byte for byte, and
the wrapper never reads or writes it.  It owns the command's whole process
tree (:mod:`highlander._commands.tree`: own session, subreaper, death signal, guard)
and ends all of it, group first and then any other descendant, when the
command exits, when the wrapper gets SIGINT, SIGTERM, SIGHUP or SIGQUIT
(forwarded to the group first; SIGUSR1, SIGUSR2 and SIGWINCH go to the
command only), and when its reign ends.

When a successor asks, the group gets ``--on-save-signal`` (default
SIGTERM).  While the tree winds down the wrapper reports PROGRESS every
:data:`~highlander._commands.tree.HEARTBEAT` seconds (plus one step per line the
command writes to the descriptor named in ``HIGHLANDER_PROGRESS_FD``), so
the successor never takes it for hung; after ``--wind-down`` seconds
(:data:`WIND_DOWN`) whatever is left is SIGKILLed (event ``tree_killed``).
SAVED follows once the tree is gone, with ``{"command": [...],
"exit_status": N}``, and the deposed wrapper exits 0.  Otherwise the
wrapper exits with the command's status (128 + N for a command ended by
signal N).  The command finds the predecessor's handoff (JSON) in
``HIGHLANDER_HANDOFF`` and the reign's generation in
``HIGHLANDER_GENERATION``.  docs/mcp.md has the table of exit statuses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from highlander._commands.command_name import command_app
from highlander._commands.tree import Ending, Tree, become_subreaper
from highlander._commands.tree_record import Recorder, end_left_over, tree_path
from highlander._core.deadlines import Timeouts
from highlander._core.errors import ConfigurationError, HighlanderError
from highlander._ending import leave_process
from highlander._highlander import Highlander
from highlander._host.descendants import readable
from highlander._host.event_log import Event, EventLog
from highlander._host.log import flush
from highlander._host.termination import KILL_WAIT
from highlander._shell.progress import Progress

PROGRESS_VAR = "HIGHLANDER_PROGRESS_FD"
HANDOFF_VAR = "HIGHLANDER_HANDOFF"
GENERATION_VAR = "HIGHLANDER_GENERATION"
#: Signals that ask the wrapper to end: forwarded to the group, then the tree is ended.
TERMINATING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
FORWARDED = (*TERMINATING, signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH)
#: Default ``--wind-down``: how long the tree has to exit before it is SIGKILLed.
WIND_DOWN = 30.0
#: The longest ``--wind-down``: a successor waits at most its save ceiling, and
#: killing what is left (and the guard) may take up to twice KILL_WAIT more.
MAX_WIND_DOWN = Timeouts().ceiling - 2 * KILL_WAIT


def default_app(argv: Sequence[str]) -> str:
    """Name a wrapped command after what it runs, never after its launcher alone.

    ``npx -y @scope/server-files@1.2`` is ``server-files``, ``node
    …/filesystem/dist/index.js`` is ``filesystem-<hash>``: the rules and
    their table are in :mod:`highlander._commands.command_name` and docs/mcp.md.
    """
    return command_app(argv)


def exit_status(returncode: int) -> int:
    """The shell convention: 128 + N for a process ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Wrapper:
    """One wrapped command: its tree, its record, and the succession bookkeeping."""

    def __init__(self, argv: Sequence[str], save_signal: int, wind_down: float) -> None:
        self.argv = list(argv)
        self.save_signal = save_signal
        self.wind_down = wind_down
        self.tree: Tree | None = None
        self.recorder: Recorder | None = None
        self.events: EventLog | None = None
        #: The save in flight, if any: heartbeats and the command's lines go to it.
        self.progress: Progress | None = None
        #: The reign is ending through Highlander (a save, on_deposed): it leaves the process.
        self.leaving = threading.Event()
        #: The terminating signal the wrapper got, if any, and whether the group had it.
        self.signalled: int | None = None
        self.forwarded = False
        self._ending: Ending | None = None
        self._end_lock = threading.Lock()
        self.read_end, self.write_end = os.pipe()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)

    def start(self, handle: Highlander, record: str | None) -> None:
        """Spawn the command's tree with the progress descriptor and the handoff; record it."""
        env = {
            **os.environ,
            PROGRESS_VAR: str(self.write_end),
            GENERATION_VAR: str(handle.generation),
            HANDOFF_VAR: json.dumps(handle.handoff),
        }
        with self._end_lock:  # a save that came first must not find half a tree
            try:
                if self._ending is not None:
                    return  # the reign ended before the command started: never start it
                self.tree = Tree.spawn(self.argv, env, (self.write_end,))
            finally:
                os.close(self.write_end)
            self.recorder = Recorder(self.tree, record, handle.generation)
            self.recorder.start()
        threading.Thread(target=self._pump_progress, name="highlander-run", daemon=True).start()

    def _pump_progress(self) -> None:
        # Drained always, so a chatty command never blocks on a full pipe.
        with os.fdopen(self.read_end, "rb", buffering=0) as lines:
            for line in lines:
                self._beat(line.decode(errors="replace").strip()[:1024])

    def _beat(self, note: str) -> None:
        progress = self.progress
        if progress is not None:
            progress.advance(note)

    def forward(self, signum: int, _frame: Any) -> None:
        """Signal handler: pass the signal on; a terminating one also ends the tree."""
        tree = self.tree
        if signum not in TERMINATING:
            if tree is not None:
                tree.signal_leader(signum)
            return
        self.signalled = signum
        if tree is not None:
            tree.signal_group(signum)
            self.forwarded = True
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_write, b"!")

    def supervise(self) -> Ending:
        """Wait until the command exits or a terminating signal comes; end the tree."""
        tree = self.tree
        if tree is None:
            return self.end("the reign ended before the command started", None)
        while self.signalled is None and not tree.exited():
            readable([tree.pidfd, self._wake_read], None)
        signum = self.signalled
        why = f"the wrapper got {signal.Signals(signum).name}" if signum else ""
        if signum is None:
            ending = self.end("the command exited", None)
        elif not self.forwarded:  # it came before the tree existed
            ending = self.end(why, signum)
        else:
            ending = self.end(why, None, signalled=True)
        tree.close()  # this thread waited on its pidfd: the tree has ended (self.end)
        return ending

    def end(self, why: str, signum: int | None, *, signalled: bool = False) -> Ending:
        """End the tree once, whichever thread asks first; later callers get the same result."""
        with self._end_lock:
            if self._ending is not None:
                return self._ending
            tree, recorder = self.tree, self.recorder
            if tree is None or recorder is None:
                self._ending = Ending(0, False, 0, 0.0)  # nothing ran, and nothing will
                return self._ending
            recorder.stop()
            ending = tree.end(signum, self.wind_down, self._beat, group_signalled=signalled)
            recorder.discard()
            self._report(ending, why)
            self._ending = ending
            return ending

    def _report(self, ending: Ending, why: str) -> None:
        if self.events is None:
            return
        if ending.forced:
            self.events.emit(
                Event.TREE_KILLED,
                pgid=self.tree.pgid if self.tree else None,
                reason=f"still running {self.wind_down:g} s (--wind-down) after {why}",
            )
        self.events.emit(
            Event.COMMAND_EXITED,
            exit_status=exit_status(ending.returncode),
            forced=ending.forced,
            leftovers=ending.leftovers,
            duration_ms=int(ending.seconds * 1000),
            reason=why,
        )

    def save(self, progress: Progress) -> dict[str, Any]:
        """The save hook: end the tree, reporting progress until it is gone."""
        self.leaving.set()
        self.progress = progress
        name = signal.Signals(self.save_signal).name
        progress.advance(f"sent {name} to the process group of {self.argv[0]}")
        ending = self.end("a save was requested", self.save_signal)
        return {"command": self.argv, "exit_status": exit_status(ending.returncode)}

    def deposed(self) -> None:
        """The reign ended (a succession, a stop, orphaned): end the tree if need be; exit 0."""
        self.leaving.set()
        self.end("the reign ended", self.save_signal)
        leave_process()


def check_wind_down(seconds: float) -> float:
    """``seconds`` if it is a usable ``--wind-down``; else :class:`ConfigurationError`."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(f"--wind-down must be a number of seconds, got {seconds!r}")
    if not 0 < seconds <= MAX_WIND_DOWN:
        raise ConfigurationError(
            f"--wind-down is {seconds:g} s: give more than 0 and at most {MAX_WIND_DOWN:g} s "
            f"(a successor waits at most {Timeouts().ceiling:g} s for a save)"
        )
    return float(seconds)


def run(
    argv: Sequence[str],
    *,
    save_signal: int = signal.SIGTERM,
    app: str | None = None,
    project: str | None = None,
    runtime_dir: str | None = None,
    wind_down: float | None = None,
) -> int:
    """Hold the project (or run as a duplicate), run ``argv``, and return the exit status.

    ``wind_down``: seconds the tree has to exit (default :data:`WIND_DOWN`).
    Call it from the thread that is to own the tree for its whole life (the
    CLI's main thread): the command's death signal follows that thread.
    """
    limit = check_wind_down(WIND_DOWN if wind_down is None else wind_down)
    wrapper = Wrapper(argv, save_signal, limit)
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
    settings = handle.settings
    assert settings is not None
    wrapper.events = settings.events
    record = None
    if handle.is_holder:  # a duplicate (OBSERVE/WARN) leaves the holder's record alone
        end_left_over(settings)
        record = tree_path(settings)
    become_subreaper()
    for signum in FORWARDED:
        signal.signal(signum, wrapper.forward)
    try:
        wrapper.start(handle, record)
    except OSError as exc:
        handle.release()
        sys.stderr.write(f"highlander: cannot run {argv[0]}: {exc.strerror}\n")
        return 127
    ending = wrapper.supervise()
    if wrapper.leaving.is_set():
        # The reign is ending through Highlander: on_deposed leaves the process (status 0).
        threading.Event().wait(settings.timeouts.exit_grace + settings.timeouts.request)
    handle.release()
    return exit_status(ending.returncode)
