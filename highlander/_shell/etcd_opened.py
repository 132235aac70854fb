"""A conversation a newcomer opened over etcd: the reign it met, and since when it knows it."""

from __future__ import annotations

import time

from highlander._core.settling import begins_in
from highlander._etcd.channel import Channel
from highlander._etcd.claim import Held
from highlander._etcd.session import HolderValue


class Opened:
    """One conversation a newcomer opened: with which reign, and its channel."""

    __slots__ = ("channel", "holder", "incumbent", "seen")

    def __init__(self, incumbent: Held, holder: HolderValue, channel: Channel, seen: float) -> None:
        self.incumbent = incumbent
        self.holder = holder
        self.channel = channel
        #: When (monotonic) this newcomer first opened to that reign (its grace counts from it).
        self.seen = seen

    def begins_in(self) -> float:
        """Seconds until the reign counts as begun (:func:`highlander._core.settling.begins_in`)."""
        holder = self.holder
        now_ms, now = int(time.time() * 1000), time.monotonic()
        return begins_in(holder.since_ms, holder.settles_ms, now_ms, self.seen, now)
