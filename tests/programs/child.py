"""A Highlander user process for the tests, configured by the HL_CHILD JSON env var.

It writes nothing to stdout (the tests check that); it reports to the test
through the pipe named by HL_READY_FD and appends acquire/release lines with
a CLOCK_MONOTONIC timestamp to the witness file.

Options the chaos harness (scripts/chaos/main.py) adds: ``event_mirror`` (a path:
every event the library emits is also appended there, so a wiped or planted
event log loses no evidence), ``check_loop`` (seconds) with ``check_witness``
(a path: once holding, ``check_current()`` in a loop, ``pass|fail PID BEGIN
END`` lines), and ``fork_worker`` (once holding, fork a worker that outlives
the holder; it reports what it kept and checks ``check_current()`` too).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from typing import Any

import etcd_faults  # beside this script (its directory is sys.path[0])

from highlander import Highlander, Progress, Timeouts

cfg: dict[str, Any] = json.loads(os.environ["HL_CHILD"])
ready_fd = int(os.environ.get("HL_READY_FD", "-1"))
state = {"counter": 0}


def report(**fields: Any) -> None:
    if ready_fd >= 0:
        os.write(ready_fd, (json.dumps({"pid": os.getpid(), **fields}) + "\n").encode())


def witness(what: str, generation: int) -> None:
    path = cfg.get("witness")
    if path:
        line = f"{what} {os.getpid()} {generation} {time.monotonic_ns()}\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, line.encode())
        os.close(fd)


def save_witness(what: str) -> None:
    path = cfg.get("save_witness")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{what} {os.getpid()} {time.monotonic_ns()}\n".encode())
        os.close(fd)


def save(progress: Progress) -> dict[str, Any]:
    """Save behaviours: normal (steps), stall (stops advancing), forever (never ends),
    until (advances until the file named by ``until`` exists)."""
    save_witness("start")
    try:
        return _save(progress)
    finally:
        save_witness("end")


def _save(progress: Progress) -> dict[str, Any]:
    steps = int(cfg.get("steps", 3))
    behaviour = cfg.get("save", "normal")
    report(event="saving")
    i = 0
    while behaviour == "forever" or i < steps or _gated(behaviour):
        time.sleep(float(cfg.get("step_delay", 0.01)))
        progress.advance(f"step {i}", done=min(i + 1, steps), total=steps)
        i += 1
    if behaviour == "stall":
        time.sleep(3600)
    if behaviour == "raise":
        raise ValueError(f"disk on fire in {os.getpid()}")
    if behaviour == "raise_group":
        raise ExceptionGroup("unhandled errors in a TaskGroup", [OSError(28, "No space left")])
    return {"counter": state["counter"], "blob": cfg.get("blob", ""), "from": os.getpid()}


def _gated(behaviour: str) -> bool:
    return behaviour == "until" and not os.path.exists(cfg["until"])


async def async_save(progress: Progress) -> dict[str, Any]:
    save_witness("start")
    try:
        return await _async_save(progress)
    finally:
        save_witness("end")


async def _async_save(progress: Progress) -> dict[str, Any]:
    import anyio

    for i in range(int(cfg.get("steps", 3))):
        await anyio.sleep(float(cfg.get("step_delay", 0.01)))
        progress.advance(f"step {i}")
    if cfg.get("save") == "stall":
        await anyio.sleep(3600)
    if cfg.get("save") == "raise":
        raise ValueError(f"disk on fire in {os.getpid()}")
    if cfg.get("save") == "raise_group":

        async def write_index() -> None:
            raise OSError(28, "No space left")

        async with anyio.create_task_group() as tg:  # the usual way a group reaches a hook
            tg.start_soon(write_index)
    return {"counter": state["counter"], "from": os.getpid()}


def mirror_events() -> None:
    """``event_mirror``: append every event the library emits to a file outside the
    runtime directory too (one ``write`` on an ``O_APPEND`` descriptor, before the
    library's own log write, which a wipe or a planted FIFO may lose)."""
    path = cfg.get("event_mirror")
    if not path:
        return
    from highlander._host.event_log import EventLog

    real = EventLog._write

    def _write(self: EventLog, event: Any, record: dict[str, Any]) -> dict[str, Any]:
        if self.path is not None:  # the project's log, not a quiet helper's
            line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        return real(self, event, record)

    EventLog._write = _write  # type: ignore[method-assign]


def check_once(hl: Highlander) -> None:
    """One ``check_current()``, stamped before and after: ``pass|fail PID BEGIN END``."""
    from highlander import Deposed

    began = time.monotonic_ns()
    try:
        hl.check_current()
        what = "pass"
    except Deposed:
        what = "fail"
    ended = time.monotonic_ns()
    path = cfg.get("check_witness")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, f"{what} {os.getpid()} {began} {ended}\n".encode())
        finally:
            os.close(fd)


