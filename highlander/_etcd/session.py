"""One process's session with etcd: a client and a lease, kept on a thread of their own.

The lease must be renewed whatever the application does with its own event
loop (or without one: the sync API has none), so the client, the keeper and
the watches run on a private loop in a daemon thread
(:mod:`highlander._etcd.loop_thread`: the serving side's selector loop, no
asyncio).  Blocking the application's loop for a second must not
cost it the project; starving the whole process is what the lease bound is
for (:mod:`highlander._core.lease`).

A holder's record in etcd is the holder key's value: JSON naming the host
(``HIGHLANDER_HOST_ID``, else the boot id: containers that share a kernel
must set it), the boot id, and the process (pid, start time, executable,
uid), so a newcomer on the same boot can verify it against ``/proc`` and
one elsewhere knows it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Mapping

from highlander._core.errors import ConfigurationError
from highlander._core.lease import MIN_TTL
from highlander._core.sha import sha256_digest  # built in: no OpenSSL
from highlander._core.values import Value
from highlander._etcd import api
from highlander._etcd.claim import Held, claim, claim_reign, holder, still_held
from highlander._etcd.client import Client
from highlander._etcd.endpoints import Target
from highlander._etcd.keeper import Keeper, grant
from highlander._etcd.loop_thread import LoopThread, Spawned
from highlander._host.identity import boot_id, own_identity
from highlander._host.log import warn_once

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from highlander._etcd.opening import Opening
    from highlander._host.settings import Settings

HOST_VAR = "HIGHLANDER_HOST_ID"
PREFIX_VAR = "HIGHLANDER_ETCD_PREFIX"
DEFAULT_PREFIX = "/highlander/"


def host_id(environ: Mapping[str, str]) -> str:
    """This host's name in holder records: ``HIGHLANDER_HOST_ID``, else the boot id."""
    named = environ.get(HOST_VAR, "").strip()
    return named or boot_id()


def project_root(project_id: str, environ: Mapping[str, str]) -> bytes:
    """The key prefix of one project: ``<prefix><sha256(project id)>/``.

    Hashed, so a project id (a repository URL) is not spelled out in key
    names and any id fits; the prefix is ``HIGHLANDER_ETCD_PREFIX``
    (default ``/highlander/``), the one a least-privilege role is given.
    """
    prefix = environ.get(PREFIX_VAR, "") or DEFAULT_PREFIX
    if not prefix.startswith("/") or not prefix.endswith("/"):
        raise ConfigurationError(f"{PREFIX_VAR}={prefix!r}: write it as /name/ (slashes around)")
    digest = sha256_digest(project_id.encode("utf-8")).hex()
    return f"{prefix}{digest}/".encode()


def app_root(app: str, project_id: str, environ: Mapping[str, str]) -> bytes:
    """The key prefix of ``app`` on project ``project_id`` (each app holds on its own)."""
    return project_root(f"{app}\n{project_id}", environ)


def holder_key(root: bytes) -> bytes:
    """The key that exists exactly while somebody holds the project."""
    return root + b"holder"


class HolderValue(Value):
    """Who holds, as the holder key says."""

    host: str
    boot_id: str
    pid: int
    start_time: int
    exe: str
    uid: int
    app: str
    #: The reign's place in the count of reigns (the claim or the commit sets it).
    generation: int = 0
    #: When the reign began (wall ms) and when the project's last successions were.
    since_ms: int = 0
    successions_ms: tuple[int, ...] = ()
    #: The TTL of the holder's lease (a fence waits it out before it acts).
    ttl: int = MIN_TTL
    #: How long (ms) a newcomer gives this reign to begin from when it first sees
    #: it: a successor or a fencer learns that it holds from etcd, after the
    #: write landed, and not on the writer's clock (0: a claim, begun already).
    settles_ms: int = 0

    def encode(self) -> bytes:
        """The holder key's value."""
        fields = {**self._asdict(), "successions_ms": list(self.successions_ms)}
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> HolderValue | None:
        """The value back; ``None`` for one that is not a holder's (damaged, foreign)."""
        try:
            fields = json.loads(raw)
            named = {name: fields[name] for name in cls.FIELDS if name in fields}
            named["successions_ms"] = tuple(named.get("successions_ms", ()))
            value = cls(**named)
        except (ValueError, TypeError, KeyError):
            return None
        numbers = (
            value.pid,
            value.start_time,
            value.uid,
            value.generation,
            value.since_ms,
            value.ttl,
            value.settles_ms,
        )
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            return None
        return value

    @classmethod
    def mine(cls, app: str, environ: Mapping[str, str]) -> HolderValue:
        """This process, as it would name itself in the holder key."""
        me = own_identity()
        return cls(host_id(environ), boot_id(), me.pid, me.start_time, me.exe, me.uid, app)


