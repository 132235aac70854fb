"""Two connections wired back to back in memory: the protocol without I/O.

Used by the tests and by ``make demo`` to run whole conversations with no
sockets and no processes.  The clock is injected, so a test can use a fake
one and the demo a real one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from highlander._core.codec import NEED_DATA
from highlander._core.connection import Closed, Connection
from highlander._core.deadlines import Timeouts
from highlander._core.messages import Message
from highlander._core.state import Role


@dataclass(frozen=True, slots=True)
class Transmission:
    """One frame on the wire: who sent what, its size, and when."""

    sender: Role
    message: Message
    size: int
    at: float


class ConnectionPair:
    """A NEWCOMER and an INCUMBENT connection that deliver to each other directly."""

    def __init__(
        self,
        *,
        key: bytes,
        newcomer_nonce: bytes,
        incumbent_nonce: bytes,
        clock: Callable[[], float],
        timeouts: Timeouts | None = None,
    ) -> None:
        self.clock = clock
        start = clock()
        self.sides = {
            Role.NEWCOMER: Connection(
                Role.NEWCOMER, key=key, nonce=newcomer_nonce, now=start, timeouts=timeouts
            ),
            Role.INCUMBENT: Connection(
                Role.INCUMBENT, key=key, nonce=incumbent_nonce, now=start, timeouts=timeouts
            ),
        }
        self.timeline: list[Transmission] = []

    @property
    def newcomer(self) -> Connection:
        """The newcomer's side."""
        return self.sides[Role.NEWCOMER]

    @property
    def incumbent(self) -> Connection:
        """The incumbent's side."""
        return self.sides[Role.INCUMBENT]

    def send(self, sender: Role, message: Message) -> list[Message | Closed]:
        """Send ``message`` from ``sender``; return what the other side received."""
        data = self.sides[sender].send(message, self.clock())
        self.timeline.append(Transmission(sender, message, len(data), self.clock()))
        return self.deliver(sender.peer, data)

    def deliver(self, receiver: Role, data: bytes) -> list[Message | Closed]:
        """Feed raw ``data`` to ``receiver`` and drain its events."""
        side = self.sides[receiver]
        side.receive_data(data)
        events: list[Message | Closed] = []
        while True:
            event = side.next_event(self.clock())
            if event is NEED_DATA:
                return events
            assert not isinstance(event, type(NEED_DATA))
            events.append(event)
            if isinstance(event, Closed):
                return events
