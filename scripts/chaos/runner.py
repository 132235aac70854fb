"""Running a chaos schedule against a :class:`Lab`, and settling it afterwards.

Each step's kind is fixed by the schedule (scripts/chaos/schedule.py); its
target ("the holder", "a newcomer in flight") is resolved when it runs, from
what the harness has seen by then.  Signals due later (SIGCONT, or the fate
of a newcomer that stopped itself) are resolved against the process the
earlier step acted on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from highlander._host.waiting import BLOCKING, run_blocking
from highlander._shell.control import query_status
from scripts.chaos import faults, rendezvous
from scripts.chaos.log import EventTail
from scripts.chaos.process import Proc
from scripts.chaos.procs import Lab
from scripts.chaos.report import CONVERGENCE_BOUND
from scripts.chaos.schedule import STARTS, Step, child_config
from scripts.chaos.starve import Starver

#: Running Highlander processes at most; a start waits (bounded) below this.
#: (Stopped ones do not count: a newcomer left stopped must not throttle the run.)
MAX_LIVE = 10
MAX_BYSTANDERS = 3
#: Operator interventions the settling phase may make before giving up.
MAX_INTERVENTIONS = 3
#: The newcomer the settling phase starts.
SETTLER = {"save": "normal", "steps": 1, "step_delay": 0.01}


class Runner:
    """Runs a schedule against a :class:`Lab` and settles it."""

    def __init__(
        self,
        lab: Lab,
        tail: EventTail,
        say: Callable[[str], None],
        *,
        disk: bool = False,
        also: tuple[EventTail, ...] = (),
    ) -> None:
        self.lab, self.tail, self.say = lab, tail, say
        #: Other logs to read as the run goes (the project's own event log).
        self.also = also
        #: Whether the runtime dir is our tmpfs (else fill_disk/free_disk are no-ops).
        self.disk = disk
        #: Step index -> the process that step stopped (SIGCONT later, maybe).
        self.stopped_by: dict[int, Proc] = {}
        #: Step index -> the newcomer that step started to stop itself before its ACK.
        self.stuck: dict[int, Proc] = {}
        #: Step index -> the newcomer that step started to fork a worker once holding.
        self.forkers: dict[int, Proc] = {}
        #: (forking holder, when the harness's SIGKILL to it was sent).
        self.fork_kills: list[tuple[Proc, int]] = []
        #: Newcomers started with another XDG_RUNTIME_DIR and TMPDIR (``switch_location``).
        self.switched: list[Proc] = []
        #: (before, after, what) around each wipe or plant at the lock file: from then on
        #: the holder's lock file is not at the rendezvous path any more.
        self.losses: list[tuple[int, int, str]] = []
        self.noops: Counter[str] = Counter()
        self.harness: Counter[str] = Counter()
        self.notes: list[str] = []
        #: The holder kept off the CPU (``starve_holder``), until ``feed_holder``.
        self.starver = Starver()
        #: (step, kind, what happened, monotonic ns), for --keep.
        self.log: list[tuple[int, str, str, int]] = []

    # -- the schedule -------------------------------------------------------------

    def run(self, schedule: list[Step]) -> None:
        for step in schedule:
            for what, origin in step.due:
                self.follow_up(what, origin)
            note = self.act(step)
            self.log.append((step.index, step.kind, note, time.monotonic_ns()))
            self.poll()
            if step.index % 50 == 0 or step.index == len(schedule) - 1:
                self.say(f"step {step.index}: {step.kind}: {note}")
            if step.index < len(schedule) - 1:
                self.lab.wait_until(self.meanwhile, step.gap)

    def meanwhile(self) -> bool:
        """Called every 20 ms between steps, to act on what a child just said (never done)."""
        return False

    def act(self, step: Step) -> str:
        """Do what ``step`` says; return what happened, in a few words."""
        kind, params = step.kind, step.params
        if kind in STARTS:
            env = self.switch(step.index) if kind == "switch_location" else {}
            proc = self.start(step.index, params, env=env)
            if kind == "start_stuck":
                self.stuck[step.index] = proc
            elif kind == "fork_worker":
                self.forkers[step.index] = proc
            elif env:
                self.switched.append(proc)
            return f"started pid {proc.pid}{' (XDG_RUNTIME_DIR, TMPDIR elsewhere)' * bool(env)}"
        actions: dict[str, Callable[[Step], str]] = {
            "storm": self.storm,
            "sigkill_holder": self.signal_holder,
            "sigstop_holder": self.signal_holder,
            "sigkill_newcomer": self.signal_newcomer,
            "sigstop_newcomer": self.signal_newcomer,
            "legacy_lock": self.legacy_lock,
            "pid_reuse": self.pid_reuse,
            "wipe_runtime_dir": self.take_rendezvous,
            "plant": self.take_rendezvous,
            "starve_holder": self.starve,
            "feed_holder": self.starve,
        }
        if kind in actions:
            return actions[kind](step)
        if kind in ("fill_disk", "free_disk") and not self.disk:
            self.noops[f"{kind}: no tmpfs (the mount was refused)"] += 1
            return "no tmpfs"
        damage: dict[str, Callable[..., str]] = {
            "delete_socket": faults.delete_socket,
            "replace_socket": faults.replace_socket,
            "clear_socket_dir": faults.clear_socket_dir,
            "corrupt_state": faults.corrupt_state,
            "fill_disk": faults.fill_disk,
            "free_disk": faults.free_disk,
            "clear_plant": rendezvous.clear_plant,
        }
        note = damage[kind](self.lab.paths, **params)
        if " not " in note:  # "state not corrupted (...): Is a directory", ...
            self.noops[f"{kind}: {note.split(' (')[0]}"] += 1
        return note

    def storm(self, step: Step) -> str:
        """``count`` newcomers back to back (past MAX_LIVE: that is the storm)."""
        count = step.params["count"]
        pids = [self.start(step.index, step.params, wait=False).pid for _ in range(count)]
        return f"{count} newcomers started, pids {pids[0]} .. {pids[-1]}"

    def switch(self, index: int) -> dict[str, str]:
        """Another XDG_RUNTIME_DIR and TMPDIR (a login made /run/user/UID appear), same
        HIGHLANDER_RUNTIME_DIR: the newcomer must still meet the holder."""
        elsewhere = self.lab.root / "switched" / f"step-{index}"
        elsewhere.mkdir(parents=True, mode=0o700)
        return {"XDG_RUNTIME_DIR": str(elsewhere), "TMPDIR": str(elsewhere)}

    def take_rendezvous(self, step: Step) -> str:
        """A wipe, or a plant: the project's own log is read first (a wipe deletes it)."""
        self.poll()
        before = time.monotonic_ns()
        if step.kind == "wipe_runtime_dir":
            note = rendezvous.wipe_runtime_dir(self.lab.paths, **step.params)
            lost = True
        else:
            note = rendezvous.plant(self.lab.paths, **step.params)
            lost = step.params["target"] == "lock" and " not " not in note
        if lost:
            self.losses.append((before, time.monotonic_ns(), f"step {step.index}: {note}"))
        if " not " in note:
            self.noops[f"plant: {note.split(':')[0]}"] += 1
        return note

    def poll(self) -> None:
        for tail in (self.tail, *self.also):
            tail.poll()

    def legacy_lock(self, step: Step) -> str:
        lab, index = self.lab, step.index
        dead = step.params["variant"] == "dead"
        return faults.write_legacy(
            lab.legacy, lab.dead_pid(index) if dead else self.bystander(index).pid
        )

    def pid_reuse(self, step: Step) -> str:
        pid = self.bystander(step.index, new=True).pid
        return faults.plant_pid(self.lab.paths, pid, **step.params)

    def follow_up(self, what: str, origin: int) -> None:
        """A signal due now to what step ``origin`` stopped or started."""
        if origin in self.forkers:
            self.kill_forker(self.forkers[origin])
        elif origin in self.stuck:
            proc = self.stuck[origin]
            if what == "SIGCONT" and proc.self_stop_ns is None:
                # Not at its ACK yet (or never got there): the settling resumes it if it stops.
                self.noops["start_stuck SIGCONT: not stopped (yet)"] += 1
                return
            self._signal(proc, signal.Signals[what], counted=f"{what} (stuck newcomer)")
        elif origin in self.stopped_by:
            self._signal(self.stopped_by[origin], signal.SIGCONT)

    def kill_forker(self, proc: Proc) -> None:
        """SIGKILL a holder that forked a worker (given up to 2 s to hold and fork)."""
        self.lab.wait_until(lambda: proc.worker is not None or not proc.alive, 2.0)
        if proc.worker is None or not proc.believes:
            self.noops["fork_worker SIGKILL: no worker yet, or no longer the holder"] += 1
            return
        self._signal(proc, signal.SIGKILL, counted="SIGKILL (holder with a forked worker)")
        self.fork_kills.append((proc, time.monotonic_ns()))

    def starve(self, step: Step) -> str:
        """``starve_holder`` (the holder off the CPU) or its ``feed_holder``."""
        starver = self.starver
        feed = step.kind == "feed_holder"
        note = starver.feed() if feed else starver.starve(self.lab.holder())
        if not note.startswith("pid "):
            self.noops[f"{step.kind}: {note}"] += 1
        return note

    def signal_holder(self, step: Step) -> str:
        holder = self.lab.holder()
        if holder is None or (step.kind == "sigstop_holder" and holder.stopped):
            self.noops[f"{step.kind}: no running holder"] += 1
            return "no holder"
        signum = signal.SIGKILL if step.kind == "sigkill_holder" else signal.SIGSTOP
        self._signal(holder, signum)
        if signum == signal.SIGSTOP:
            self.stopped_by[step.index] = holder
        return f"{signum.name} pid {holder.pid}"

    def signal_newcomer(self, step: Step) -> str:
        """SIGKILL or SIGSTOP a child that has not reported ``ready``, whatever its phase."""
        self.lab.pump(0)
        stop = step.kind == "sigstop_newcomer"
        in_flight = [p for p in self.lab.live_children() if p.ready is None]
        in_flight = [p for p in in_flight if not (stop and p.stopped)]
        if not in_flight:
            self.noops[f"{step.kind}: no newcomer in flight"] += 1
            return "no newcomer in flight"
        proc = in_flight[min(int(step.params["pick"] * len(in_flight)), len(in_flight) - 1)]
        signum = signal.SIGSTOP if stop else signal.SIGKILL
        self._signal(proc, signum, counted=f"{signum.name} (newcomer in flight)")
        if stop:
            self.stopped_by[step.index] = proc
        return f"{signum.name} pid {proc.pid} (started at step {proc.step})"

    def start(
        self,
        index: int,
        params: dict[str, Any],
        *,
        wait: bool = True,
        env: dict[str, str] | None = None,
    ) -> Proc:
        lab = self.lab

        def running() -> int:
            return sum(not p.stopped for p in lab.live_children())

        if wait and not lab.wait_until(lambda: self.meanwhile() or running() < MAX_LIVE, 10.0):
            self.notes.append(f"step {index}: {MAX_LIVE} processes still running after 10 s")
        return lab.start_child(index, child_config(params, lab.files()), **(env or {}))

    def bystander(self, index: int, *, new: bool = False) -> Proc:
        alive = self.lab.bystanders()
        if alive and not new:
            return alive[-1]
        while len(alive) >= MAX_BYSTANDERS:
            self._signal(alive.pop(0), signal.SIGKILL, counted="SIGKILL (bystander retired)")
        return self.lab.start_bystander(index)

    def _signal(self, proc: Proc | None, signum: signal.Signals, counted: str = "") -> None:
        if proc is not None and self.lab.send(proc, signum):
            self.harness[counted or signum.name] += 1

    # -- settling -------------------------------------------------------------------

    def undo(self, schedule: list[Step]) -> None:
        """What the settling undoes first: promised SIGCONTs, every newcomer that stopped
        itself, the full disk and a directory at the socket path."""
        note = self.starver.feed()
        self.log.append((len(schedule), "feed_holder", note, time.monotonic_ns()))
        for index, proc in self.stopped_by.items():
            step = schedule[index]
            if step.kind == "sigstop_newcomer" or step.params.get("resume_after") is not None:
                self._signal(proc, signal.SIGCONT)
        self.resume_stuck()
        if self.disk:
            note = faults.free_disk(self.lab.paths)
            self.log.append((len(schedule), "free_disk", note, time.monotonic_ns()))
        note = faults.clear_socket_dir(self.lab.paths)
        self.log.append((len(schedule), "clear_socket_dir", note, time.monotonic_ns()))
        for note in rendezvous.clear_plants(self.lab.paths):
            self.log.append((len(schedule), "clear_plant", note, time.monotonic_ns()))
        self.resume_lost()

    def resume_lost(self) -> None:
        """SIGCONT every stopped holder whose rendezvous was taken since it held: it steps
        down when it runs again (nobody else would ever resume or end it).  Also when the
        loss came just before the stop: it had not noticed yet (seed 1: 32 ms)."""
        for proc in self.lab.live_children():
            stops = [before for name, before, _ in proc.signals if name == "SIGSTOP"]
            lost = stops and any(after > proc.spawn_ns for _, after, _ in self.losses)
            if proc.stopped and proc.believes and lost:
                self._signal(proc, signal.SIGCONT, counted="SIGCONT (stopped across a wipe)")

    def resume_stuck(self) -> None:
        """SIGCONT every newcomer that stopped itself before its ACK, and every
        incumbent before its move (at the settling and during it: one still in
        flight may reach its ACK, or its move, and stop only then)."""
        for proc in self.lab.live_children():
            stopped_itself = proc.self_stop_ns is not None or proc.move_stop_ns is not None
            if stopped_itself and proc.stopped:
                at_ack = proc.self_stop_ns is not None
                counted = "SIGCONT (stuck " + ("newcomer)" if at_ack else "incumbent at its move)")
                self._signal(proc, signal.SIGCONT, counted=counted)

    def settle(self, schedule: list[Step]) -> tuple[float | None, int]:
        """Undo what was promised, start one newcomer, time until one holder answers."""
        lab, began = self.lab, time.monotonic()
        self.undo(schedule)
        latest = self.start(len(schedule), SETTLER)
        self.say(f"settling: started pid {latest.pid}")
        interventions, deadline = 0, began + CONVERGENCE_BOUND + 10
        while time.monotonic() < deadline:
            lab.pump(0.02)
            self.poll()
            self.resume_stuck()
            if self.converged():
                return time.monotonic() - began, interventions
            in_flight = [p for p in lab.live_children() if not p.believes]
            # Only a newcomer that gave up calls for the operator; one that held and
            # handed over (to a newcomer still in flight from the schedule) did not.
            gave_up = not latest.alive and latest.ready is None
            if not gave_up or in_flight or interventions >= MAX_INTERVENTIONS:
                continue
            # The newcomer gave up (the holder cannot be verified, so it is never
            # signalled): do what the error message tells an operator to do.
            interventions += 1
            for proc in lab.children():
                if proc.believes:
                    self._signal(proc, signal.SIGKILL, counted="SIGKILL (operator)")
            self.notes.append(f"settling: operator stopped the holder ({latest.last_error()})")
            latest = self.start(len(schedule), SETTLER)
        return None, interventions

    def converged(self) -> bool:
        """Exactly one live process believes it holds, and it answers a signed STATUS."""
        believers = [p for p in self.lab.children() if p.believes]
        if len(believers) != 1 or believers[0].stopped:
            return False
        found = run_blocking(query_status(self.lab.refresh(), BLOCKING))
        return found.reply is not None and found.reply.pid == believers[0].pid

    def drain(self, timeout: float = 15.0) -> None:
        """Let in-flight newcomers finish (bounded), resuming any that stops itself."""
        lab = self.lab

        def done() -> bool:
            self.resume_stuck()
            return len(lab.live_children()) <= 1

        if not lab.wait_until(done, timeout):
            alive = ", ".join(
                f"pid {p.pid} (step {p.step}, {'stopped' if p.stopped else 'running'}, "
                f"{'holds' if p.believes else 'deposed' if p.deposed else 'no verdict'})"
                for p in lab.live_children()
            )
            self.notes.append(f"alive after the drain: {alive}")

    def cli_status(self) -> dict[str, Any] | None:
        """`highlander status --json`, as an operator would run it."""
        argv = [sys.executable, "-m", "highlander.cli", "status", "--json", "--app", "chaos"]
        try:
            done = subprocess.run(
                argv, env=self.lab.kids.env(), capture_output=True, timeout=30, check=False
            )
            data: dict[str, Any] = json.loads(done.stdout)
        except (subprocess.TimeoutExpired, ValueError) as exc:
            self.notes.append(f"highlander status failed: {exc}")
            return None
        if not data.get("answers"):
            # Converged at the settling, then lost again (a newcomer in flight, say).
            self.notes.append(f"at the end nobody answers: `highlander status` says {data}")
        return data