class Session:
    """A client and one lease on a private loop; ``close()`` ends both."""

    def __init__(self, target: Target, *, ttl: int = MIN_TTL) -> None:
        """Start the session's thread (nothing is sent to etcd yet)."""
        self.target = target
        self.ttl = ttl
        self._loop = LoopThread()
        self._open = True
        self.client = Client(target, runtime=self._loop.loop)
        self._loop.call(self.client.__aenter__)
        self._checked_version = False
        self.keeper: Keeper | None = None
        self.held: Held | None = None
        self._kept: Spawned | None = None
        self._lost: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        #: The thread that gave work to do while it waits, and the work (:meth:`meanwhile`).
        self._work: tuple[int, Callable[[], bool]] | None = None
        #: The lease grant :meth:`begin` sent, until :meth:`lease_kept` takes its answer.
        self._granting: Spawned | None = None
        #: Why etcd ended the reign before the lease bound did (:meth:`key_changed`).
        self.lost: str | None = None
        #: The lease a handover's move puts the holder key on (set before the move is sent).
        self.moving_to: int | None = None

    def meanwhile(self, work: Callable[[], bool] | None) -> None:
        """Have the calling thread do ``work`` while it waits for etcd's answers (``None``: stop).

        A step per call, until it returns ``False`` (a newcomer's imports:
        :mod:`highlander._shell.etcd_preload`).  Other threads just wait.
        """
        self._work = None if work is None else (threading.get_ident(), work)

    def _wait(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._waited(self._loop.spawn(fn, *args))

    def _waited(self, spawned: Spawned) -> Any:
        work = self._work
        mine = work is not None and work[0] == threading.get_ident()
        return self._loop.wait(spawned, work[1] if mine and work is not None else None)

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run the coroutine function ``fn(*args)`` on the session's loop and wait for it."""
        return self._wait(fn, *args)

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(why)`` (on the session's thread) when the reign's lease is lost."""
        self._lost.append(callback)

    def claim(self, key: bytes, value: bytes) -> Held | api.KeyValue:
        """Hold ``key`` if nobody does (then keep its lease alive), or the holder's key."""
        keeper = self.lease_kept()
        result: Held | api.KeyValue = self._wait(claim, self.client, key, value, keeper.lease)
        if isinstance(result, Held):
            self.held, self.lost = result, None
        return result

    def claim_reign(
        self, key: bytes, value_for: Callable[[int], bytes], opening: Opening | None = None
    ) -> Held | api.KeyValue:
        """:meth:`claim`, counting the reign (:func:`~highlander._etcd.claim.claim_reign`)."""
        keeper = self.lease_kept()
        result: Held | api.KeyValue = self._wait(
            claim_reign, self.client, key, keeper.lease, value_for, opening
        )
        if isinstance(result, Held):
            self.held, self.lost = result, None
        return result

    def spawn(self, fn: Callable[..., Any], *args: Any) -> Spawned:
        """Run the coroutine function ``fn(*args)`` on the session's loop; do not wait."""
        return self._loop.spawn(fn, *args)

    def adopt(self, held: Held, keeper: Keeper) -> None:
        """Hold ``held`` on ``keeper``'s lease from now on (a fence's); the old lease is revoked.

        The old one carried only this session's conversation keys.
        """
        old, old_task = self.keeper, self._kept
        self.keeper, self.held, self.lost = keeper, held, None
        self._kept = self._loop.spawn(keeper.run)
        self._kept.add_done_callback(self._ended)
        if old is not None:
            with contextlib.suppress(Exception):  # it ends by its TTL if etcd is away now
                self._loop.call(old.revoke)
        if old_task is not None:
            old_task.cancel()

    def begin(self) -> None:
        """Send the lease grant (and the version check) now; :meth:`lease_kept` takes the answer.

        A claim's caller starts them before it loads the rest of its code.
        """
        if self.keeper is None and self._granting is None:
            self._check_version()
            self._granting = self._loop.spawn(grant, self.client, self.ttl)

    def _check_version(self) -> None:
        if not self._checked_version:
            # Beside the grant, not before it: the warning is for the log,
            # and the claim need not wait a round trip for it.
            self._checked_version = True
            self._loop.spawn(_warn_if_old, self.client)

    def lease_kept(self, *, renew: bool = False) -> Keeper:
        """This session's lease, granted (and kept alive) at the first call.

        While not holding, a lease past its bound (or, with ``renew``, one etcd
        says is gone) is replaced by a new one.
        """
        self._check_version()
        stale = self.keeper is not None and (renew or not self.keeper.holds())
        if stale and self.held is None:
            # Not holding, and the lease ended (a stopped process, etcd lost it):
            # a newcomer's conversations need a live one, so it gets a new one.
            assert self.keeper is not None
            self.keeper.stop("replaced")
            self.keeper = None
        if self.keeper is None:
            granting, self._granting = self._granting, None
            if granting is None:
                granting = self._loop.spawn(grant, self.client, self.ttl)
            lease, clock = self._waited(granting)
            self.keeper = Keeper(self.client, lease, clock)
            self._kept = self._loop.spawn(self.keeper.run)
            self._kept.add_done_callback(self._ended)
        return self.keeper

    def _ended(self, done: Spawned) -> None:
        if done.cancelled() or done is not self._kept:
            return  # cancelled at close, or a lease this session gave up for another
        why = done.result() if done.exception() is None else f"keeper failed: {done.exception()}"
        self._tell(why)

    def _tell(self, why: str) -> None:
        callbacks, self._lost = self._lost, []  # once: the keeper may end after a lost key
        for callback in callbacks:
            with contextlib.suppress(Exception):  # one callback's failure must not hide the rest
                callback(why)

    def key_changed(self, event: api.Event) -> None:
        """The holder's watch saw the holder key change: the reign is over, unless it moved on.

        Called on the session's thread.  A reign's key never changes while it
        lasts, except by its own handover's move (onto :attr:`moving_to`);
        anything else (deleted: its lease revoked, by a fence or by hand, or
        by an etcd that ended it early; put on another lease) means etcd no
        longer records this reign.  The holder stops acting now
        (:meth:`holds` turns false) rather than at its next keepalive.
        """
        kv = event.kv
        if self.held is None or self.lost is not None:
            return
        if event.kind == "put" and kv.lease == self.moving_to:
            return  # our own move: the commit's answer settles it
        if event.kind == "delete":
            self.lost = "the holder key was deleted (its lease revoked, or the key removed by hand)"
        elif kv.lease == self.held.lease:
            self.lost = "the holder key was overwritten by another process (on this reign's lease)"
        else:
            self.lost = f"the holder key was put on another lease ({kv.lease:x}) by another process"
        self._tell(self.lost)

    def holds(self) -> bool:
        """Whether this process may act as holder now, by its own clock (no request)."""
        keeper = self.keeper
        return self.held is not None and self.lost is None and keeper is not None and keeper.holds()

    def check(self, key: bytes) -> bool:
        """:meth:`holds`, and etcd confirms it now (a linearizable read: ``check_current()``)."""
        held, keeper = self.held, self.keeper
        if held is None or keeper is None or not self.holds():
            return False
        left = max(keeper.clock.valid_until - keeper.now(), 0.0)
        confirmed = bool(self._loop.call(still_held, self.client, key, held, left))
        return confirmed and self.holds()  # the read may have outlasted the bound

    def holder(self, key: bytes) -> api.KeyValue | None:
        """The holder key now (linearizable), or ``None`` while nobody holds."""
        result: api.KeyValue | None = self._wait(holder, self.client, key)
        return result

    def close(self, *, revoke: bool = True) -> None:
        """End the session: revoke the lease (its keys go with it) unless told not to."""
        with self._lock:
            if not self._open:
                return
            self._open = False
        keeper, self.held = self.keeper, None
        if keeper is not None and revoke:
            with contextlib.suppress(Exception):  # a cluster that is gone ends the lease by TTL
                self._loop.call(keeper.revoke)
        if self._kept is not None:
            self._kept.cancel()
        with contextlib.suppress(Exception):
            self._loop.call(self.client.__aexit__, None, None, None)
        self._loop.stop()


async def _warn_if_old(client: Client) -> None:
    """Warn once when the member that answers runs an etcd older than the one to deploy."""
    with contextlib.suppress(Exception):  # unreachable: the grant beside it says so
        status = await client.call("/v3/maintenance/status", {})
        warning = api.version_warning(status)
        if warning is not None:
            warn_once(f"etcd-version:{status.get('version')}", "etcd_version", detail=warning)


def require_shared_token(settings: Settings) -> None:
    """Refuse settings without one token shared by every host (:class:`ConfigurationError`).

    A per-user secret file is another secret on every host: nobody could talk.
    """
    if not settings.shared_token():
        raise ConfigurationError(
            "the etcd backend needs one secret shared by every host: set "
            "HIGHLANDER_TOKEN (or token=) to the same value on each"
        )


def session_for(
    backend: str, environ: Mapping[str, str] | None = None, *, ttl: int = MIN_TTL
) -> Session:
    """A :class:`Session` for the ``etcd://`` URL ``backend`` and the ``HIGHLANDER_ETCD_*``."""
    from highlander._etcd.endpoints import parse  # noqa: PLC0415

    return Session(parse(backend, os.environ if environ is None else environ), ttl=ttl)