def start_check_loop(hl: Highlander) -> None:
    """``check_loop``: once holding, ``check_current()`` every ``check_loop`` seconds."""
    period = float(cfg.get("check_loop", 0))
    if period <= 0:
        return
    import threading

    def loop() -> None:
        while True:
            check_once(hl)
            time.sleep(period)

    threading.Thread(target=loop, name="child-check-loop", daemon=True).start()


#: How long a forked worker lives at most (the test ends it sooner, by pid).
WORKER_LIFE = 600.0


def fork_worker(hl: Highlander) -> None:
    """``fork_worker``: fork a worker (as a pre-fork server would) that outlives us.

    The worker reports what it kept of the rendezvous (descriptors of the lock
    file, listening sockets, ``is_holder``), closes the report pipe, and then
    calls ``check_current()`` every 0.5 s (into ``check_witness``) until
    :data:`WORKER_LIFE` is over.  It never returns into this program.
    """
    if not cfg.get("fork_worker") or not hl.is_holder:
        return
    import warnings

    assert hl.settings is not None
    try:
        lock = os.stat(hl.settings.paths.lock, follow_symlinks=False)
    except OSError:
        lock = None
    with warnings.catch_warnings():  # 3.12+: fork() in a multi-threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        return
    code = 0
    try:
        forked = time.monotonic_ns()
        held = hl.is_holder
        report(event="worker", parent=os.getppid(), forked_ns=forked, is_holder=held, **kept(lock))
        os.close(ready_fd)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
        until = time.monotonic() + WORKER_LIFE
        while time.monotonic() < until:
            check_once(hl)
            time.sleep(0.5)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)


def kept(lock: os.stat_result | None) -> dict[str, int]:
    """Descriptors of this process that refer to the lock file ``lock`` or listen."""
    import socket

    copies = listening = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if lock is not None and (st.st_dev, st.st_ino) == (lock.st_dev, lock.st_ino):
            copies += 1
        if stat.S_ISSOCK(st.st_mode):
            try:
                with socket.socket(fileno=os.dup(fd)) as sock:
                    listening += bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
            except OSError:
                continue
    return {"lock_copies": copies, "listening": listening}


def options() -> dict[str, Any]:
    opts: dict[str, Any] = {"app": cfg.get("app", "child"), "on_save": save}
    for key in (
        "mode",
        "thrash_limit",
        "thrash_window",
        "token",
        "legacy_lock",
        "exit_when_orphaned",
    ):
        if key in cfg:
            opts[key] = cfg[key]
    if "timeouts" in cfg:
        opts["timeouts"] = Timeouts(**cfg["timeouts"])
    if cfg.get("witness_deposed", True):

        def deposed() -> None:
            witness("release", current["generation"])
            report(event="deposed", why=why_deposed())
            if cfg.get("hang_when_deposed"):
                time.sleep(3600)
            gate = cfg.get("linger_until")  # a file: on_deposed lingers until it exists
            deadline = time.monotonic() + 60  # a hang guard
            while gate and not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            os._exit(0)

        opts["on_deposed"] = deposed
    if cfg.get("warn_callback"):
        opts["on_duplicate"] = lambda record: report(event="on_duplicate", holder=record.pid)
    return opts


current: dict[str, Any] = {"generation": 0, "hl": None}


def why_deposed() -> str:
    """What ``check_current()`` says now (it names how the reign ended)."""
    from highlander import Deposed

    hl = current["hl"]
    if hl is None:
        return ""
    try:
        hl.check_current()
    except Deposed as exc:
        return str(exc)
    return "check_current() passed"


def stop_after_event() -> None:
    """``stop_after_event``: right after the library logged that event (``"acked"``: as
    an incumbent that has just committed a handover, before it lets go of the lock),
    report ``stopped_after`` and stop with a real SIGSTOP, from the thread that logged
    it (the test resumes or ends it)."""
    name = cfg.get("stop_after_event")
    if not name:
        return
    from highlander._host.event_log import EventLog

    real = EventLog._write

    def _write(self: EventLog, event: Any, record: dict[str, Any]) -> dict[str, Any]:
        written = real(self, event, record)
        if record.get("event") == name and self.path is not None:
            report(event="stopped_after", what=name)
            etcd_faults.stop_here()  # before this thread lets go of the lock
        return written

    EventLog._write = _write  # type: ignore[method-assign]


