"""Whether the holder hears a SAVE out: the same app, a mode and a pace that allow it.

Decided from the holder's settings, its record and the request alone,
before anything is saved, so a refused request costs the holder nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from highlander._core.errors import Reason
from highlander._core.messages import Hello, Intent, Save, StatusReply
from highlander._core.values import Value
from highlander._host.event_log import Event
from highlander._host.identity import own_identity
from highlander._host.record import HolderRecord
from highlander._host.settings import Settings


class Refusal(Value):
    """The REFUSED to send (``reason``, ``detail``) and the ``event`` to log for it."""

    reason: Reason
    detail: str
    event: Event


def other_app(settings: Settings, save: Save) -> Refusal | None:
    """A SAVE from another app is refused, whatever its intent.

    Checked before anything else (BUSY included): a newcomer of another app
    must hear at once that waiting will not help.
    """
    if save.app == settings.app:
        return None
    detail = (
        f"this holder is app {settings.app!r}, not {save.app!r}: it hands its state only to "
        f"the same app; pass a distinct --app (app=) to each server"
    )
    return Refusal(Reason.OTHER_APP, detail, Event.REFUSED)


def policy(
    settings: Settings, save: Save, history_ms: Sequence[int], now_ms: int
) -> Refusal | None:
    """A succession the holder's mode or the anti-thrash rule does not allow is refused."""
    if save.intent is not Intent.SUCCEED:
        return None
    if not settings.mode.deposable:
        detail = (
            f"the holder runs in {settings.mode.value} mode and is not deposed: "
            "give every client the same HIGHLANDER_MODE"
        )
        return Refusal(Reason.MODE, detail, Event.REFUSED)
    if not settings.thrash.allows(history_ms, now_ms):
        return Refusal(Reason.THRASH, settings.thrash.explain(history_ms, now_ms), Event.THRASH)
    return None


def status_reply(settings: Settings, record: HolderRecord, *, busy: bool) -> StatusReply:
    """What the holder of ``record`` answers a STATUS with (``busy``: a succession runs)."""
    return StatusReply(
        app=settings.app,
        pid=record.pid,
        generation=record.generation,
        mode=settings.mode.value,
        since_ms=record.since_ms,
        busy=busy,
    )


def hello(settings: Settings, record: HolderRecord, nonce: bytes, *, shares: bool) -> Hello:
    """The holder's HELLO: who it is, its reign, and (sharing) its build and fingerprint."""
    me = own_identity()
    build = settings.build() if shares else None  # said only when a newcomer may use it
    return Hello(
        pid=me.pid,
        start_time=me.start_time,
        exe=me.exe,
        app=settings.app,
        generation=record.generation,
        since_ms=record.since_ms,
        nonce=nonce.hex(),
        build=build.version if build else "",
        fingerprint=build.fingerprint if build else "",
        shares=shares,
    )
