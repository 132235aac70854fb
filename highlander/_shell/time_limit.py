"""``acquire(timeout=)``: one deadline over the whole wait, through the :class:`Waiter`.

:class:`TimeLimit` wraps the waiter a newcomer runs on (``BLOCKING`` or
``ANYIO``, unchanged): every wait is cut to what is left of the caller's
time, and a wait that reaches the deadline raises :class:`OutOfTime`
instead of returning, so the conversation in progress ends where it is.
That is safe wherever the newcomer can simply leave (before it sent
ACK_SUCCESSION the incumbent keeps the project: :mod:`highlander._core.commit`).
Where it cannot, the shell runs on :func:`unlimited`: a handover after
ACK_SUCCESSION is finished, and a verified kill once begun runs to its end
(each bounded by its own deadlines); :func:`check` refuses to begin one
when the time is already up.
"""

from __future__ import annotations

from highlander._core.errors import AcquireTimeoutError
from highlander._host.record import read_record
from highlander._host.waiting import Waitable, Waiter

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._host.settings import Settings


class OutOfTime(Exception):  # noqa: N818 - a condition, turned into AcquireTimeoutError
    """The caller's time ran out (internal: acquire() raises the public error)."""


class TimeLimit:
    """A :class:`Waiter` whose waits all end by ``deadline`` (on ``inner``'s clock)."""

    def __init__(self, inner: Waiter, deadline: float) -> None:
        self.inner = inner
        self.deadline = deadline

    def now(self) -> float:
        """The inner waiter's clock."""
        return self.inner.now()

    def left(self, timeout: float | None = None) -> float:
        """What is left of the time (at most ``timeout``); raise :class:`OutOfTime` if none."""
        left = self.deadline - self.inner.now()
        if left <= 0:
            raise OutOfTime
        return left if timeout is None else min(timeout, left)

    def _expired(self) -> None:
        if self.inner.now() >= self.deadline:
            raise OutOfTime

    async def readable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """As the inner waiter's, cut to the deadline."""
        if await self.inner.readable(fd, self.left(timeout)):
            return True
        self._expired()
        return False

    async def writable(self, fd: Waitable, timeout: float | None = None) -> bool:
        """As the inner waiter's, cut to the deadline."""
        if await self.inner.writable(fd, self.left(timeout)):
            return True
        self._expired()
        return False

    async def sleep(self, seconds: float) -> None:
        """As the inner waiter's, cut to the deadline."""
        await self.inner.sleep(self.left(seconds))
        if seconds > 0:
            self._expired()


def unlimited(waiter: Waiter) -> Waiter:
    """The waiter under any time limit: for steps that must run to their end."""
    return waiter.inner if isinstance(waiter, TimeLimit) else waiter


def check(waiter: Waiter) -> None:
    """Raise :class:`OutOfTime` if ``waiter``'s time limit has passed (no limit: never)."""
    if isinstance(waiter, TimeLimit):
        waiter.left()


def out_of_time(settings: Settings, timeout: float) -> AcquireTimeoutError:
    """The public error for a wait that ran out: who holds the project, and what to do."""
    import shlex  # noqa: PLC0415 - only when the time ran out

    record = read_record(settings.paths.state)
    holder = f"pid {record.pid}, generation {record.generation}" if record else "unknown pid"
    return AcquireTimeoutError(
        f"could not hold {settings.app} for {settings.root} within {timeout:g} s; the holder "
        f"({holder}) keeps it. Give acquire() more time (timeout=None waits as long as the "
        f"holder makes progress), or see what it is doing: highlander status --app "
        f"{shlex.quote(settings.app)} --project {shlex.quote(settings.root)}"
    )
