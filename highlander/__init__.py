"""Highlander: exactly one instance per project, handed over instead of shot.

::

    from highlander import Highlander
    hl = Highlander.ensure_singleton(app="my-server", on_save=save)

The secret comes from ``HIGHLANDER_TOKEN`` and the rollout stage from
``HIGHLANDER_MODE`` (observe, warn, auto).  Every error is a
:class:`HighlanderError`; see :mod:`highlander._core.errors` for the hierarchy.
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"

# Everything loads on first use (PEP 562), so ``import highlander`` costs
# nothing beyond this file and every module pays for what it actually touches.
_ERRORS = "highlander._core.errors"
_LAZY = {
    "AcquireTimeoutError": _ERRORS,
    "AuthenticationError": _ERRORS,
    "ConfigurationError": _ERRORS,
    "Deposed": _ERRORS,
    "EtcdError": _ERRORS,
    "EtcdUnavailableError": _ERRORS,
    "ForeignHolderError": _ERRORS,
    "HighlanderError": _ERRORS,
    "IncumbentUnreachableError": _ERRORS,
    "LocalProtocolError": _ERRORS,
    "ModeRefusedError": _ERRORS,
    "OtherAppError": _ERRORS,
    "ProjectIdError": _ERRORS,
    "ProtocolError": _ERRORS,
    "Reason": _ERRORS,
    "RemoteProtocolError": _ERRORS,
    "SaveFailedError": _ERRORS,
    "ShareRefusedError": _ERRORS,
    "SignatureError": _ERRORS,
    "SocketPathTooLongError": _ERRORS,
    "SuccessionRefused": _ERRORS,
    "TakeoverError": _ERRORS,
    "ThrashError": _ERRORS,
    "UnsafeFileError": _ERRORS,
    "UnsafeRuntimeDirError": _ERRORS,
    "UnsafeSecretError": _ERRORS,
    "VersionMismatchError": _ERRORS,
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
    from highlander._core.errors import (
        AcquireTimeoutError,
        AuthenticationError,
        ConfigurationError,
        Deposed,
        EtcdError,
        EtcdUnavailableError,
        ForeignHolderError,
        HighlanderError,
        IncumbentUnreachableError,
        LocalProtocolError,
        ModeRefusedError,
        OtherAppError,
        ProjectIdError,
        ProtocolError,
        Reason,
        RemoteProtocolError,
        SaveFailedError,
        ShareRefusedError,
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
    "EtcdError",
    "EtcdUnavailableError",
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
    "ProjectIdError",
    "ProtocolError",
    "Reason",
    "RemoteProtocolError",
    "SaveFailedError",
    "ShareRefusedError",
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
    # __import__ with a fromlist returns the submodule itself, and spares
    # ``import importlib`` (0.4 ms) on every start.
    value = getattr(__import__(module, fromlist=[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
