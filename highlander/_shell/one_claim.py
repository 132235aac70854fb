"""One claim per process: a second ``ensure_singleton()`` finds the first.

A server that calls ``ensure_singleton()`` from two places (a ``main()``
and a plugin, say) must not end up talking to itself over its own socket
and leaving.  Every acquired handle is remembered here; a second claim on
the same app, project and runtime directory gets the first handle back
(``ensure_singleton()``), and a claim on another app or project while this
process holds one is a :class:`~highlander._core.errors.ConfigurationError` that
leaves the held claim alone.
"""

from __future__ import annotations

import threading

from highlander._core.errors import ConfigurationError, Deposed
from highlander._host.event_log import Outcome

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._highlander import Highlander
    from highlander._host.settings import Settings

_lock = threading.Lock()
_handles: list[Highlander] = []


class AlreadyHoldingError(ConfigurationError):
    """This process already holds a claim; the new one is refused and the held one stays.

    ``ensure_singleton()`` raises it instead of leaving the process: leaving
    would end the claim the process holds.
    """


def _claim(settings: Settings) -> tuple[str, str, str]:
    return (settings.app, settings.root, settings.paths.socket)


def _live(handle: Highlander) -> bool:
    """A duplicate, or a holder that can still prove its claim (``check_current()``).

    A holder whose lock file was deleted has lost the project even before it
    notices: a new claim must not be refused in its name.
    """
    if handle.outcome is Outcome.DUPLICATE:
        return True
    if not handle.is_holder:
        return False
    try:
        handle.check_current()
    except Deposed:
        return False
    return True


def find(settings: Settings) -> Highlander | None:
    """This process's live handle for the same claim as ``settings``, if any.

    Raises :class:`AlreadyHoldingError` when this process holds another app or
    project: one process holds one claim at a time.
    """
    with _lock:
        _handles[:] = [handle for handle in _handles if _live(handle)]
        live = list(_handles)
    for handle in live:
        if handle.settings is not None and _claim(handle.settings) == _claim(settings):
            return handle
    for handle in live:
        if handle.outcome is not Outcome.DUPLICATE and handle.settings is not None:
            held = handle.settings
            raise AlreadyHoldingError(
                f"this process already holds {held.app} for {held.root} (generation "
                f"{handle.generation}) and cannot also hold {settings.app} for "
                f"{settings.root}: a process holds one claim at a time; release() the first, "
                f"or run {settings.app} for {settings.root} as a process of its own"
            )
    return None


def remember(handle: Highlander) -> None:
    """Note an acquired handle (holder or duplicate) for :func:`find`."""
    with _lock:
        if handle not in _handles:
            _handles.append(handle)


def claimed_twice(settings: Settings) -> AlreadyHoldingError:
    """The error for a second handle on the claim this process holds."""
    return AlreadyHoldingError(
        f"this process already holds {settings.app} for {settings.root}: keep the "
        "handle from the first ensure_singleton() (a second ensure_singleton() call "
        "returns it) instead of claiming twice"
    )
