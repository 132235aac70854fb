"""The etcd backend: where holders meet on an etcd cluster (:mod:`highlander._shell.seam`).

One project is a key prefix (:func:`~highlander._etcd.session.project_root`
of the app and the project id); its holder key rides on the holder's lease
and its value names the holder (:class:`~highlander._etcd.session.HolderValue`).
The conversation is the one the socket carries, its bytes sealed in etcd
keys and bridged to a socket (:mod:`highlander._etcd.channel`), so the same
core, deadlines and policy run unchanged.  What differs is said here: who
the peer is (the holder key's value, checked against ``/proc`` only on the
same host and boot), what goes with SAVED (nothing: the commit is the
incumbent's move, :mod:`highlander._shell.etcd_takeover`), and the fence (a
guarded move of the key and a revoke of the hung holder's lease, never a
signal to another host).
"""

from __future__ import annotations

import contextlib
import socket
import time

from highlander._core.errors import EtcdError, ForeignHolderError
from highlander._etcd import api
from highlander._etcd.channel import Channel, carry, open_channel
from highlander._etcd.claim import Held, counter_key
from highlander._etcd.session import (
    HolderValue,
    Session,
    require_shared_token,
    session_for,
)
from highlander._host.claim import Reign
from highlander._host.event_log import Event, Outcome
from highlander._host.identity import Expected, PeerCredentials, cmdline, run_state
from highlander._host.record import HolderRecord
from highlander._host.settings import Settings
from highlander._shell.etcd_claiming import claim
from highlander._shell.etcd_first import Place

# The conversation's modules are not imported here: a newcomer loads them while
# etcd answers its first requests (highlander._shell.etcd_preload).
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from highlander._core.findings import Setback
    from highlander._core.messages import Hello, Saved
    from highlander._core.patience import Look
    from highlander._etcd.holding import Incoming
    from highlander._host.waiting import Waiter
    from highlander._shell.client import Greeting, Silent
    from highlander._shell.etcd_first import First
    from highlander._shell.etcd_opened import Opened
    from highlander._shell.incumbent import Incumbent

#: How often a newcomer looks whether a holder busy handing over has gone.
POLL = 0.05


