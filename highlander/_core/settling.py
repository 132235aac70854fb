"""When a reign over etcd has begun, as a newcomer that meets it may judge (pure rules).

A reign that a write gave to another process (the incumbent's move to its
successor, a fence to its fencer) does not begin when the write is sent:
its new holder learns from etcd that it holds only after the write *landed*,
then waits out what it must (the successor its exit deadline, the fencer one
TTL) and starts serving.  Until then the key names a process that cannot
answer yet, and a third newcomer that meets it must wait (``Leaving``)
rather than call it hung and fence it: the fence would take the handed-over
state with it.

The writer's ``since_ms`` (its wall clock at the write, plus the wait) says
nothing of when the write landed.  Seed 27 of ``make chaos-etcd`` showed the
difference: the move went to a frozen member, landed a second late, and a
third newcomer that met the moved key found its ``since`` already past and
fenced the successor before it had learned it held (docs/reliability.md).
So the grace is also counted from the newcomer's own *first sight* of the
reign (its monotonic clock; the write has landed by then), for
``settles_ms``: the wait, a HELLO's time, and one TTL of the new holder's
lease for its own requests to learn the outcome (while its lease is renewed,
it is alive and learning; a dead one's key goes with its lease).  A wall-clock
bound keeps a newcomer that first meets an old reign, long begun, from waiting
for it: a write lands within the writer's lease bound, so by ``since + 2 *
settles`` any such reign has begun (clock skew between hosts beyond that only
brings back the writer's clock alone).
"""

from __future__ import annotations


def settles_ms(wait: float, hello: float, ttl: float) -> int:
    """The grace of a reign whose holder acts ``wait`` s after learning it holds."""
    return int((wait + hello + ttl) * 1000)


def begins_in(since_ms: int, settles: int, wall_ms: int, seen: float | None, now: float) -> float:
    """Seconds until the reign counts as begun (``<= 0``: it has, and may be judged).

    ``since_ms``/``settles``: the holder key's; ``wall_ms``: our wall clock;
    ``seen``/``now``: our monotonic clock when we first saw this reign (``None``:
    not recorded) and now.
    """
    left = (since_ms - wall_ms) / 1000
    if settles > 0 and seen is not None and wall_ms < since_ms + 2 * settles:
        left = max(left, seen + settles / 1000 - now)
    return left
