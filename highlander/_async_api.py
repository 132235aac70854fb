"""The async part of the :class:`~highlander.Highlander` handle: ``async with Highlander(...)``.

The claim runs in the caller's event loop (anyio, so asyncio and trio
alike), and the holder's serving side runs as a task of that loop; the
sync API's claim and serving thread are in :mod:`highlander._highlander`.
"""

from __future__ import annotations

from highlander._host.threads import hold
from highlander._shell import one_claim

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from types import TracebackType

    from highlander._highlander import Highlander


async def enter(hl: Highlander) -> Highlander:
    """``Highlander.__aenter__``: the claim in the running loop, then serving as its task."""
    import anyio  # noqa: PLC0415 - the caller's loop has it loaded already

    from highlander._host.waiting import ANYIO  # noqa: PLC0415

    settings = hl._resolve()
    if one_claim.find(settings) is not None:
        raise one_claim.claimed_twice(settings)
    with hold():
        result = await hl._claim(settings, None, ANYIO)
    one_claim.remember(hl)
    if result is None:
        hl._become_duplicate(settings)
        return hl
    hl._begin(result)
    incumbent = hl._new_incumbent()
    assert incumbent is not None  # nobody could release a handle not yet returned
    hl._task_group = anyio.create_task_group()
    await hl._task_group.__aenter__()
    hl._task_group.start_soon(incumbent.serve, ANYIO, hl._parent)
    return hl


async def leave(
    hl: Highlander,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool | None:
    """``Highlander.__aexit__``: release, then end the serving task."""
    hl.release()
    if hl._task_group is not None:
        hl._task_group.cancel_scope.cancel()
        return bool(await hl._task_group.__aexit__(exc_type, exc, tb))
    return None