class EtcdBackend:
    """An etcd cluster: a holder key on a lease, conversations as sealed keys."""

    name = "etcd"
    dials_early = False  # its newcomers take turns first (take_turn)

    def __init__(
        self,
        settings: Settings,
        session: Session | None = None,
        place: Place | None = None,
        first: First | None = None,
    ) -> None:
        """A session with the cluster ``settings.backend`` names (nothing sent yet).

        Or, from :func:`highlander._shell.etcd_first.start`: its ``session``, begun,
        the project's ``place`` (our keys there) and the ``first`` request's answer.
        """
        assert settings.backend is not None and settings.project_id is not None
        self.settings = settings
        if session is None:  # else backend_for refused what needs refusing before it
            require_shared_token(settings)
            session = session_for(settings.backend, settings.env, ttl=settings.lease_ttl)
        self.session: Session = session
        self.ours = place if place is not None else Place(settings, session)
        self.root, self.key, self.me = self.ours.root, self.ours.key, self.ours.me
        self.counter = counter_key(self.key)
        #: The conversations we opened, by our end (pruned of closed ones at each open:
        #: a plain dict, since importing weakref cost the claim path a millisecond).
        self._opened: dict[socket.socket, Opened] = {}
        self.peers: dict[bytes, Incoming] = {}
        #: The holder key as the last claim read it (the next open talks to that reign).
        self._found: api.KeyValue | None = None
        #: The reign a fence won, for the claim that follows it.
        self.fenced: Reign | None = None
        self.last: Opened | None = None
        #: The last reign's lease ran out under our eyes: the next claim is a stale one.
        self.stale = False
        #: The generation and handoff of a reign that sent us SAVED, while no
        #: conclusion settled it: a claim that begins the very next reign carries it.
        self.saved: tuple[int, dict[str, object] | None] | None = None
        self._key = self.ours.channel_key
        #: The first request's answer, until the first claim takes it (``etcd_claiming``).
        self.first = first
        #: Whether no claim was made yet (a newcomer's first sends that request).
        self.unclaimed = True
        #: The conversation our first claim opened, and when (``etcd_claiming``).
        self._early: tuple[socket.socket, int] | None = None

    # -- claim, holder, look ------------------------------------------------------------

    def claim(self, settings: Settings) -> Reign | None:
        """See :meth:`Backend.claim` (:mod:`highlander._shell.etcd_claiming`)."""
        return claim(self, settings)

    def found(self, kv: api.KeyValue) -> None:
        """A claim found ``kv`` holding: the next open talks to it (checked: a holder's value)."""
        self._holder_of(kv)
        self._found = kv

    def _holder_of(self, kv: api.KeyValue) -> HolderValue:
        holder = HolderValue.decode(kv.value)
        if holder is None:
            raise ForeignHolderError(
                f"the holder key of {self.place(self.settings)} holds a value no Highlander "
                "holder writes: Highlander will not fence it; check what else writes under "
                "HIGHLANDER_ETCD_PREFIX"
            )
        return holder

    def reign(self, held: Held, outcome: Outcome, handoff: dict[str, object] | None) -> Reign:
        """The reign ``held`` is, in the shape the incumbent serves."""
        value = HolderValue.decode(held.value)
        assert value is not None  # we wrote it: this process, as the reign names it
        record = _record(value, self.settings, cmdline(value.pid))
        from highlander._etcd.holding import LeaseLock, private_listener  # noqa: PLC0415

        lock = LeaseLock(self.session, self.key, value.generation)
        reign = Reign(lock, private_listener(), record, handoff, outcome)
        self.settings.events.emit(Event.CLAIMED, outcome=outcome, generation=value.generation)
        return reign

    def holder(self, settings: Settings) -> HolderRecord | None:
        """See :meth:`Backend.holder`: the holder key's value (a linearizable read)."""
        kv = self.session.holder(self.key)
        value = HolderValue.decode(kv.value) if kv is not None else None
        return None if value is None else _record(value, settings, [])

    def look(self, settings: Settings, now: float) -> Look:
        """See :meth:`Backend.look`: the holder key; ``/proc`` only on the same host."""
        from highlander._core.patience import Look  # noqa: PLC0415 - after a setback only

        record = self.holder(settings)
        if record is None:
            return Look(now=now)
        here = record.boot_id == self.me.boot_id and self._same_host(record.pid)
        run = run_state(record.pid) if here else None
        return Look(now=now, holder=(record.pid, record.generation), run=run)

    def _same_host(self, pid: int) -> bool:
        last = self.last
        return last is not None and last.holder.pid == pid and self.local(last.holder)

    def local(self, value: HolderValue) -> bool:
        """Whether ``value``'s process runs under this kernel (same host, same boot)."""
        return value.host == self.me.host and value.boot_id == self.me.boot_id

    # -- the conversation ---------------------------------------------------------------

    def open(self, settings: Settings) -> socket.socket | None:
        """See :meth:`Backend.open`: a conversation in etcd, bridged to a socketpair."""
        kv, self._found = self._found or self.session.holder(self.key), None
        if kv is None:
            return None
        holder = self._holder_of(kv)
        try:
            channel = self._open_channel(renew=False)
        except EtcdError as refused:
            if refused.code != api.NOT_FOUND:
                raise
            channel = self._open_channel(renew=True)  # our lease is gone: a new one
        return self._converse(kv, holder, channel)

    def converse_early(self, kv: api.KeyValue, channel: Channel, connected_ms: int) -> None:
        """Talk over ``channel``, which our first claim opened (``etcd_claiming``).

        :meth:`opened_early` hands it to the newcomer's first attempt.
        """
        self._found = None  # the conversation talks to it
        holder = self._holder_of(kv)
        channel.keyed(self.channel_key())
        self._early = (self._converse(kv, holder, channel), connected_ms)

    def opened_early(self) -> tuple[socket.socket, int] | None:
        """See :meth:`Backend.opened_early`: the conversation our first claim opened."""
        early, self._early = self._early, None
        return early

    def _converse(self, kv: api.KeyValue, holder: HolderValue, channel: Channel) -> socket.socket:
        """Bridge ``channel`` (to the reign ``kv``) to a socketpair; our end of it."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        last = self.last
        same = last is not None and last.incumbent.token == kv.mod_revision
        seen = last.seen if last is not None and same else time.monotonic()
        held = Held(kv.mod_revision, kv.lease, kv.value)
        from highlander._shell.etcd_opened import Opened  # noqa: PLC0415

        opened = self.last = Opened(held, holder, channel, seen)
        self._opened = {end: one for end, one in self._opened.items() if end.fileno() != -1}
        self._opened[ours] = opened
        self.session.spawn(carry, channel, theirs)
        # The holder is still answering our `here`: time to load the cipher its
        # first chunk needs, instead of when it has come.
        from highlander._core.sealing import load  # noqa: PLC0415

        load()
        return ours

    def _open_channel(self, *, renew: bool) -> Channel:
        keeper = self.session.lease_kept(renew=renew)
        channel: Channel = self.session.call(
            open_channel, self.session.client, self.root, keeper.lease, None, self.me.encode()
        )
        # Derived (the stdlib's HMAC, loaded the first time) while the holder
        # reads our `here` and answers it, not before we have written it.
        try:
            channel.keyed(self.channel_key())
        except BaseException:
            with contextlib.suppress(Exception):  # its keys go with our lease otherwise
                self.session.call(channel.close)
            raise
        return channel

    def channel_key(self) -> bytes:
        """The key every conversation of this project is sealed under (token and project).

        Derived once (:mod:`highlander._shell.etcd_key`): every attempt and
        every served conversation uses it.
        """
        return self._key.get()

    def place(self, settings: Settings) -> str:
        """See :meth:`Backend.place`: the cluster and the project id."""
        return f"etcd {self.session.target.describe()} (project {settings.project_id!r})"

    def peer(self, sock: socket.socket) -> PeerCredentials:
        """See :meth:`Backend.peer`: the holder key's value, or the newcomer's opening key."""
        from highlander._shell.etcd_peer import peer_of  # noqa: PLC0415

        opened = self._opened.get(sock)
        return peer_of(self, sock, opened.holder if opened is not None else None)

    def sees(self, sock: socket.socket) -> bool:
        """See :meth:`Backend.sees`: only a peer on this host and boot."""
        opened = self._opened.get(sock)
        return opened is not None and self.local(opened.holder)

    def hello_problem(
        self, settings: Settings, hello: Hello, sock: socket.socket, pid: int
    ) -> str | None:
        """See :meth:`Backend.hello_problem`: HELLO against the holder key (and ``/proc`` here)."""
        from highlander._shell.etcd_peer import hello_mismatch  # noqa: PLC0415

        holder = self._opened[sock].holder
        return hello_mismatch(settings, hello, holder, pid, local=self.local(holder))

    def silent(self, settings: Settings, greeting: Silent, connected_ms: int) -> Setback:
        """See :meth:`Backend.silent` (:mod:`highlander._shell.etcd_silent`)."""
        from highlander._shell.etcd_silent import silent  # noqa: PLC0415 - rare

        return silent(self, greeting, connected_ms)

    async def await_exit(self, settings: Settings, pid: int, within: float, waiter: Waiter) -> None:
        """See :meth:`Backend.await_exit`: until the holder key changes, polled.

        Or until the reign it names begins (a successor or a fencer settling in,
        whose ``since_ms`` lies ahead): then it is asked again.
        """
        last = self.last
        deadline = waiter.now() + within
        if last is not None:
            deadline = min(deadline, waiter.now() + max(last.begins_in(), 0.0) + POLL)
        while waiter.now() < deadline:
            kv = self.session.holder(self.key)
            if last is None or kv is None or kv.mod_revision != last.incumbent.token:
                return
            await waiter.sleep(POLL)

    async def take_turn(self, settings: Settings, waiter: Waiter) -> None:
        """See :meth:`Backend.take_turn`: converse only while no older newcomer is queued."""
        await self.ours.turn.wait(waiter, settings.timeouts.hello + settings.timeouts.stall)

    def leave_turn(self, *, holding: bool) -> None:
        """See :meth:`Backend.leave_turn`: our queue key deleted (else it goes with our lease)."""
        self.ours.turn.leave(wait=not holding)

    # -- the handover ---------------------------------------------------------------------

    def prepare_conclusion(self) -> None:
        """See :meth:`Backend.prepare_conclusion`: the takeover's modules, and the reign's."""
        import highlander._etcd.holding  # noqa: PLC0415 - the point is the import
        import highlander._shell.etcd_takeover  # noqa: F401, PLC0415

    async def conclude(
        self, settings: Settings, greeting: Greeting, saved: Saved, fds: list[int], started: float
    ) -> Reign | None:
        """See :meth:`Backend.conclude` (:mod:`highlander._shell.etcd_takeover`)."""
        from highlander._shell.etcd_takeover import conclude  # noqa: PLC0415

        opened = self._opened[greeting.sock]
        self.saved = (opened.holder.generation, saved.handoff)
        reign = await conclude(self, greeting, saved, opened)
        if reign is not None:
            self.saved = None
        return reign

    def descriptors(self, reign: Reign) -> list[int]:
        """See :meth:`Backend.descriptors`: nothing (the commit moves the key instead)."""
        return []

    async def lost_before_saved(self, incumbent: Incumbent) -> bool:
        """See :meth:`Backend.lost_before_saved`: the lease bound, by our own clock."""
        from highlander._shell.etcd_serving import lease_lost  # noqa: PLC0415

        if self.session.holds():
            return False
        await lease_lost(incumbent, "the lease could not be renewed during a save")
        return True

    async def take_back(self, incumbent: Incumbent) -> None:
        """See :meth:`Backend.take_back`: nothing was given (the key moves only by our move)."""

    async def commit(self, incumbent: Incumbent, sock: socket.socket) -> bool:
        """See :meth:`Backend.commit`: the move (:mod:`highlander._shell.etcd_serving`)."""
        from highlander._shell.etcd_serving import commit  # noqa: PLC0415

        return await commit(self, incumbent, sock)

    def fencing(self, reign: Reign) -> tuple[str | None, int]:
        """See :meth:`Backend.fencing`: the holder key and its mod revision (this reign's write)."""
        held = self.session.held
        return self.key.decode(), held.token if held is not None else 0

    def unproven(self, reign: Reign, settings: Settings, generation: int) -> str | None:
        """See :meth:`Backend.unproven`: a linearizable read, within the lease bound."""
        if not reign.lock.held:
            return f"generation {generation} is over: its lease bound has passed (or it let go)"
        try:
            confirmed = self.session.check(self.key)
        except Exception as exc:  # fails closed: no answer is no proof
            # No member answered within the lease bound, or the session closed
            # under the check (the reign stepping down in its serving thread).
            return f"generation {generation} cannot be proven current: etcd said nothing ({exc})"
        if not confirmed:
            return f"generation {generation} is over: etcd no longer records it as the holder"
        return None

    # -- fence, watch -----------------------------------------------------------------------

    async def fence(
        self,
        target: Expected,
        settings: Settings,
        why: str,
        waiter: Waiter,
        *,
        halted: bool,
        ceiling: bool = False,
    ) -> bool:
        """See :meth:`Backend.fence`: move the key off the hung reign, revoke it, wait a TTL."""
        from highlander._shell.etcd_lease_end import expires  # noqa: PLC0415
        from highlander._shell.etcd_takeover import fence  # noqa: PLC0415

        last = self.last
        if last is None:
            return False
        if await expires(self, last, waiter):
            self.stale = True
            return True  # nobody renewed it: it ran out, and the next claim is plain
        self.fenced = await fence(self, last, waiter, None, ceiling=ceiling)
        return self.fenced is not None

    async def watch(self, incumbent: Incumbent) -> None:
        """See :meth:`Backend.watch` (:mod:`highlander._shell.etcd_serving`)."""
        from highlander._shell.etcd_serving import keep_watch  # noqa: PLC0415

        await keep_watch(self, incumbent)

    async def see_out(self, incumbent: Incumbent, predecessor: Expected) -> None:
        """See :meth:`Backend.see_out`: nothing to see on another host (its lease is gone)."""


def _record(value: HolderValue, settings: Settings, argv: list[str]) -> HolderRecord:
    """The holder key's value in the shape of the local record (what the shell reads)."""
    return HolderRecord(
        value.pid, value.start_time, value.exe, value.uid, value.boot_id, value.app,
        settings.mode.value, value.generation, value.since_ms, argv,
        list(value.successions_ms), [],
    )  # fmt: skip
