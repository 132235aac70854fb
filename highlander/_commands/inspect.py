"""What the read-only commands (``status``, ``events``, ``doctor``) look at, creating nothing.

``Settings.resolve`` is for processes that claim: it creates the runtime
directory and the names key.  A command that only looks must leave no trace:
running ``highlander status`` where nothing ever ran must not make the
runtime directory, and must not add to any event log.  Here the runtime
directory is checked if it exists and left alone if not; the names key is
read, never made (no key: no holder ever started here, and no socket can
exist); events go nowhere.  The
per-user secret is the one exception: when a holder listens and runs without
``HIGHLANDER_TOKEN``, the signed STATUS needs that secret, and the holder
makes the same file at its first conversation anyway.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping

from highlander._core.deadlines import Timeouts
from highlander._core.errors import ConfigurationError
from highlander._host.app_name import HASH_CHARS, app_stem, check_app
from highlander._host.event_log import EventLog
from highlander._host.modes import ThrashPolicy, resolve_mode
from highlander._host.names_key import read_names_key
from highlander._host.record import read_record
from highlander._host.rendezvous import (
    choose_runtime_dir,
    project_key,
    project_paths,
    project_root,
    verify_runtime_dir,
)
from highlander._host.settings import Settings


class NoApp(ConfigurationError):  # noqa: N818 - a finding: nothing ran for this project
    """No app has state for this project in the runtime directory: no holder, nothing to show."""


def apps_for(project: str | None, runtime_dir: str | None, env: Mapping[str, str]) -> list[str]:
    """The apps that have state for ``project`` in the runtime directory, sorted, by name."""
    digest = project_key(project_root(project, env=env)).hex()[:HASH_CHARS]
    directory = choose_runtime_dir(runtime_dir, env=env)
    pattern = os.path.join(glob.escape(directory), f"*-{digest}.state")
    return sorted(_app_of(path, digest) for path in glob.glob(pattern))


def _app_of(path: str, digest: str) -> str:
    """The app whose record is at ``path``: a file name may be a hash of the app's name.

    The record names the app whole; it counts only if that name leads back
    to this very file (else the file name is all there is to go by).
    """
    stem = os.path.basename(path)[: -len(f"-{digest}.state")]
    record = read_record(path)
    if record is None:
        return stem
    try:
        return record.app if app_stem(record.app) == stem else stem
    except ConfigurationError:
        return stem


def only_app(project: str | None, runtime_dir: str | None, env: Mapping[str, str]) -> str:
    """The one app with state for this project; :class:`NoApp` or ConfigurationError if not one."""
    found = apps_for(project, runtime_dir, env)
    if len(found) == 1:
        return found[0]
    if not found:
        raise NoApp("no app has state for this project here: pass --app to name one")
    raise ConfigurationError(f"pass --app: apps with state for this project: {', '.join(found)}")


def look(
    *,
    app: str,
    project: str | None,
    runtime_dir: str | None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Settings for looking at ``app``'s holder: nothing is created, nothing is logged."""
    env = os.environ if env is None else env
    name = check_app(app)
    root = project_root(project, env=env)
    directory = choose_runtime_dir(runtime_dir, env=env)
    if os.path.lexists(directory):
        verify_runtime_dir(directory)
        secret = read_names_key(directory)
    else:
        secret = None
    paths = project_paths(directory, name, root, secret=secret)
    mode = resolve_mode(None, env)
    return Settings(
        app=name,
        root=root,
        paths=paths,
        mode=mode,
        timeouts=Timeouts(),
        thrash=ThrashPolicy(),
        events=EventLog(None, app=name, mode=mode.value, quiet=True),
        env=env,
    )
