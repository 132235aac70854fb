"""The incumbent as the chaos judge reads it from the event log (scripts/chaos/check.py).

Split from check.py: :class:`Succession` follows ``claimed``, ``acked`` and
``relinquished`` events to know who the incumbent was when a signal was
sent, and which signals to a holder on its way out were fair.
"""

from __future__ import annotations

from typing import Any

from scripts.chaos.findings import Findings
from scripts.chaos.process import Proc, Who


class Succession:
    """The incumbent as the event log goes, from ``claimed`` and ``acked`` events."""

    def __init__(self, who: Who, found: Findings) -> None:
        self.who, self.found = who, found
        self.incumbent: Proc | None = None
        self.previous: Proc | None = None
        #: The incumbent claimed a free project (so ``previous`` was gone).
        self.took_free = False
        #: successor -> the holder that acknowledged it.
        self.deposed_by: dict[int, Proc | None] = {}
        #: Every holder that acknowledged a successor (the successor may begin once it
        #: has let go of the lock, right after its ``relinquished`` line).
        self.relinquished: set[int] = set()
        #: Every holder whose ``relinquished`` line was seen: it may have let go.
        self.let_go: set[int] = set()

    def leaving(self, target: Proc, signaller: Proc | None) -> str | None:
        """The :class:`Findings` counter that excuses a signal to a holder on its way out."""
        if target is self.previous and self.took_free:
            return "late_signals"  # the successor found the lock free: the target was exiting
        if target is self.previous and self.deposed_by.get(id(signaller)) is target:
            return "exit_kills"  # the successor ends its deposed predecessor (missed exit)
        if id(target) in self.relinquished and signaller is self.incumbent:
            # A holder that acknowledged a successor and outlived it: the exit its
            # successor owed passes through the record to whoever holds now.
            return "inherited_exit_kills"
        if id(target) in self.relinquished and id(target) not in self.let_go:
            # Acknowledged, but stopped before it let go of the lock (it does so
            # after its relinquished line): the kernel still names it the holder,
            # so a newcomer's verified kill reaches the process that holds.
            return "acked_holding"
        return None

    def see(self, e: dict[str, Any]) -> None:
        """Follow one ``claimed``, ``acked``, ``relinquished`` or ``resumed`` event."""
        kind = e["event"]
        if kind == "relinquished":
            proc = self.who.at_wall(e["pid"], e["ts"])
            if proc is not None:
                self.let_go.add(id(proc))
            return
        if kind == "resumed":  # (etcd) its commit did not apply: it is the incumbent again
            proc = self.who.at_wall(e["pid"], e["ts"])
            if proc is not None:
                self.relinquished.discard(id(proc))
                self.let_go.discard(id(proc))
                self.previous, self.incumbent = None, proc
            return
        pid = e["pid"] if kind == "claimed" else e.get("peer_pid", -1)
        proc = self.who.at_wall(pid, e["ts"])
        acker = self.who.at_wall(e["pid"], e["ts"]) if kind == "acked" else None
        if kind == "acked" and proc is not None:
            self.deposed_by[id(proc)] = acker
            if acker is not None:
                self.relinquished.add(id(acker))
        if acker is not None and acker is not self.incumbent:
            # A holder whose rendezvous was taken (a wipe) finishing the handover
            # it had out: its successor takes the stale lineage, not the project.
            self.found.stale_acks += 1
        elif proc is not self.incumbent:
            self.previous, self.incumbent = self.incumbent, proc
            self.took_free = kind == "claimed" and e.get("outcome") != "succeeded"
