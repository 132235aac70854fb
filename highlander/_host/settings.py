"""Everything one Highlander instance needs to know, resolved once from arguments and env."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from highlander._core.deadlines import Timeouts
from highlander._core.errors import ConfigurationError, HighlanderError, UnsafeRuntimeDirError
from highlander._core.sharing import Build, ShareMode
from highlander._core.values import Value
from highlander._host.app_name import check_app
from highlander._host.event_log import EventLog
from highlander._host.fencing import floor_path
from highlander._host.fingerprint import share_mode
from highlander._host.log import warn_once
from highlander._host.modes import Mode, ThrashPolicy, resolve_mode
from highlander._host.rendezvous import (
    ProjectPaths,
    choose_runtime_dir,
    default_runtime_dir,
    ensure_runtime_dir,
    fall_back,
    names_key,
    project_key,
    project_paths,
    project_root,
    read_names_key,
)


def default_app() -> str:
    """The program's name: the script's stem, or its package for ``python -m pkg``."""
    main = sys.argv[0] if sys.argv and sys.argv[0] else "highlander"
    stem = os.path.splitext(os.path.basename(main))[0]
    if stem == "__main__":
        stem = os.path.basename(os.path.dirname(os.path.abspath(main))) or "highlander"
    return stem


def runtime_directory(explicit: str | os.PathLike[str] | None, env: Mapping[str, str]) -> str:
    """The runtime directory, created and verified; a squatted default falls back (once)."""
    directory = choose_runtime_dir(explicit, env=env)
    try:
        return ensure_runtime_dir(directory)
    except UnsafeRuntimeDirError as exc:
        uid = os.geteuid()
        if directory != default_runtime_dir(uid) or not exc.squatted:
            raise
        chosen = fall_back(uid, env, exc)
        warn_once(
            "runtime-fallback", "runtime_fallback", squatted=directory, now=chosen, why=str(exc)
        )
        return chosen


class Options(Value):
    """The options a :class:`~highlander.Highlander` handle was given, before resolving.

    Resolved (:meth:`resolve`) at the first acquire, not at construction,
    so a handle made at import time sees the environment its ``main()`` sets.
    """

    app: str | None
    project: str | os.PathLike[str] | None
    mode: Mode | str | None
    token: str | bytes | None
    timeouts: Timeouts | None
    runtime_dir: str | os.PathLike[str] | None
    thrash: ThrashPolicy
    legacy_lock: str | os.PathLike[str] | None
    exit_when_orphaned: bool
    backend: str | None = None
    project_id: str | None = None
    share: str | bool | None = None
    build: str | None = None

    def resolve(self) -> Settings:
        """Resolve every option (argument, then environment, then default)."""
        return Settings.resolve(
            app=self.app,
            project=self.project,
            mode=self.mode,
            token=self.token,
            timeouts=self.timeouts,
            runtime_dir=self.runtime_dir,
            thrash=self.thrash,
            legacy_lock=self.legacy_lock,
            exit_when_orphaned=self.exit_when_orphaned,
            backend=self.backend,
            project_id=self.project_id,
            share=self.share,
            build=self.build,
        )


class Settings:
    """Resolved options: names, paths, mode, timeouts, anti-thrash and the event log."""

    def __init__(
        self,
        *,
        app: str,
        root: str,
        paths: ProjectPaths,
        mode: Mode,
        timeouts: Timeouts,
        thrash: ThrashPolicy,
        events: EventLog,
        token: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        legacy_lock: str | None = None,
        exit_when_orphaned: bool = True,
        backend: str | None = None,
        project_id: str | None = None,
        lease_ttl: int = 5,
        share: ShareMode = ShareMode.OFF,
        build: str | None = None,
    ) -> None:
        self.app = app
        self.root = root
        self.paths = paths
        self.mode = mode
        self.timeouts = timeouts.checked()
        self.thrash = thrash.checked()
        self.events = events
        self.token = token
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.legacy_lock = legacy_lock
        self.exit_when_orphaned = exit_when_orphaned
        #: The etcd URL holders meet at (``None``: this machine), the project's id
        #: there (the same on every host) and the holder's lease TTL.
        self.backend = backend
        self.project_id = project_id
        self.lease_ttl = lease_ttl
        #: Share mode (docs/mcp.md), and the ``build=`` given (see :meth:`build`).
        self.share = share
        self._build_given = build
        self._build: Build | None = None
        self._key: bytes | None = None
        #: Where the fencing generation's floor outlives a wiped runtime directory.
        self.floor_path = floor_path(paths.base, self.env)

    @classmethod
    def resolve(
        cls,
        *,
        app: str | None,
        project: str | os.PathLike[str] | None,
        mode: Mode | str | None,
        token: str | bytes | None,
        timeouts: Timeouts | None,
        runtime_dir: str | os.PathLike[str] | None,
        thrash: ThrashPolicy | None = None,
        env: Mapping[str, str] | None = None,
        legacy_lock: str | os.PathLike[str] | None = None,
        exit_when_orphaned: bool = True,
        backend: str | None = None,
        project_id: str | None = None,
        share: str | bool | None = None,
        build: str | None = None,
    ) -> Settings:
        """Resolve every option (argument, then environment, then default)."""
        from highlander._host.backend_choice import choose_backend, lease_ttl  # noqa: PLC0415

        env = os.environ if env is None else env
        chosen_backend = choose_backend(backend, env)
        name = check_app(app or default_app())
        root = project_root(project, env=env)
        directory = runtime_directory(runtime_dir, env)
        paths = project_paths(directory, name, root, secret=names_key(directory))
        chosen = resolve_mode(mode, env)
        sharing = share_mode(share, env)
        if chosen_backend is not None and sharing is not ShareMode.OFF:
            raise ConfigurationError(
                "share mode serves the clients of one machine, and the backend is etcd: "
                "unset HIGHLANDER_SHARE (share=) or HIGHLANDER_BACKEND (backend=)"
            )
        if chosen_backend is not None:
            from highlander._host.project_id import derive  # noqa: PLC0415 - etcd only

            project_id = derive(root, project_id, env).key
        return cls(
            app=name,
            root=root,
            paths=paths,
            mode=chosen,
            timeouts=timeouts or Timeouts(),
            thrash=thrash or ThrashPolicy(),
            events=EventLog(paths.events, app=name, mode=chosen.value),
            token=token,
            env=env,
            legacy_lock=os.path.abspath(legacy_lock) if legacy_lock is not None else None,
            exit_when_orphaned=exit_when_orphaned,
            backend=chosen_backend,
            project_id=project_id if chosen_backend is not None else None,
            lease_ttl=lease_ttl(env) if chosen_backend is not None else 5,
            share=sharing,
            build=build,
        )

    def renamed(self, *, create: bool = False) -> bool:
        """Re-read the runtime directory's socket-name key; ``True`` if the socket moved.

        A wiped runtime directory loses its key, and the first start after
        the wipe makes a new one: a process that resolved its paths before
        would look for (or publish) the socket under the old name.  A claim
        re-reads it under the lock (``create``: making it if absent), and a
        newcomer that finds no socket re-reads it before it blames the holder.
        """
        directory = self.paths.runtime_dir
        try:
            secret = names_key(directory) if create else read_names_key(directory)
        except (OSError, HighlanderError):
            return False
        if secret is None:
            return False
        fresh = project_paths(directory, self.app, self.root, secret=secret)
        if fresh.socket == self.paths.socket:
            return False
        self.paths = fresh
        return True

    def build(self) -> Build:
        """This server's build and configuration fingerprint (worked out on first use)."""
        if self._build is None:
            from highlander._host.fingerprint import this_build  # noqa: PLC0415 - share mode only

            self._build = this_build(self._build_given, self.env)
        return self._build

    def key(self) -> bytes:
        """The HMAC key for this project, derived (HKDF) from the token on first use.

        Derived, never stored: two HMACs by the interpreter's SHA-256 take
        microseconds, less than reading a file back would.
        """
        if self._key is None:
            from highlander._core.signing import derive_key  # noqa: PLC0415 - a conversation's
            from highlander._host.token import resolve_token  # noqa: PLC0415

            directory = self.paths.runtime_dir
            secret = resolve_token(self.token, runtime_dir=directory, env=self.env).secret
            self._key = derive_key(secret, self.project_key())
        return self._key

    def shared_token(self) -> bool:
        """Whether the token was given (argument or ``HIGHLANDER_TOKEN``), not a per-user file."""
        from highlander._host.token import TOKEN_VAR  # noqa: PLC0415

        given = self.token if self.token is not None else self.env.get(TOKEN_VAR, "")
        return bool(given.strip())

    def project_key(self) -> bytes:
        """The project's 32-byte key: of its root here, of its id across hosts (etcd)."""
        if self.project_id is not None:
            return project_key("etcd-project:" + self.project_id)
        return project_key(self.root)


def checked_timeout(timeout: float | None) -> float | None:
    """The ``acquire(timeout=)`` value: ``None`` or seconds >= 0, else ConfigurationError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(
            f"acquire(timeout={timeout!r}): pass a number of seconds >= 0, or None to wait "
            "as long as the holder makes progress"
        )
    return None if timeout == float("inf") else float(timeout)
