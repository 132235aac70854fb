"""Highlander: exactly one instance per project, handed over instead of shot.

::

    from highlander import Highlander
    hl = Highlander.ensure_singleton(app="my-server", on_save=save)

The secret comes from ``HIGHLANDER_TOKEN`` and the rollout stage from
``HIGHLANDER_MODE`` (observe, warn, auto).  Every error is a
:class:`HighlanderError`; see :mod:`highlander._errors` for the hierarchy.
"""

from __future__ import annotations

from highlander._deadlines import Timeouts
from highlander._errors import (
    AuthenticationError,
    ConfigurationError,
    Deposed,
    ForeignHolderError,
    HighlanderError,
    IncumbentUnreachableError,
    LocalProtocolError,
    ModeRefusedError,
    ProtocolError,
    Reason,
    RemoteProtocolError,
    SaveFailedError,
    SignatureError,
    SocketPathTooLongError,
    SuccessionRefused,
    ThrashError,
    UnsafeRuntimeDirError,
    UnsafeSecretError,
    VersionMismatchError,
)
from highlander._events import Outcome
from highlander._highlander import Highlander
from highlander._modes import Mode
from highlander._progress import Progress
from highlander._record import HolderRecord

__version__ = "0.1.0.dev0"

__all__ = [
    "AuthenticationError",
    "ConfigurationError",
    "Deposed",
    "ForeignHolderError",
    "Highlander",
    "HighlanderError",
    "HolderRecord",
    "IncumbentUnreachableError",
    "LocalProtocolError",
    "Mode",
    "ModeRefusedError",
    "Outcome",
    "Progress",
    "ProtocolError",
    "Reason",
    "RemoteProtocolError",
    "SaveFailedError",
    "SignatureError",
    "SocketPathTooLongError",
    "SuccessionRefused",
    "ThrashError",
    "Timeouts",
    "UnsafeRuntimeDirError",
    "UnsafeSecretError",
    "VersionMismatchError",
    "__version__",
]
