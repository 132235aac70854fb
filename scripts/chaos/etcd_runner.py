"""Running the etcd chaos schedule: children on simulated hosts, and the cluster's faults.

:class:`EtcdRunner` is the local :class:`~scripts.chaos.runner.Runner` with
three differences.  Every child gets the etcd environment (the run's
cluster, project id and TTL) and the simulated host its step drew.  The
cluster's members are killed or stopped (one at a time, so it keeps its
quorum) and restarted or resumed by the follow-up step.  And the settling
heals the cluster first, then resumes *every* stopped process (a holder
stopped on another host is never signalled by anyone: it must find out by
itself that its lease is gone), and converges when exactly one live holder
passes ``check_current()`` and the holder key in etcd names it, instead of
asking the socket for a STATUS.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import time
import urllib.error
from collections.abc import Callable
from typing import Any

from highlander._etcd.session import HolderValue, holder_key, project_root
from scripts.chaos.etcd_data import DATA_FAULTS, DataFaults, due_now, stopped_now
from scripts.chaos.etcd_schedule import MEMBER_FAULTS, child_params
from scripts.chaos.log import EventTail
from scripts.chaos.process import Proc
from scripts.chaos.procs import Lab
from scripts.chaos.runner import Runner
from scripts.chaos.schedule import Step
from tests.support.etcd_cluster import Cluster, Member, post

#: The app every child runs as (scripts/chaos/schedule.py's ``child_config``).
APP = "chaos"
#: How long after the drain the holder has to pass ``check_current()`` again (a hang
#: guard: it checks every 20 ms).
FRESH_PASS_WAIT = 10.0


def holder_key_of(project_id: str) -> bytes:
    """The holder key of the run's project (``HIGHLANDER_ETCD_PREFIX`` left at its default)."""
    return holder_key(project_root(f"{APP}\n{project_id}", {}))


def read_holder(cluster: Cluster, key: bytes) -> tuple[bool, HolderValue | None]:
    """A linearizable range read of ``key``, asking each member in turn.

    ``(True, value)``: a member answered (``value`` is ``None`` when nobody holds);
    ``(False, None)``: none did.
    """
    body: dict[str, object] = {"key": base64.b64encode(key).decode()}
    for endpoint in cluster.endpoints:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            answer = post(endpoint, "/v3/kv/range", body)
            kvs = answer.get("kvs") or []
            if not isinstance(kvs, list) or not kvs:
                return True, None
            return True, HolderValue.decode(base64.b64decode(kvs[0]["value"]))
    return False, None


