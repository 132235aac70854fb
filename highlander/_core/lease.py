"""How long a holder may believe in its etcd lease, counted on its own clock.

etcd expires a lease ``TTL`` seconds after the leader last renewed it, on
the leader's clock.  A holder cannot read that clock, but it knows when it
*sent* each keepalive: the leader renewed no earlier than that, so the lease
lives at least until ``sent + TTL``.  A keepalive that got no answer proves
nothing (it may never have arrived), so only answered ones move the bound.
The holder stops acting ``margin`` before that bound, so a paused, starved or
partitioned holder has let go before a successor can exist.  (A leader
change only extends leases, so it never makes the bound unsafe.)

Time comes in as an argument: the shell passes a clock that counts while
the machine sleeps (``CLOCK_BOOTTIME``), because etcd's clock does and a
laptop resumed after an hour must not believe in a lease that died.
"""

from __future__ import annotations

#: Shortest lease Highlander accepts: TTL 2 s did not ride out an etcd leader
#: loss at etcd's default timing (1 s election timeout, plus the re-election).
MIN_TTL = 5
#: Keepalives per TTL: three may fail before the holder must step down.
KEEPALIVES_PER_TTL = 4
#: The least time a holder keeps between letting go and the lease's end.
MIN_MARGIN = 0.5
#: And as a share of the TTL, for long leases (clock rates differ by ppm; GC pauses do not).
MARGIN_SHARE = 0.1


def margin_for(ttl: float) -> float:
    """Seconds before the lease's earliest possible end at which the holder lets go."""
    return max(MIN_MARGIN, ttl * MARGIN_SHARE)


def request_timeout_for(ttl: float) -> float:
    """A keepalive's per-request timeout: short, so a frozen member costs one try, not the TTL."""
    return min(1.0, ttl / (2 * KEEPALIVES_PER_TTL))


class LeaseClock:
    """The lease's earliest possible end, from the keepalives etcd answered.

    ``granted_sent`` is when the grant request was sent and ``ttl`` what the
    grant gave; every answered keepalive then moves the bound with
    :meth:`renewed`.
    """

    __slots__ = ("earliest_end", "gone", "granted_sent", "ttl")

    def __init__(self, ttl: float, granted_sent: float) -> None:
        """The grant is the first answered request."""
        self.ttl = ttl
        self.granted_sent = granted_sent
        #: The earliest moment etcd may expire the lease: the newest answered send + TTL.
        self.earliest_end = granted_sent + ttl
        #: A keepalive said the lease is gone (expired or revoked): nothing renews it.
        self.gone = False

    def __repr__(self) -> str:
        return (
            f"LeaseClock(ttl={self.ttl}, granted_sent={self.granted_sent}, "
            f"earliest_end={self.earliest_end}, gone={self.gone})"
        )

    @property
    def margin(self) -> float:
        """See :func:`margin_for`."""
        return margin_for(self.ttl)

    @property
    def valid_until(self) -> float:
        """The holder acts as holder only before this moment."""
        return self.earliest_end - self.margin

    def renewed(self, sent: float, ttl: float) -> None:
        """A keepalive sent at ``sent`` was answered with ``ttl`` (0: the lease is gone)."""
        if ttl <= 0:
            self.gone = True
            return
        # Answers may come back out of order (a retried request): the newest send counts.
        self.earliest_end = max(self.earliest_end, sent + ttl)

    def holds(self, now: float) -> bool:
        """Whether the holder may still act as holder at ``now``."""
        return not self.gone and now < self.valid_until

    def next_keepalive(self, last_sent: float) -> float:
        """When to send the next keepalive, the last one having been sent at ``last_sent``."""
        return last_sent + self.ttl / KEEPALIVES_PER_TTL
