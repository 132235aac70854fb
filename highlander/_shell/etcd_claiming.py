"""The etcd backend's claim: put-if-absent of the holder key on our lease, counting the reign.

(:func:`highlander._etcd.claim.claim_reign`.)  A newcomer's first claim
(AUTO) is the request :mod:`highlander._shell.etcd_first` sent before the
backend's code loaded, which also queued us and, when nobody was queued
before us, opened our conversation: its answer is taken here, and an opened
conversation handed to the first attempt (:meth:`EtcdBackend.opened_early`,
the seam's early dial).  A backend made without it (``EtcdBackend(settings)``)
sends the same request at its first claim.
"""

from __future__ import annotations

import time

from highlander._core.errors import EtcdError
from highlander._etcd import api
from highlander._etcd.claim import Held
from highlander._host.event_log import Outcome
from highlander._host.modes import Mode
from highlander._shell.etcd_first import drop, send

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._host.claim import Reign
    from highlander._host.settings import Settings
    from highlander._shell.etcd_backend import EtcdBackend
    from highlander._shell.etcd_first import First


def claim(backend: EtcdBackend, settings: Settings) -> Reign | None:
    """See :meth:`Backend.claim`: the reign we now hold, or ``None`` (the holder key is kept)."""
    unused = backend.opened_early()
    if unused is not None:
        unused[0].close()  # a caller that claims again did not talk over it: it ends
    if backend.fenced is not None:
        reign, backend.fenced = backend.fenced, None
        return reign
    first, backend.first = backend.first, None
    if first is None and backend.unclaimed and settings.mode is Mode.AUTO:
        first = send(backend.session, settings, backend.ours)
    backend.unclaimed = False  # OBSERVE and WARN too: a later claim is a plain one
    since = first.since_ms if first is not None else int(time.time() * 1000)
    value_for = backend.ours.value_for(since)
    try:
        if first is not None and first.error is not None:
            raise first.error
        if first is not None and first.result is not None:
            result = first.result
        else:
            result = backend.session.claim_reign(backend.key, value_for)
    except EtcdError as refused:
        if refused.code != api.NOT_FOUND:
            raise
        backend.session.lease_kept(renew=True)  # our lease is gone (etcd says): a new one
        result = backend.session.claim_reign(backend.key, value_for)
    if isinstance(result, Held):
        stale, backend.stale = backend.stale or result.stale, False
        saved, backend.saved = backend.saved, None
        if saved is not None:
            from highlander._shell.etcd_takeover import moved_to_us  # noqa: PLC0415

            if moved_to_us(backend, result, since, saved[0]):
                return backend.reign(result, Outcome.SUCCEEDED, saved[1])
        outcome = Outcome.CLAIMED_STALE if stale else Outcome.CLAIMED_FREE
        return backend.reign(result, outcome, None)
    _held(backend, result, first)
    return None


def _held(backend: EtcdBackend, kv: api.KeyValue, first: First | None) -> None:
    """The claim found ``kv`` holding: talk to it next, over what ``first`` opened if it did."""
    if first is None or first.opening is None:
        backend.found(kv)
        return
    try:
        backend.found(kv)
        backend.converse_early(kv, first.channel, first.connected_ms)
    except BaseException:
        backend.session.spawn(drop, first.channel)
        raise
