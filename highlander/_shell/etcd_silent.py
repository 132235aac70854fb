"""A reign that sent no HELLO over etcd: what a newcomer can tell of it, from etcd alone.

On one machine the kernel shows whether a silent holder is working
(:mod:`highlander._shell.silent`: its CPU time, its run state).  Across hosts
only etcd shows anything: whether the reign is still the one we opened to
(the holder key), and whether it has begun (a successor or a fencer
settling in is waited for: its ``since``, and its ``settles_ms`` from when we
first saw it, :mod:`highlander._core.settling`).  A holder on
another host that has begun and is silent gets one more connection per
generation (``Unseen``), then counts as hung (a fence).

Tried and left out: sparing a silent holder that wrote keys on its lease
since our conversation opened (its answers to other newcomers) as a starved
one.  In ``make chaos-etcd`` it kept a herd of 30 newcomers retrying on an
overloaded holder: the load cost holders their leases (24 against 3) and
newcomers waited longer (30 over the wedge bound against 4; docs/reliability.md).
"""

from __future__ import annotations

from highlander._core.findings import Changed, Leaving, Setback
from highlander._host.identity import Expected
from highlander._shell.client import Silent
from highlander._shell.etcd_backend import EtcdBackend
from highlander._shell.etcd_opened import Opened
from highlander._shell.setbacks import HolderFresh, HolderMissed, HolderStarved, HolderUnseen


def silent(backend: EtcdBackend, greeting: Silent, connected_ms: int) -> Setback:
    """See :meth:`Backend.silent`: the reign we opened to, unless it changed since."""
    last = backend.last
    if greeting.closed or last is None:
        return Changed()
    kv = backend.session.holder(backend.key)
    if kv is None or (kv.mod_revision, kv.lease) != (last.incumbent.token, last.incumbent.lease):
        return Changed()  # the reign we spoke to is over: the next attempt meets the new one
    if last.begins_in() > 0:
        return Leaving(last.holder.pid)  # a successor or a fencer settling in: it serves soon
    return _unanswered(backend, last, greeting, connected_ms)


def _unanswered(backend: EtcdBackend, last: Opened, greeting: Silent, connected_ms: int) -> Setback:
    """The reign we spoke to sent no HELLO: why it may be fine, or that it missed it."""
    holder = last.holder
    target = Expected(holder.pid, holder.start_time, holder.exe, holder.uid, holder.boot_id)
    if holder.since_ms >= connected_ms:
        return HolderFresh(holder.generation, target=target)
    if greeting.busy:
        return HolderStarved(target=target)  # on this host: the kernel saw it working
    if backend.local(holder):
        return HolderMissed("hello", greeting.halted, target=target)
    return HolderUnseen(holder.generation, target=target)
