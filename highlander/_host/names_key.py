"""The runtime directory's key for socket names: made by the first start, read by the rest.

Every user can list bound socket paths (``ss -xl``, ``/proc/net/unix``);
sockets are named by a keyed hash (:func:`highlander._host.rendezvous.project_paths`)
so that they do not tell another user which app runs for which project.
Read-only commands use :func:`read_names_key`, which creates nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os

from highlander._core.errors import UnsafeRuntimeDirError
from highlander._host.files import cannot_hold, open_regular, unsafe

#: The runtime directory's key for socket names (:func:`names_key`).
NAMES_KEY = "names.key"
_NAMES_KEY_BYTES = 32


def names_key(runtime_dir: str) -> bytes:
    """The per-user key that names sockets in ``runtime_dir``; created on first use.

    Random, 0600, in the 0700 directory: no other user can read it, so no
    other user can tell which socket belongs to which app and project.
    Published like the token secret: written under an ``O_EXCL`` private
    name, then hard-linked into place, so concurrent first starts agree.
    """
    path = os.path.join(runtime_dir, NAMES_KEY)
    for _ in range(3):
        key = read_names_key(runtime_dir)
        if key is not None:
            return key
        try:
            _publish_names_key(path)
        except OSError as exc:  # a full disk, mostly: one line that names the fix
            raise cannot_hold(exc, path) from exc
    raise UnsafeRuntimeDirError(f"{path} keeps vanishing: is something cleaning {runtime_dir}?")


def read_names_key(runtime_dir: str) -> bytes | None:
    """The key :func:`names_key` made, or ``None`` if there is none yet (creates nothing).

    Read-only commands use this: no key means no holder ever started here.
    """
    path = os.path.join(runtime_dir, NAMES_KEY)
    try:
        fd = open_regular(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _NAMES_KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != _NAMES_KEY_BYTES:
        raise unsafe(path, f"it holds {len(data)} bytes, not a {_NAMES_KEY_BYTES}-byte key")
    return data


def _publish_names_key(path: str) -> None:
    tmp = f"{path}.{os.urandom(6).hex()}.tmp"
    fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            if os.write(fd, os.urandom(_NAMES_KEY_BYTES)) != _NAMES_KEY_BYTES:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
        finally:
            os.close(fd)
        # A concurrent first start may have published its key: that one counts.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
