"""An app's name: its identity, used whole, and the part of its file names that stands for it.

Names given with ``app=`` / ``--app`` are never cut or rewritten: two
different names are two apps, whatever their characters or length.  The
runtime directory's file names are derived from the name
(:func:`app_stem`) so that they stay short and safe and still never
coincide for two names.  Pure: no I/O.
"""

from __future__ import annotations

import re

from highlander._core.errors import ConfigurationError
from highlander._core.sha import sha256_digest

#: Longest app name used as its own file-name stem (:func:`app_stem`); longer ones are hashed.
APP_MAX = 32
#: Longest app name accepted at all (:func:`check_app`): names are refused, never cut.
APP_NAME_MAX = 255
#: Hex digits of the hashes in file names.
HASH_CHARS = 16
_PLAIN_APP = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_UNSAFE_APP_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def check_app(app: str) -> str:
    """Return ``app`` unchanged if it can name an app; else a :class:`ConfigurationError`.

    An app's name is its identity and is used whole: never cut, never
    rewritten, so ``my/app``, ``my app`` and ``my_app`` are three apps.  Only
    a name that could not be shown or sent is refused (empty, control
    characters, not Unicode, longer than :data:`APP_NAME_MAX`).
    """
    fix = "pass another name (app='my-server', or --app my-server)"
    if not app:
        raise ConfigurationError(f"the app name is empty: {fix}")
    if len(app) > APP_NAME_MAX:
        raise ConfigurationError(
            f"the app name is {len(app)} characters; the limit is {APP_NAME_MAX}: {fix}"
        )
    if _CONTROL_CHARS.search(app):
        raise ConfigurationError(f"the app name {app!r} has a control character: {fix}")
    try:
        app.encode()
    except UnicodeEncodeError:
        raise ConfigurationError(f"the app name {app!r} is not valid Unicode: {fix}") from None
    return app


def app_stem(app: str) -> str:
    """The part of ``app``'s file names that stands for it; two apps never share one.

    A name of at most :data:`APP_MAX` characters from ``[A-Za-z0-9._-]``, not
    starting with a dot, is its own stem (the file names of earlier versions).
    Any other name gets a readable prefix, ``~`` and 16 hex digits of SHA-256
    of the exact name: ``~`` never occurs in a stem of the first kind, so a
    hashed stem cannot equal a plain one, and distinct names hash apart.
    """
    check_app(app)
    if len(app) <= APP_MAX and _PLAIN_APP.fullmatch(app):
        return app
    readable = _UNSAFE_APP_CHARS.sub("_", app).lstrip(".")[: APP_MAX - HASH_CHARS - 1]
    return f"{readable}~{short_hash(app.encode(), HASH_CHARS)}"


def short_hash(data: bytes, chars: int) -> str:
    """The first ``chars`` hex digits of SHA-256 of ``data``."""
    return sha256_digest(data).hex()[:chars]
