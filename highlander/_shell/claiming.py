"""The claim, for the sync and the async API: a free project at once, a held one by succession.

Imports only what a free claim needs: most starts take a free project and
never load the conversation's code.
"""

from __future__ import annotations

from highlander._core.errors import ForeignHolderError
from highlander._host.claim import Reign
from highlander._host.modes import Mode

# At import, and with it `socket` (2 ms): a claim binds a listener and a newcomer
# dials, so most starts need it; a duplicate's verdict does not (docs/performance.md,
# "Issue #16, closed": loading it here or in the claim moves 2 ms between benchmarks).
from highlander._shell.dial import dial_early

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._host.settings import Settings
    from highlander._host.waiting import Waiter
    from highlander._shell.seam import Backend


async def claim(
    settings: Settings, backend: Backend, timeout: float | None, waiter: Waiter | None
) -> Reign | None:
    """Hold the project through ``backend``; ``None``: run as a duplicate (OBSERVE/WARN).

    ``waiter``: the async caller's (``ANYIO``), or ``None`` for the blocking
    one, imported only when a holder must be talked to.
    """
    reign = claim_free(settings, backend)
    if reign is not None or settings.mode is not Mode.AUTO:
        return reign
    # Dial the holder before loading the conversation's code: it accepts and
    # derives its key while we import ours (the newcomer's first attempt).
    first = dial_early(settings, backend)
    from highlander._shell.newcomer import acquire  # noqa: PLC0415 - contended only

    if waiter is None:
        from highlander._host.waiting import BLOCKING  # noqa: PLC0415

        waiter = BLOCKING
    # A backend that dials early claims again before its first attempt (a
    # lock is free to retry, and the project may have come free meanwhile);
    # one that does not (etcd: a claim is a round trip) talks at once.
    claimed = not backend.dials_early
    result = await acquire(settings, waiter, timeout, backend, first=first, claimed=claimed)
    if not isinstance(result, Reign):
        from highlander._shell.attaching import Relay, become_relay  # noqa: PLC0415

        assert isinstance(result, Relay)  # AUTO never yields a duplicate
        become_relay(settings, result)  # share mode: the holder serves our client
    return result


def claim_free(settings: Settings, backend: Backend) -> Reign | None:
    """Claim a free project; in OBSERVE/WARN a foreign holder is only reported."""
    try:
        return backend.claim(settings)
    except ForeignHolderError:
        if settings.mode is Mode.AUTO:
            raise
        return None
