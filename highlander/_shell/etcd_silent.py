"""A reign that sent no HELLO over etcd: what a newcomer can tell of it, from etcd alone.

On one machine the kernel shows whether a silent holder is working
(:mod:`highlander._shell.silent`: its CPU time, its run state).  Across hosts
only etcd shows anything, and it shows two things: whether the reign is
still the one we opened to (the holder key), and whether it *wrote*
meanwhile.  A holder answers every conversation with keys on its own lease,
so keys of its side of other conversations written since ours opened are
the cross-host counterpart of CPU time spent: it serves, only late (a herd
of newcomers at a new reign's start, on a loaded host or cluster), and it
is spared as a starved holder is, bounded by the ceiling.  A holder that
wrote nothing gets one more connection per generation (``Unseen``), then
counts as hung (a fence).
"""

from __future__ import annotations

import time

from highlander._core.errors import EtcdError
from highlander._core.policy import Changed, Leaving, Setback
from highlander._etcd import api
from highlander._etcd.channel import conversations
from highlander._host.identity import Expected
from highlander._shell.client import Silent
from highlander._shell.etcd_backend import EtcdBackend, Opened
from highlander._shell.setbacks import HolderFresh, HolderMissed, HolderStarved, HolderUnseen


def silent(backend: EtcdBackend, greeting: Silent, connected_ms: int) -> Setback:
    """See :meth:`Backend.silent`: the reign we opened to, unless it changed since."""
    last = backend.last
    if greeting.closed or last is None:
        return Changed()
    kv = backend.session.holder(backend.key)
    if kv is None or (kv.mod_revision, kv.lease) != (last.incumbent.token, last.incumbent.lease):
        return Changed()  # the reign we spoke to is over: the next attempt meets the new one
    holder = last.holder
    if holder.since_ms > int(time.time() * 1000):
        return Leaving(holder.pid)  # a fencer waiting out its fence: it serves soon
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
    if answering_others(backend, last):
        return HolderStarved(target=target)
    return HolderUnseen(holder.generation, target=target)


def answering_others(backend: EtcdBackend, last: Opened) -> bool:
    """Whether the reign ``last`` spoke to wrote in any conversation since ours opened."""
    body = api.get(conversations(backend.root), prefix=True, keys_only=True)
    body["min_mod_revision"] = str(last.channel.since + 1)
    try:
        answer = backend.session.call(backend.session.client.call, "/v3/kv/range", body)
    except EtcdError:
        return False  # nothing shown: no pardon on that account
    _, kvs = api.got(answer)
    return any(kv.lease == last.incumbent.lease for kv in kvs)
