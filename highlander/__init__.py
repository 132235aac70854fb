"""Highlander: exactly one instance per project, handed over instead of shot.

The protocol core is importable without I/O; the process-level API arrives
with the socket shell.  Errors live in :mod:`highlander._errors` and are
re-exported here.
"""

from __future__ import annotations

from highlander._deadlines import Timeouts
from highlander._errors import (
    ConfigurationError,
    HighlanderError,
    LocalProtocolError,
    ProtocolError,
    Reason,
    RemoteProtocolError,
    SignatureError,
    SocketPathTooLongError,
    UnsafeRuntimeDirError,
    UnsafeSecretError,
)

__version__ = "0.1.0.dev0"

__all__ = [
    "ConfigurationError",
    "HighlanderError",
    "LocalProtocolError",
    "ProtocolError",
    "Reason",
    "RemoteProtocolError",
    "SignatureError",
    "SocketPathTooLongError",
    "Timeouts",
    "UnsafeRuntimeDirError",
    "UnsafeSecretError",
    "__version__",
]
