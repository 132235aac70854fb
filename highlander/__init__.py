"""Highlander: exactly one instance per project, handed over instead of shot.

::

    from highlander import Highlander
    hl = Highlander.ensure_singleton(app="my-server", on_save=save)

The secret comes from ``HIGHLANDER_TOKEN`` and the rollout stage from
``HIGHLANDER_MODE`` (observe, warn, auto).  Every error is a
:class:`HighlanderError`; see :mod:`highlander._core.errors` for the hierarchy.
"""

from __future__ import annotations

import importlib

from highlander._core.errors import (
    AcquireTimeoutError,
    AuthenticationError,
    ConfigurationError,
    Deposed,
    ForeignHolderError,
    HighlanderError,
    IncumbentUnreachableError,
    LocalProtocolError,
    ModeRefusedError,
    OtherAppError,
    ProtocolError,
    Reason,
    RemoteProtocolError,
    SaveFailedError,
    SignatureError,
    SocketPathTooLongError,
    SuccessionRefused,
    TakeoverError,
    ThrashError,
    UnsafeFileError,
    UnsafeRuntimeDirError,
    UnsafeSecretError,
    VersionMismatchError,
)

__version__ = "0.1.0.dev0"

# The rest loads on first use (PEP 562), so ``import highlander`` costs only the
# error hierarchy and every module pays for what it actually touches.
_LAZY = {
    "Highlander": "highlander._highlander",
    "HolderRecord": "highlander._host.record",
    "Mode": "highlander._host.modes",
    "Outcome": "highlander._host.event_log",
    "Progress": "highlander._shell.progress",
    "Timeouts": "highlander._core.deadlines",
}

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    from typing import Any

    from highlander._core.deadlines import Timeouts
    from highlander._highlander import Highlander
    from highlander._host.event_log import Outcome
    from highlander._host.modes import Mode
    from highlander._host.record import HolderRecord
    from highlander._shell.progress import Progress

__all__ = [
    "AcquireTimeoutError",
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
    "OtherAppError",
    "Outcome",
    "Progress",
    "ProtocolError",
    "Reason",
    "RemoteProtocolError",
    "SaveFailedError",
    "SignatureError",
    "SocketPathTooLongError",
    "SuccessionRefused",
    "TakeoverError",
    "ThrashError",
    "Timeouts",
    "UnsafeFileError",
    "UnsafeRuntimeDirError",
    "UnsafeSecretError",
    "VersionMismatchError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'highlander' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