def pause_before_ack() -> None:
    """As a newcomer, between taking SAVED's descriptors and sending ACK_SUCCESSION:
    ``{"delay": s}`` sleeps (a slow newcomer), ``{"stop": true}`` reports
    ``before_ack`` and stops itself with a real SIGSTOP (the test resumes it);
    ``"once": true`` only on the first handover it tries."""
    how = cfg.get("before_ack")
    if not how:
        return
    import importlib

    try:
        module = importlib.import_module("highlander._shell.handover")
    except ImportError:  # the code before the commit point existed
        module = importlib.import_module("highlander._shell.newcomer")
    adopt = module.adopt_handover

    used = []

    def pause() -> None:
        if how.get("once") and used:
            return
        used.append(True)
        if "delay" in how:
            time.sleep(float(how["delay"]))
        if how.get("stop"):
            report(event="before_ack")
            etcd_faults.stop_here()

    def slow_adopt(*args: Any, **kwargs: Any) -> Any:
        taken = adopt(*args, **kwargs)
        pause()
        return taken

    module.adopt_handover = slow_adopt
    if os.environ.get("HIGHLANDER_BACKEND", "").startswith("etcd"):
        # Over etcd nothing is adopted: the pause is between SAVED and the ACK.
        etcd = importlib.import_module("highlander._shell.etcd_takeover")
        conclude = etcd.conclude

        async def slow_conclude(*args: Any, **kwargs: Any) -> Any:
            pause()
            return await conclude(*args, **kwargs)

        etcd.conclude = slow_conclude


def reign(hl: Highlander) -> None:
    state["counter"] = (hl.handoff or {}).get("counter", 0) + 1
    current["generation"] = hl.generation
    current["hl"] = hl
    if hl.is_holder:
        witness("acquire", hl.generation)
    report(
        event="ready",
        generation=hl.generation,
        handoff=hl.handoff,
        outcome=hl.outcome.value if hl.outcome else None,
        is_holder=hl.is_holder,
        counter=state["counter"],
    )
    if hl.is_holder:
        start_check_loop(hl)
        fork_worker(hl)


def apply_limits_and_faults() -> None:
    """Test-only conditions: a low descriptor limit, injected faults in the serving side."""
    if "nofile" in cfg:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(cfg["nofile"]), hard))
    fault = cfg.get("fault")
    if fault == "conversation-once":
        # The first conversation fails with an error no handler expects (a bug's
        # stand-in); every later one works.
        from highlander._host.settings import Settings

        real_key = Settings.key
        failed: list[bool] = []

        def key(self: Settings) -> bytes:
            if not failed:
                failed.append(True)
                raise RuntimeError("injected fault in the first conversation")
            return real_key(self)

        Settings.key = key  # type: ignore[method-assign]
    elif fault == "accept":
        # accept() on the listener fails with an error no back-off can cure.
        import errno
        import socket

        def accept(self: socket.socket) -> tuple[socket.socket, object]:
            raise OSError(errno.EINVAL, "injected: the listener is broken")

        socket.socket.accept = accept  # type: ignore[method-assign]


def hook_for(api: str) -> Any:
    """The save hook: the API's own kind, unless ``"hook": "sync"|"async"`` says otherwise."""
    return async_save if cfg.get("hook", api) == "async" else save


def report_error(exc: BaseException) -> None:
    """``"report_errors": true``: tell the test which error ended the claim."""
    report(event="error", type=type(exc).__name__, message=str(exc))


def main() -> None:
    mirror_events()
    stop_after_event()
    pause_before_ack()
    etcd_faults.install(cfg, report)
    apply_limits_and_faults()
    if cfg.get("async"):
        import anyio

        from highlander import HighlanderError

        async def run() -> None:
            opts = options()
            opts["on_save"] = hook_for("async")
            try:
                async with Highlander(**opts) as hl:
                    reign(hl)
                    await anyio.sleep(float(cfg.get("hold", 30)))
                    if hl.is_holder:
                        witness("release", hl.generation)
            except HighlanderError as exc:
                if not cfg.get("report_errors"):
                    raise
                report_error(exc)
                sys.exit(1)

        anyio.run(run)
        return
    opts = options()
    opts["on_save"] = hook_for("sync")
    if cfg.get("report_errors"):
        from highlander import HighlanderError

        try:
            hl = Highlander(**opts).acquire()
        except HighlanderError as exc:
            report_error(exc)
            sys.exit(1)
    else:
        hl = Highlander.ensure_singleton(**opts)
    reign(hl)
    time.sleep(float(cfg.get("hold", 30)))
    if hl.is_holder:
        witness("release", hl.generation)


if __name__ == "__main__":
    main()
    sys.exit(0)