class Checks:
    """The check log read as it grows: when each pid last *began* a passing check."""

    def __init__(self, path: Any) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.last_pass: dict[int, int] = {}

    def poll(self) -> None:
        """Read the lines appended since the last call."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            what, pid, began, _ = line.split()
            if what == b"pass":
                self.last_pass[int(pid)] = max(int(began), self.last_pass.get(int(pid), 0))

    def passed_since(self, pid: int, ns: int) -> bool:
        """Whether ``pid`` began a passing ``check_current()`` at or after ``ns``."""
        self.poll()
        return self.last_pass.get(pid, -1) >= ns


def host_of(proc: Proc) -> str:
    """The simulated host a child ran on (its configuration names it)."""
    return str((proc.cfg or {}).get("host", "?"))


class EtcdRunner(DataFaults, Runner):
    """Runs an etcd schedule against a :class:`Lab` and a :class:`Cluster`, and settles it."""

    def __init__(
        self,
        lab: Lab,
        tail: EventTail,
        say: Callable[[str], None],
        cluster: Cluster,
        etcd_env: dict[str, str],
        settler: str,
    ) -> None:
        super().__init__(lab, tail, say)
        self.cluster = cluster
        #: HIGHLANDER_BACKEND, HIGHLANDER_PROJECT_ID, HIGHLANDER_ETCD_TTL for every child.
        self.etcd_env = etcd_env
        self.key = holder_key_of(etcd_env["HIGHLANDER_PROJECT_ID"])
        #: The host of the newcomers the settling starts.
        self.settler = settler
        #: Step index -> (how, the member) of the member fault that step made.
        self.member_faults: dict[int, tuple[str, Member]] = {}
        #: Step index -> the newcomer whose ACK is to meet a stopped leader (not there yet).
        self.at_commit: dict[int, Proc] = {}
        #: Step index -> when (monotonic) the leader it stopped at an ACK is resumed.
        self.thaw_at: dict[int, float] = {}
        self.at_move: dict[int, Proc] = {}
        self.unfill_at: dict[int, float] = {}
        #: (began, ended, what) of every member fault (ended: INF-like -1 while on).
        self.fault_spans: list[tuple[int, int, str]] = []
        self.checks = Checks(lab.checks)
        #: When the settling had healed the cluster and resumed everyone.
        self.resumed_ns = 0
        #: Children alive after the drain besides the one holder.
        self.left_behind: list[str] = []
        #: What is wrong with the end state (must be empty), and the holder key then.
        self.final_problems: list[str] = []
        self.final_status: dict[str, Any] | None = None

    # -- children on simulated hosts -----------------------------------------------------

    def start(
        self,
        index: int,
        params: dict[str, Any],
        *,
        wait: bool = True,
        env: dict[str, str] | None = None,
    ) -> Proc:
        """Start a child with the etcd environment, on the host its step drew."""
        host = str(params.get("host", self.settler))
        extra = {**self.etcd_env, "HIGHLANDER_HOST_ID": host, **(env or {})}
        return super().start(index, child_params(params, host), wait=wait, env=extra)

    def storm(self, step: Step) -> str:
        """``count`` newcomers back to back, each on the host the schedule drew for it."""
        hosts = step.params["hosts"]
        pids = [
            self.start(step.index, {**step.params, "host": host}, wait=False).pid for host in hosts
        ]
        return f"{len(pids)} newcomers started on {len(set(hosts))} hosts, pids {pids[0]} .."

    # -- the cluster's faults --------------------------------------------------------------

    def act(self, step: Step) -> str:
        """The cluster's faults here; every other kind as the local runner does it."""
        if step.kind in MEMBER_FAULTS:
            return self.member_fault(step)
        if step.kind in ("etcd_restart", "etcd_resume"):
            return self.member_back(step.params["origin"])
        if step.kind in DATA_FAULTS:
            return self.data_fault(step)
        if step.kind == "etcd_stop_at_commit":
            proc = self.start(step.index, step.params)
            self.at_commit[step.index] = proc
            return f"started pid {proc.pid} (the leader stops at its ACK)"
        return super().act(step)

    def meanwhile(self) -> bool:
        """A newcomer of ``etcd_stop_at_commit`` stopped itself before its ACK: stop the
        leader, then resume it, so the incumbent's move meets a cluster without a leader;
        the leader is resumed ``freeze_s`` later.  And ``etcd_full_at_move``'s moment."""
        self.full_at_move()
        for index in due_now(self.thaw_at):
            note = self.member_back(index)
            self.log.append((index, "etcd_stop_at_commit", note, time.monotonic_ns()))
        for index, proc in stopped_now(self.at_commit, lambda proc: proc.self_stop_ns):
            fault = Step(index, "etcd_stop_leader", {"pick": 0.0}, 0.0, ())
            note = self.member_fault(fault)
            if index in self.member_faults:
                self.thaw_at[index] = time.monotonic() + float(
                    (proc.cfg or {}).get("freeze_s", 2.0)
                )
            self.log.append((index, "etcd_stop_at_commit", note, time.monotonic_ns()))
            self._signal(proc, signal.SIGCONT, counted="SIGCONT (newcomer at its ACK)")
        return False

    def leader(self) -> Member | None:
        """The member that leads now, asked of the running members (``None``: no answer)."""
        ids: dict[str, Member] = {}
        named: str | None = None
        for member in self.cluster.members:
            if not _running(self.cluster, member):
                continue
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError, KeyError):
                status = self.cluster.status(member)
                ids[str(status["header"]["member_id"])] = member  # type: ignore[index]
                named = named or str(status.get("leader", ""))
        return ids.get(named or "")

    def member_fault(self, step: Step) -> str:
        """SIGKILL or SIGSTOP the leader or a follower, unless a member is down already."""
        if self.member_faults:
            self.noops[f"{step.kind}: a member is down already (quorum kept)"] += 1
            return "a member is down already"
        if self.full_since is not None:
            self.noops[f"{step.kind}: etcd is full (a restart waits for its health)"] += 1
            return "etcd is full"
        died = self._died_by_itself()
        if died:
            return died
        leader = self.leader()
        if leader is None:
            self.noops[f"{step.kind}: no member names a leader"] += 1
            return "no leader"
        members = self.cluster.members
        if step.kind.endswith("_leader"):
            member = leader
        else:
            followers = [m for m in members if m is not leader]
            member = followers[min(int(step.params["pick"] * len(followers)), len(followers) - 1)]
        how = "kill" if "_kill_" in step.kind else "stop"
        began = time.monotonic_ns()
        (self.cluster.kill if how == "kill" else self.cluster.stop)(member)
        self.member_faults[step.index] = (how, member)
        self.fault_spans.append((began, -1, f"step {step.index}: {how} {member.name}"))
        self.harness[f"etcd member {how} ({step.kind.rsplit('_', 1)[1]})"] += 1
        role = "leader" if member is leader else "follower"
        return f"{'SIGKILL' if how == 'kill' else 'SIGSTOP'} etcd {member.name} ({role})"

    def _died_by_itself(self) -> str:
        """Restart a member that exited though the harness took none down (etcd's own end).

        Seed 28 at 0c37b81 found one: the next fault picked it and SIGSTOP
        raised, ending the run. It is etcd's failure, not Highlander's, so
        the run reports it (a note, with the member's last log line) and goes on.
        """
        for member in self.cluster.members:
            process = member.process
            if process is None or process.poll() is None:
                continue
            log = member.data_dir.parent / f"{member.name}.log"
            last = ""
            with contextlib.suppress(OSError):
                last = log.read_text(errors="replace").strip().rsplit("\n", 1)[-1][:200]
            self.notes.append(
                f"etcd {member.name} exited by itself (status {process.returncode}): {last!r}"
            )
            self.harness["etcd member exited by itself, restarted"] += 1
            self.cluster.restart(member)  # waits until the cluster is healthy (bounded)
            return f"etcd {member.name} had exited by itself: restarted"
        return ""

    def member_back(self, origin: int) -> str:
        """Restart or resume the member step ``origin`` took down (its follow-up)."""
        fault = self.member_faults.pop(origin, None)
        if fault is None:
            self.noops["etcd_restart/etcd_resume: nothing was taken down"] += 1
            return "nothing to undo"
        how, member = fault
        if how == "kill":
            self.cluster.restart(member)  # waits until the cluster is healthy (bounded)
        else:
            self.cluster.resume(member)
        self._ended_span(f"step {origin}: {how} {member.name}")
        return f"etcd {member.name} {'restarted' if how == 'kill' else 'resumed'}"

    def _ended_span(self, what: str) -> None:
        now = time.monotonic_ns()
        spans = self.fault_spans
        self.fault_spans = [(b, now if e < 0 and w == what else e, w) for b, e, w in spans]

    # -- settling ---------------------------------------------------------------------------

    def undo(self, schedule: list[Step]) -> None:
        """Heal the cluster (then ``wait_healthy``), then SIGCONT every stopped child."""
        if self.full_since is not None:
            self.log.append((len(schedule), "etcd heal", self.unfill(), time.monotonic_ns()))
        for origin in list(self.member_faults):
            note = self.member_back(origin)
            self.log.append((len(schedule), "etcd heal", note, time.monotonic_ns()))
        self.cluster.wait_healthy()
        for proc in self.lab.live_children():
            if proc.stopped:
                counted = "SIGCONT (stuck newcomer)" if proc.self_stop_ns else "SIGCONT (settling)"
                self._signal(proc, signal.SIGCONT, counted=counted)
        self.resumed_ns = time.monotonic_ns()

    def converged(self) -> bool:
        """One live holder, running, that passed ``check_current()`` since everyone was
        resumed, and whom the holder key names."""
        believers = [p for p in self.lab.children() if p.believes]
        if len(believers) != 1 or believers[0].stopped:
            return False
        holder = believers[0]
        if not self.checks.passed_since(holder.pid, self.resumed_ns):
            return False
        _, value = read_holder(self.cluster, self.key)
        return value is not None and (value.pid, value.host) == (holder.pid, host_of(holder))

    def drain(self, timeout: float = 15.0) -> None:
        """Let in-flight newcomers finish (bounded): until at most one child lives and
        every live one has said how it ended (its ``ready`` report may still be in the
        pipe when its predecessor has left)."""
        lab = self.lab

        def done() -> bool:
            self.resume_stuck()
            live = lab.live_children()
            return len(live) <= 1 and all(p.ready is not None for p in live)

        if not lab.wait_until(done, timeout):
            alive = "; ".join(_describe(p) for p in lab.live_children())
            self.notes.append(f"alive after the drain: {alive}")

    def finish(self) -> None:
        """After the drain: who is left besides the holder, and is the end state right?"""
        live = self.lab.live_children()
        believers = [p for p in live if p.believes]
        holder = believers[0] if len(believers) == 1 else None
        self.left_behind = [_describe(p) for p in live if p is not holder]
        if holder is None:
            self.final_problems.append(f"{len(believers)} live processes believe they hold")
        else:
            since = time.monotonic_ns()
            if not self.lab.wait_until(
                lambda: self.checks.passed_since(holder.pid, since), FRESH_PASS_WAIT
            ):
                self.final_problems.append(f"pid {holder.pid} no longer passes check_current()")
        answered, value = read_holder(self.cluster, self.key)
        self.final_status = {
            "held": value is not None,
            "answers": answered,
            "pid": value.pid if value else None,
            "host": value.host if value else None,
            "generation": value.generation if value else None,
        }
        if holder is not None and (value is None or value.pid != holder.pid):
            named = f"pid {value.pid} on {value.host}" if value else "nobody"
            self.final_problems.append(
                f"the holder key names {named}, not pid {holder.pid} on {host_of(holder)}"
            )

    def cli_status(self) -> dict[str, Any] | None:
        """The holder key at the end (there is no socket to ask over etcd)."""
        return self.final_status


def _running(cluster: Cluster, member: Member) -> bool:
    process = member.process
    return process is not None and process.poll() is None and member.pid not in cluster.stopped


def _describe(proc: Proc) -> str:
    state = "stopped" if proc.stopped else "running"
    verdict = "holds" if proc.believes else "deposed" if proc.deposed else "no verdict"
    return (
        f"pid {proc.pid} (step {proc.step}, host {host_of(proc)}, {state}, {verdict}): "
        f"{proc.last_error()[:120]!r}"
    )


def members_left(cluster: Cluster) -> list[str]:
    """Members still running after :meth:`Cluster.close` (must be none)."""
    left = []
    for member in cluster.members:
        process = member.process
        if process is not None and process.poll() is None:
            left.append(f"etcd {member.name} pid {process.pid}")
    return left
