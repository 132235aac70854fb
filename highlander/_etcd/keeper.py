"""Keep a holder's lease alive, and say when the holder must stop acting.

Keepalives go every TTL/4, each with a short timeout so a frozen member
costs one try (the client then asks the next).  The bound the holder acts
under is :class:`~highlander._core.lease.LeaseClock`'s: counted from when the
newest *answered* keepalive was sent, minus a margin, on a clock that also
counts while the machine sleeps.  :meth:`Keeper.run` returns when the bound
has passed or etcd says the lease is gone, and never later than the bound,
however slowly etcd answers: a request is given only the time left.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from highlander._core.errors import EtcdError, EtcdUnavailableError
from highlander._core.lease import LeaseClock, request_timeout_for
from highlander._etcd import api
from highlander._etcd.client import Client


def boottime() -> float:
    """Seconds on a clock that never jumps and counts suspend (etcd's clock does)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


async def grant(
    client: Client, ttl: int, now: Callable[[], float] = boottime
) -> tuple[int, LeaseClock]:
    """A new lease of ``ttl`` seconds and its clock, counted from when the grant was sent."""
    sent = now()
    lease, granted = api.granted(await client.call("/v3/lease/grant", api.grant(ttl)))
    return lease, LeaseClock(ttl=granted, granted_sent=sent)


class Keeper:
    """The keepalive loop of one lease."""

    def __init__(
        self, client: Client, lease: int, clock: LeaseClock, now: Callable[[], float] = boottime
    ) -> None:
        """Keep ``lease`` (granted as ``clock`` says) alive through ``client``."""
        self.client = client
        self.lease = lease
        self.clock = clock
        self.now = now
        #: Why the loop ended ("expired", "gone", "refused: ..."); ``None`` while it runs.
        self.why: str | None = None
        #: Answered and unanswered keepalives, for the bench and the tests.
        self.sent = 0
        self.answered = 0

    def holds(self) -> bool:
        """Whether the holder may act as holder now (what ``check_current()`` asks first)."""
        return self.why is None and self.clock.holds(self.now())

    async def run(self) -> str:
        """Keep the lease alive until the holder must let go; return why."""
        last_sent = self.clock.granted_sent
        while True:
            now = self.now()
            if self.why is not None:
                return self.why  # stopped: no keepalive after that
            if not self.clock.holds(now):
                self.why = "gone" if self.clock.gone else "expired"
                return self.why
            wake = min(self.clock.next_keepalive(last_sent), self.clock.valid_until)
            if wake > now:
                await self.client.runtime.sleep(wake - now)
                continue
            last_sent = self.now()
            left = self.clock.valid_until - last_sent
            if left <= 0:
                continue
            self.sent += 1
            try:
                answer = await self.client.call(
                    "/v3/lease/keepalive",
                    api.keepalive(self.lease),
                    timeout=min(request_timeout_for(self.clock.ttl), left),
                    budget=left,
                )
            except EtcdUnavailableError:
                continue  # nobody answered in the time left: the bound decides
            except EtcdError as refused:
                self.why = f"refused: {refused}"
                return self.why
            self.answered += 1
            self.clock.renewed(last_sent, api.kept_alive(answer))

    def stop(self, why: str) -> None:
        """Send no more keepalives (the lease then ends by its TTL); the holder lets go now."""
        self.why = self.why or why

    async def revoke(self) -> None:
        """End the lease now (a holder that lets go: its key goes with it)."""
        self.why = self.why or "revoked"
        await self.client.call("/v3/lease/revoke", api.revoke(self.lease), budget=2.0)
