"""Keep a holder's serving loop alive, or end its reign cleanly when it cannot go on.

The worst state a holder can be in is deaf: its serving loop died, its
process lives on with the lock and the listener, and the next newcomer can
only take it for hung and signal it (state lost).  So nothing that happens
to one connection, or to a resource for a while, ends the serving loop:

* ``accept()`` errors are sorted (:func:`accept_error_kind`).  A lack of
  descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) is waited out: the
  oldest idle connection is evicted (it frees a descriptor), the loop backs
  off (:data:`BACKOFF_FIRST` doubling up to :data:`BACKOFF_MAX`) and logs one
  ``overload`` event per episode (rate-limited as well).  An error of the one
  connection being accepted (ECONNABORTED, EPROTO, ...) is skipped.
* An unexpected error in one conversation ends that conversation only
  (``connection_failed``).

What no later conversation can get past raises :class:`ServingFailed`: a
listener that cannot accept for another reason (EBADF, EINVAL: it is
broken), a secret file found unsafe when the key is first derived (no key,
no conversation), any error that escapes the loop itself.  The holder then
steps down (:func:`step_down`): ``serving_failed`` with the reason, its
listener closed (the path unlinked only if it is still ours: same inode),
its lock released, ``relinquished`` and ``on_deposed`` with
:attr:`Outcome.STEPPED_DOWN`, so the next newcomer claims a free project
instead of killing a deaf holder.
"""

from __future__ import annotations

import errno

from highlander._host.event_log import Event, EventLog, Outcome

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (4 ms for a holder)
if TYPE_CHECKING:
    from highlander._host.waiting import Cancellable, Waiter
    from highlander._shell.incumbent import Incumbent

#: Connections served at once; more are closed on accept (each is bounded by deadlines).
MAX_CONNECTIONS = 64

#: accept() errors that mean "not now": out of descriptors or kernel memory.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: accept() errors of the one connection being accepted (it went away, or the
#: kernel refused it): skipped, the next one is accepted as usual.
CONNECTION_ERRNOS = frozenset(
    {errno.ECONNABORTED, errno.EPROTO, errno.EPERM, errno.ENOSR, errno.ETIMEDOUT}
)
#: The first pause after accept() found no descriptors, in seconds; each
#: failure in a row doubles it, up to :data:`BACKOFF_MAX`.
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 0.5


class ServingFailed(Exception):  # noqa: N818 - a condition that ends the reign, not an error type
    """The serving loop cannot go on; the holder steps down (the message says why)."""


def accept_error_kind(exc: OSError) -> str:
    """``resource`` (wait it out), ``connection`` (skip it) or ``fatal`` (step down)."""
    if exc.errno in RESOURCE_ERRNOS:
        return "resource"
    if exc.errno in CONNECTION_ERRNOS:
        return "connection"
    return "fatal"


def describe(exc: BaseException) -> str:
    """What went wrong, for an event: the first error inside any exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServingFailed):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class Slot:
    """One open conversation, as the guard counts them (to evict the idle ones)."""

    __slots__ = ("task",)

    def __init__(self) -> None:
        self.task: Cancellable | None = None


class ServingGuard:
    """Per-holder state of the serving loop's error handling: open conversations, back-off."""

    def __init__(self, events: EventLog, waiter: Waiter) -> None:
        self.events = events
        self.waiter = waiter
        self.delay = 0.0
        #: Open conversations, oldest first: slot -> whether its request arrived.
        self._slots: dict[Slot, bool] = {}
        self._evicted = 0
        self._last_overload = float("-inf")

    def open_slot(self) -> Slot | None:
        """Room for one more conversation (evicting an idle one if need be); ``None``: full."""
        if len(self._slots) >= MAX_CONNECTIONS and not self.evict_idle():
            return None
        slot = Slot()
        self._slots[slot] = False
        return slot

    def engaged(self, slot: Slot) -> None:
        """The conversation made its request: it is no longer evictable."""
        if slot in self._slots:
            self._slots[slot] = True

    def close_slot(self, slot: Slot) -> None:
        """The conversation ended."""
        self._slots.pop(slot, None)

    def evict_idle(self) -> bool:
        """Make room by dropping the oldest connection that has not made its request.

        Idle connections cannot crowd out a real newcomer, which sends its
        request within milliseconds of HELLO.  Logged at most once a second.
        """
        victim = next((slot for slot, engaged in self._slots.items() if not engaged), None)
        if victim is None:
            return False
        if victim.task is not None:
            victim.task.cancel()
        del self._slots[victim]
        self._evicted += 1
        now = self.waiter.now()
        if now - self._last_overload >= 1.0:
            self.events.emit(
                Event.OVERLOAD, evicted=self._evicted, reason="idle connections evicted"
            )
            self._last_overload, self._evicted = now, 0
        return True

    async def accept_failed(self, exc: OSError) -> None:
        """Handle a failed ``accept()``: back off, skip, or raise :class:`ServingFailed`."""
        kind = accept_error_kind(exc)
        if kind == "connection":
            return
        if kind == "fatal":
            raise ServingFailed(f"the listener cannot accept connections: {exc}") from exc
        first = self.delay == 0.0
        self.delay = BACKOFF_FIRST if first else min(self.delay * 2, BACKOFF_MAX)
        evicted = self.evict_idle()
        # The pause lets the evicted connection close before the event is
        # written: appending to the event log needs a descriptor too.
        await self.waiter.sleep(self.delay)
        if first:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            self.events.emit(
                Event.OVERLOAD,
                reason=f"accept failed for lack of descriptors or memory ({name}); backing off",
                error=str(exc),
                evicted=int(evicted),
                backoff_ms=int(self.delay * 1000),
            )

    def accepted(self) -> None:
        """A connection was accepted: the overload episode, if any, is over."""
        self.delay = 0.0

    def connection_failed(self, exc: Exception, peer_pid: int | None) -> None:
        """Report an unexpected error that ended one conversation (and nothing else)."""
        self.events.emit(Event.CONNECTION_FAILED, peer_pid=peer_pid, reason=describe(exc))


async def step_down(
    incumbent: Incumbent,
    reason: str,
    *,
    event: Event = Event.SERVING_FAILED,
    outcome: Outcome = Outcome.STEPPED_DOWN,
) -> None:
    """End the reign because it cannot be served (or found) any more; see the module docstring.

    Also the way out when the rendezvous is lost (:mod:`highlander._shell.watch`):
    ``event`` and ``outcome`` say which.
    """
    if incumbent.outcome is not None:
        incumbent.stop()  # the reign already ended another way
        return
    incumbent.outcome = outcome
    events, reign = incumbent.settings.events, incumbent.reign
    events.emit(event, reason=reason, generation=reign.record.generation)
    # During a handover a successor shares the listener: its path stays.
    incumbent.close_listener(unlink=not incumbent.handed_over)
    # Told before the lock goes, as after a handover (highlander._shell.incumbent):
    # over etcd a successor may already hold, and letting go may wait on the cluster.
    events.emit(Event.RELINQUISHED, outcome=outcome, generation=reign.record.generation)
    reign.lock.release()
    try:
        await incumbent.deposed(outcome)
    finally:
        incumbent.stop()
