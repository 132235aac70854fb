"""The etcd chaos faults on the cluster's data, made behind the processes' backs.

**A reign ended in etcd** (``etcd_end_reign``).  Over etcd a reign lasts
while its holder key exists on its lease, and the holder's bound assumes the
lease ends only by its TTL or by a fence (which then waits a TTL).  Two
things break that from outside the protocol: an operator who deletes the
key (``etcdctl del``), and a lease revoked before its time, which etcd
3.5.1 did itself in seeds 1 and 45 (a leader stopped past the TTL revoked,
on resuming, leases the new leader had kept alive).  The holder must notice
within its watch's delivery and step down by itself (``lease_lost``); a
newcomer may claim at once.  The harness records the fault as a *loss* (as
a wiped runtime directory on one machine): the judge excuses an overlap of
the two reigns only while the older holder ran no longer than the
detection bound after it (scripts/chaos/current.py).

**History compacted** (``etcd_compact``): the cluster's history is
compacted up to its newest revision, as etcd's auto-compaction or
Kubernetes does.  Every watch that resumes later (a member gone, five
silent seconds) must list and watch again; nothing may be lost, so it is no
loss for the judge, and every counter must stay as it is.

**etcd full** (``etcd_full``, undone by ``etcd_unfull`` 1 to 4 steps later):
the ``NOSPACE`` alarm raised through etcd's maintenance API, as a database
that reached its quota raises it.  etcd then takes no writes but keepalives:
a holder keeps its reign (no ``lease_lost`` is excused for it), a newcomer
refuses with the fix in its message, and an incumbent whose move etcd
refuses keeps the project.  Nothing may be lost.

**etcd full at an incumbent's move** (``etcd_full_at_move``): ``etcd_full``
aimed at the milliseconds between an incumbent's accepting a timely ACK and
its move, which a drawn ``etcd_full`` almost never meets.  The step starts a
newcomer that, once it holds and is itself succeeded, stops itself right
before its move (``before_move``: it has let go and logged ``relinquished``
already); the harness raises the alarm and resumes it, so etcd refuses the
move and the incumbent takes its reign back (``resumed``); the alarm is
disarmed ``full_s`` seconds later (not a step: the moment comes when it
comes).  The newcomer that sent the ACK refuses with the fix, or, if the
alarm is gone before it gives up on the silent incumbent, fences it.
"""

from __future__ import annotations

import base64
import contextlib
import signal
import time
import urllib.error
from collections import Counter
from collections.abc import Callable

from highlander._etcd import api
from highlander._host.identity import is_halted
from scripts.chaos.process import Proc
from scripts.chaos.schedule import Step
from tests.support.etcd_cluster import Cluster, Member, post

#: How the reign is ended: its lease revoked (etcd's early revocation), or its key deleted.
HOW = ("revoke", "delete")


def end_reign(cluster: Cluster, key: bytes, how: str) -> str | None:
    """Revoke the holder's lease or delete its key, asking each member in turn.

    Returns what was done, or ``None`` when nobody holds (or no member answered).
    """
    body: dict[str, object] = {"key": base64.b64encode(key).decode()}
    for endpoint in cluster.endpoints:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            _, kvs = api.got(post(endpoint, "/v3/kv/range", body))
            if not kvs:
                return None
            lease = kvs[0].lease
            if how == "revoke" and lease:
                post(endpoint, "/v3/lease/revoke", {"ID": str(lease)})
                return f"revoked the holder's lease {lease:x}"
            post(endpoint, "/v3/kv/deleterange", body)
            return f"deleted the holder key (lease {lease:x})"
    return None


def compact(cluster: Cluster) -> str | None:
    """Compact the history up to the newest revision, asking each member in turn.

    Returns what was done, or ``None`` when no member answered.
    """
    body: dict[str, object] = {"key": base64.b64encode(b"/").decode(), "limit": 1}
    for endpoint in cluster.endpoints:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            revision = api.header(post(endpoint, "/v3/kv/range", body)).revision
            post(endpoint, "/v3/kv/compaction", {"revision": str(revision)})
            return f"compacted the history up to revision {revision}"
    return None


def nospace(cluster: Cluster, *, on: bool) -> str | None:
    """Raise etcd's NOSPACE alarm (``on``), or disarm every NOSPACE alarm it has.

    Returns what was done, or ``None`` when no member answered.
    """
    for endpoint in cluster.endpoints:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError, KeyError):
            if on:
                member = post(endpoint, "/v3/maintenance/status", {})["header"]
                alarm = {"memberID": member["member_id"], "alarm": "NOSPACE"}  # type: ignore[index]
                post(endpoint, "/v3/maintenance/alarm", {"action": "ACTIVATE", **alarm})
                return "raised etcd's NOSPACE alarm: no writes but keepalives"
            listed = post(endpoint, "/v3/maintenance/alarm", {"action": "GET"}).get("alarms", [])
            for alarm in listed if isinstance(listed, list) else []:
                if alarm.get("alarm") == "NOSPACE":
                    body = {"action": "DEACTIVATE", **alarm}
                    post(endpoint, "/v3/maintenance/alarm", body)
            return "disarmed etcd's NOSPACE alarm"
    return None


#: The step kinds :class:`DataFaults` carries out.
DATA_FAULTS = frozenset(
    {"etcd_end_reign", "etcd_compact", "etcd_full", "etcd_unfull", "etcd_full_at_move"}
)


