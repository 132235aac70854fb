"""The newcomer after a setback: ask the policy, carry out its decision, attempt again.

:func:`highlander._shell.newcomer.acquire` makes the first attempt itself, and
most acquisitions end with it; this module (and the pure
:mod:`highlander._core.policy` it runs) is imported when an attempt found
something in the way (a :class:`~highlander._core.findings.Setback`).  Each
turn: one sample of the record, the kernel and the clock
(:class:`~highlander._core.patience.Look`), the policy's one
:class:`~highlander._core.policy.Action`, then the next attempt
(:func:`~highlander._shell.newcomer.turn`), bounded in number.
"""

from __future__ import annotations

from highlander._core.deadlines import Phase
from highlander._core.errors import ForeignHolderError, HighlanderError, IncumbentUnreachableError
from highlander._core.findings import Impostor, Setback, Transition
from highlander._core.policy import (
    MAX_ATTEMPTS,
    Action,
    AwaitExit,
    Backoff,
    Claim,
    EndUnreachable,
    GiveUp,
    Policy,
    Relocate,
    Signal,
)
from highlander._host.event_log import Event
from highlander._shell.newcomer import turn
from highlander._shell.setbacks import HolderFresh, HolderMissed, HolderStarved, HolderUnseen
from highlander._shell.time_limit import check, unlimited

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._core.patience import Look
    from highlander._host.claim import Reign
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.attaching import Declined, Relay
    from highlander._shell.newcomer import Duplicate
    from highlander._shell.seam import Backend


async def retry(
    settings: Settings,
    waiter: Waiter,
    backend: Backend,
    declined: Declined | None,
    found: Setback,
) -> Reign | Duplicate | Relay:
    """Go on from the first attempt, which found ``found``, until an attempt holds the project.

    Raises what the policy gives up with (:func:`_give_up`).
    """
    policy = Policy(settings.timeouts)
    policy.next_attempt()  # the first attempt, made already
    while True:
        look = backend.look(settings, waiter.now())
        decision = policy.settle(found, look)
        if isinstance(decision, Relocate):
            look = look._replace(moved=settings.renamed())
            decision = policy.settle(found, look)
        await _execute(settings, waiter, found, decision, look, backend)
        if not isinstance(policy.next_attempt(), Claim):
            break
        outcome = await turn(settings, waiter, backend, declined)
        if not isinstance(outcome, Setback):
            return outcome
        found = outcome
    raise IncumbentUnreachableError(  # pragma: no cover - every attempt is bounded
        f"gave up after {MAX_ATTEMPTS} attempts to hold {backend.place(settings)}"
    )


async def _execute(
    settings: Settings,
    waiter: Waiter,
    found: Setback,
    decision: Action,
    look: Look,
    backend: Backend,
) -> None:
    """Carry out the policy's decision about the failed attempt that found ``found``."""
    events = settings.events
    if isinstance(decision, Backoff):
        if decision.pause:
            await waiter.sleep(decision.pause)  # a working holder: look again soon
        await waiter.sleep(decision.delay)
    elif isinstance(decision, AwaitExit):
        await backend.await_exit(settings, decision.pid, decision.within, waiter)
    elif isinstance(decision, Signal):
        assert isinstance(found, HolderMissed | HolderFresh | HolderStarved | HolderUnseen)
        check(waiter)  # a kill once begun runs to its end: never begin one out of time
        events.emit(Event.HUNG, peer_pid=found.target.pid, phase=decision.phase)
        why = f"missed {decision.phase}"
        await backend.fence(
            found.target,
            settings,
            why,
            unlimited(waiter),
            halted=decision.halted,
            ceiling=decision.phase == Phase.CEILING.value,
        )
    elif isinstance(decision, EndUnreachable):
        from highlander._shell.unreachable import end_unreachable_holder  # noqa: PLC0415

        await end_unreachable_holder(
            settings, waiter, queue_full=decision.queue_full, seen=decision.seen
        )
    elif isinstance(decision, GiveUp):
        raise _give_up(settings, found, look, backend)


def _give_up(settings: Settings, found: Setback, look: Look, backend: Backend) -> HighlanderError:
    """The error that ends the wait on ``found`` (see :class:`~highlander._core.policy.Why`)."""
    socket = backend.place(settings)
    if isinstance(found, Impostor):
        settings.events.emit(Event.IDENTITY_MISMATCH, peer_pid=found.pid, reason=found.problem)
        return ForeignHolderError(
            f"{socket} is served by pid {found.pid}, which is not a "
            f"verified holder ({found.problem}); Highlander will not depose it"
        )
    if isinstance(found, Transition):
        return ForeignHolderError(
            f"pid {found.pid} listens on {socket} without answering "
            f"while the record names pid {found.recorded}, and no handover finished: "
            "Highlander will not signal it; run `highlander status`"
        )
    assert look.blocker is not None, found  # the policy gives up on nothing else
    from highlander._shell.unreachable import blocked_error  # noqa: PLC0415 - see _execute

    return blocked_error(settings, look.blocker)
