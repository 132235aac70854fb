"""The public handle: ``Highlander.ensure_singleton(...)`` and ``async with Highlander(...)``.

The sync API claims the project in the caller's thread with no event loop:
a free project directly, a held one through the newcomer conversation driven
by blocking waits (:mod:`highlander._host.waiting`).  Only then does a daemon
thread import the protocol's event-loop side and serve newcomers, so neither
asyncio nor the protocol core is on the claim's critical path, and the
application's own work cannot block the protocol.  The async API does the
same inside the caller's event loop.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from types import TracebackType

from highlander._core.errors import HighlanderError
from highlander._ending import ReignApi
from highlander._host.claim import Reign
from highlander._host.event_log import Event, Outcome
from highlander._host.log import flush
from highlander._host.modes import Mode, ThrashPolicy
from highlander._host.record import HolderRecord
from highlander._host.settings import Options, Settings, checked_timeout
from highlander._host.threads import hold, start_daemon
from highlander._sharing_api import SharingApi
from highlander._shell import one_claim
from highlander._shell.claiming import claim
from highlander._shell.one_claim import AlreadyHoldingError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

    from highlander._core.deadlines import Timeouts
    from highlander._host.waiting import Runtime, Waiter
    from highlander._shell.incumbent import Incumbent
    from highlander._shell.saving import SaveHook
    from highlander._shell.seam import Backend


class Highlander(ReignApi, SharingApi):
    """One process's claim on a project: holder, or (OBSERVE/WARN) a duplicate.

    Keyword options: ``app`` (default: the program's name), ``project``
    (default: ``HIGHLANDER_PROJECT``, ``CLAUDE_PROJECT_DIR``, the working
    directory), ``mode`` (``Mode`` or string; default ``HIGHLANDER_MODE``,
    else AUTO), ``token`` (default ``HIGHLANDER_TOKEN``, else a per-user
    secret file), ``on_save(progress) -> dict | None`` (sync or async; runs
    in the incumbent when a successor asks), ``on_deposed()`` (after the
    successor acknowledged, and also when the holder was orphaned or stepped
    down because it could not serve any more; default: flush and leave the
    process with status 0), ``on_duplicate(record)`` (WARN), ``timeouts``, ``runtime_dir``,
    ``thrash_limit`` and ``thrash_window``, ``legacy_lock`` (an old lock or
    pid file to migrate from), ``exit_when_orphaned`` (default True: the
    holder leaves when the process that started it exits), ``backend``
    (default ``HIGHLANDER_BACKEND``, else this machine: ``"etcd://h1:2379,h2:2379"``
    makes holders meet on an etcd cluster, docs/etcd.md) and ``project_id``
    (etcd only; default ``HIGHLANDER_PROJECT_ID``, else the project's git remote),
    ``share`` (``"off"``, ``"on"``, ``"only"``; default ``HIGHLANDER_SHARE``, else
    off: a newcomer may attach to the holder's server instead of replacing it,
    docs/mcp.md) and ``build`` (the server's version, for share mode).

    Claim with ``Highlander.ensure_singleton(...)``, ``Highlander(...).acquire()``
    (``timeout=`` bounds the wait), ``with Highlander(...) as hl:`` or
    ``async with Highlander(...) as hl:``; the two ``with`` forms release on exit.
    """

    def __init__(
        self,
        *,
        app: str | None = None,
        project: str | os.PathLike[str] | None = None,
        mode: Mode | str | None = None,
        token: str | bytes | None = None,
        on_save: SaveHook | None = None,
        on_deposed: Callable[[], Any] | None = None,
        on_duplicate: Callable[[HolderRecord | None], Any] | None = None,
        timeouts: Timeouts | None = None,
        runtime_dir: str | os.PathLike[str] | None = None,
        thrash_limit: int = 3,
        thrash_window: float = 60.0,
        legacy_lock: str | os.PathLike[str] | None = None,
        exit_when_orphaned: bool = True,
        backend: str | None = None,
        project_id: str | None = None,
        share: str | bool | None = None,
        build: str | None = None,
    ) -> None:
        self._options = Options(
            app=app,
            project=project,
            mode=mode,
            token=token,
            timeouts=timeouts,
            runtime_dir=runtime_dir,
            thrash=ThrashPolicy(thrash_limit, thrash_window),
            legacy_lock=legacy_lock,
            exit_when_orphaned=exit_when_orphaned,
            backend=backend,
            project_id=project_id,
            share=share,
            build=build,
        )
        # The client that started us; 1 means no client to outlive (init, a container).
        parent = os.getppid()
        self._parent = parent if exit_when_orphaned and parent > 1 else None
        self._on_save = on_save
        self._on_deposed = on_deposed
        self._on_duplicate = on_duplicate
        #: The predecessor's handoff payload, or ``None``.
        self.handoff: dict[str, Any] | None = None
        #: The fencing generation of this reign (0 when not a holder).
        self.generation = 0
        #: How the claim ended (claimed_free, claimed_stale, succeeded, duplicate).
        self.outcome: Outcome | None = None
        #: The holder's record when this process runs as a duplicate.
        self.holder: HolderRecord | None = None
        self.settings: Settings | None = None
        #: Where holders meet (:mod:`highlander._shell.seam`), chosen at the claim.
        self._backend: Backend | None = None
        self._reign: Reign | None = None
        self._incumbent: Incumbent | None = None
        #: Orders the serving thread's start against release() from another thread.
        self._serving = threading.Lock()
        self._thread: threading.Thread | None = None
        self._deposed = threading.Event()
        self._ended_as: Outcome | None = None
        self._released = False
        self._task_group: Any = None
        #: OBSERVE/WARN: the background look at the holder (tests join it).
        self._probe: threading.Thread | None = None

    # -- the sync API -----------------------------------------------------------

    @classmethod
    def ensure_singleton(cls, **options: Any) -> Highlander:
        """Return once this process holds the project (AUTO) or knows it is a duplicate.

        Meant for the top of ``main()``.  If the project cannot be taken over
        (wrong token, thrash limit, an unreachable or foreign holder, ...) the
        process ends with status 1 and one line on stderr saying why and what
        to do; use ``Highlander(...).acquire()`` to handle the error yourself.

        Called again in the same process for the same app and project, it
        returns the first handle.  For another app or project while this
        process holds one it raises :class:`ConfigurationError` (it does not
        leave the process: the held claim stays).
        """
        handle = cls(**options)
        try:
            return handle._acquire_once(reuse=True)
        except AlreadyHoldingError:
            raise
        except HighlanderError as exc:
            flush()
            sys.stderr.write(f"highlander: {exc}\n")
            sys.stderr.flush()
            raise SystemExit(1) from None

    def acquire(self, timeout: float | None = None) -> Highlander:
        """Claim the project like :meth:`ensure_singleton`, raising instead of exiting.

        ``timeout`` (seconds) bounds the whole wait, however many attempts
        it takes; when it runs out, :class:`AcquireTimeoutError` (the holder
        keeps the project).  ``None`` (the default) waits as long as the
        holder makes progress, within the configured ``Timeouts``; ``0``
        takes only a free project.  Again on a handle that holds (or runs as
        a duplicate): returns it.  Raises :class:`ConfigurationError` if
        this process already holds the project through another handle, or
        holds another app or project.
        """
        return self._acquire_once(reuse=False, timeout=checked_timeout(timeout))

    def __enter__(self) -> Highlander:
        """``with Highlander(...) as hl:`` acquires (like :meth:`acquire`) ..."""
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """... and releases on the way out, exception or not (never suppresses it)."""
        self.release()

    def _acquire_once(self, *, reuse: bool, timeout: float | None = None) -> Highlander:
        with hold():
            settings = self._resolve()
            existing = one_claim.find(settings)
            if existing is self or (reuse and existing is not None):
                return existing
            if existing is not None and existing.is_holder:
                raise one_claim.claimed_twice(settings)
            self._acquire(settings, timeout)
        one_claim.remember(self)
        return self

    def _acquire(self, settings: Settings, timeout: float | None) -> None:
        from highlander._host.blocking import run_blocking  # noqa: PLC0415 - at the claim

        reign = run_blocking(self._claim(settings, timeout, None))
        if reign is None:
            self._become_duplicate(settings)
            return
        self._begin(reign)
        self._thread = start_daemon(
            self._thread_main, f"highlander-{settings.app}", after_claims=False
        )
        atexit.register(self.release)

    def _thread_main(self) -> None:
        # Everything the serving side needs is imported here, after the claim,
        # on this thread: the caller has long returned from acquire().  It runs
        # on a small selectors loop, not asyncio (2 MB less for an idle holder).
        from highlander._host.loop import SelectorLoop  # noqa: PLC0415

        incumbent = self._new_incumbent()
        if incumbent is None:
            return  # released before we got going
        # The HMAC key is derived at the first conversation, not now: the frames'
        # code would cost every idle holder memory, and the newcomer derives its
        # own key meanwhile anyway.
        loop = SelectorLoop()
        loop.run(incumbent.serve, loop, self._parent)

    # -- the async API (highlander._async_api) -----------------------------------

    async def __aenter__(self) -> Highlander:
        from highlander._async_api import enter  # noqa: PLC0415

        return await enter(self)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        from highlander._async_api import leave  # noqa: PLC0415

        return await leave(self, exc_type, exc, tb)

    # -- state ------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        """The mode in effect."""
        assert self.settings is not None, "acquire() first"
        return self.settings.mode

    def release(self) -> None:
        """Give the project up cleanly; idempotent, also runs at interpreter exit.

        In a forked child it does nothing: the project is the parent's.
        """
        if self._reign is None or self._released or self._deposed.is_set():
            return
        if not self._reign.lock.held:
            # A forked child (whose copies were closed at fork), or a reign
            # that is ending itself right now (stepping down, orphaned).
            return
        with self._serving:
            self._released = True
            incumbent, reign = self._incumbent, self._reign
        self._stop_serving(incumbent)
        if incumbent is None or incumbent.outcome is None:
            reign.listener.close(unlink=not (incumbent and incumbent.handed_over))
            reign.lock.release()
            assert self.settings is not None
            self.settings.events.emit(Event.RELEASED, generation=self.generation)
        with contextlib.suppress(Exception):
            atexit.unregister(self.release)

    # -- internals --------------------------------------------------------------

    def _resolve(self) -> Settings:
        if self.settings is None:
            self.settings = self._options.resolve()
        return self.settings

    def _begin(self, reign: Reign) -> None:
        self._reign = reign
        self.handoff = reign.handoff
        self.generation = reign.record.generation
        self.outcome = reign.outcome

    async def _claim(
        self, settings: Settings, timeout: float | None, waiter: Waiter | None
    ) -> Reign | None:
        """The one claim, for the sync and the async API (:mod:`highlander._shell.claiming`)."""
        if self._backend is None:  # loaded at the claim, not at the import
            from highlander._shell.backend import backend_for  # noqa: PLC0415

            self._backend = backend_for(settings)
        return await claim(settings, self._backend, timeout, waiter)

    def _become_duplicate(self, settings: Settings) -> None:
        """Run beside the holder: the verdict now, the signed look at the holder meanwhile."""
        from highlander._shell.observe import become_duplicate  # noqa: PLC0415

        assert self._backend is not None
        self.outcome = Outcome.DUPLICATE
        self.holder, self._probe = become_duplicate(settings, self._on_duplicate, self._backend)

    def _new_incumbent(self) -> Incumbent | None:
        """The server of this reign; ``None`` if release() came first."""
        from highlander._shell.incumbent import Incumbent  # noqa: PLC0415 - off the claim path

        assert self.settings is not None and self._reign is not None and self._backend
        with self._serving:
            if self._released:
                return None
            self._incumbent = Incumbent(
                self.settings,
                self._reign,
                on_save=self._on_save,
                on_deposed=self._when_deposed,
                backend=self._backend,
                sessions=self._sessions_for_reign(),
            )
            return self._incumbent

    async def _when_deposed(self, outcome: Outcome, runtime: Runtime) -> None:
        from highlander._ending import run_deposed_hook  # noqa: PLC0415 - on the serving loop

        self._ended_as = outcome
        self._deposed.set()
        await run_deposed_hook(runtime, self._on_deposed)

    def _stop_serving(self, incumbent: Incumbent | None) -> None:
        # The thread is waited for, not only its server: still importing the
        # serving side (incumbent None) when the interpreter shuts down, it
        # crashes CPython 3.11 (SIGSEGV in the import lock; docs/reliability.md).
        thread = self._thread
        if incumbent is not None:
            incumbent.stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