class DataFaults:
    """The etcd runner's faults on the cluster's data (a mixin of ``EtcdRunner``)."""

    cluster: Cluster
    key: bytes
    noops: Counter[str]
    harness: Counter[str]
    losses: list[tuple[int, int, str]]
    member_faults: dict[int, tuple[str, Member]]
    poll: Callable[[], None]  # the runner's: read what the children reported
    start: Callable[..., Proc]  # the runner's: a child on its drawn host
    _signal: Callable[..., None]  # the runner's: a counted signal to a child
    log: list[tuple[int, str, str, int]]
    #: The step whose NOSPACE alarm is raised now (``etcd_full``), if one is.
    full_since: int | None = None
    #: Step index -> the child of ``etcd_full_at_move`` not stopped at a move yet.
    at_move: dict[int, Proc]
    #: Step index -> when (monotonic) the alarm raised at its child's move is disarmed.
    unfill_at: dict[int, float]

    def data_fault(self, step: Step) -> str:
        """Carry out ``step`` (a kind in :data:`DATA_FAULTS`); what was done."""
        if step.kind == "etcd_end_reign":
            return self.end_reign(step)
        if step.kind == "etcd_compact":
            return self.compact(step)
        if step.kind == "etcd_full":
            return self.fill(step)
        if step.kind == "etcd_full_at_move":
            proc = self.start(step.index, step.params)
            self.at_move[step.index] = proc
            return f"started pid {proc.pid} (etcd fills at its move as incumbent)"
        return self.unfill(step.params["origin"])

    def end_reign(self, step: Step) -> str:
        """End the holder's reign in etcd behind its back, recorded as a loss (etcd_data)."""
        self.poll()
        before = time.monotonic_ns()
        note = end_reign(self.cluster, self.key, step.params["how"])
        if note is None:
            self.noops[f"{step.kind}: nobody holds"] += 1
            return "nobody holds"
        self.losses.append((before, time.monotonic_ns(), f"step {step.index}: {note}"))
        self.harness[f"reign ended in etcd ({step.params['how']})"] += 1
        return note

    def compact(self, step: Step) -> str:
        """Compact the cluster's history (etcd_data): every later resume must list again."""
        note = compact(self.cluster)
        if note is None:
            self.noops[f"{step.kind}: no member answered"] += 1
            return "no member answered"
        self.harness["history compacted"] += 1
        return note

    def fill(self, step: Step) -> str:
        """Raise the NOSPACE alarm (etcd_data), unless a member is down: its restart
        waits for the cluster's health, which the alarm denies."""
        if self.member_faults or self.full_since is not None:
            self.noops[f"{step.kind}: a member is down, or etcd is full already"] += 1
            return "not now"
        note = nospace(self.cluster, on=True)
        if note is None:
            self.noops[f"{step.kind}: no member answered"] += 1
            return "no member answered"
        self.full_since = step.index
        self.harness["etcd full (NOSPACE alarm)"] += 1
        return note

    def unfill(self, origin: int | None = None) -> str:
        """Disarm the alarm step ``origin`` raised (every one, at the settling: ``None``)."""
        if self.full_since is None or (origin is not None and origin != self.full_since):
            self.noops["etcd_unfull: no alarm of that step"] += 1
            return "nothing to undo"
        note = nospace(self.cluster, on=False)
        if note is None:
            return "no member answered (the settling disarms it)"
        self.full_since = None
        return note

    def full_at_move(self) -> None:
        """An ``etcd_full_at_move`` child stopped itself before its move: raise the alarm
        (unless :meth:`fill` may not now), resume it; disarm each alarm when it is due."""
        for index in due_now(self.unfill_at):
            note = self.unfill(index)
            self.log.append((index, "etcd_full_at_move", note, time.monotonic_ns()))
        for index, proc in stopped_now(self.at_move, lambda proc: proc.move_stop_ns):
            note = self.fill(Step(index, "etcd_full_at_move", {}, 0.0, ()))
            if self.full_since == index:
                self.harness["etcd full at an incumbent's move"] += 1
                full_s = float((proc.cfg or {}).get("full_s", 2.0))
                self.unfill_at[index] = time.monotonic() + full_s
            self.log.append((index, "etcd_full_at_move", note, time.monotonic_ns()))
            self._signal(proc, signal.SIGCONT, counted="SIGCONT (incumbent at its move)")


def due_now(due: dict[int, float]) -> list[int]:
    """The step indices whose time (monotonic) in ``due`` has come, taken out of it."""
    now = time.monotonic()
    ready = [index for index, when in due.items() if now >= when]
    for index in ready:
        del due[index]
    return ready


def stopped_now(
    waiting: dict[int, Proc], stamp: Callable[[Proc], int | None]
) -> list[tuple[int, Proc]]:
    """The children in ``waiting`` that stopped themselves (``stamp`` set) and are halted
    now, still stopped, taken out of it; the ones that ended are dropped.

    One that said so but is not halted yet stays: a SIGCONT first would leave it
    stopped for good.  One no longer stopped was resumed already (the settling).
    """
    found: list[tuple[int, Proc]] = []
    for index, proc in list(waiting.items()):
        if not proc.alive:
            del waiting[index]
        elif stamp(proc) is not None and is_halted(proc.pid):
            del waiting[index]
            if proc.stopped:
                found.append((index, proc))
    return found
