"""The key every etcd conversation of a project is sealed under: derived once, when first needed.

The channel key comes from the token and the project by cryptography's
HKDF (:func:`highlander._core.sealing.channel_key`); the first derivation
also imports cryptography, several milliseconds.  A newcomer derives it
right after writing its ``here``, while the holder reads it and answers
(``EtcdBackend._open_channel``); the holder when it starts serving.

Tried and measured, not kept: deriving it on a helper thread as soon as the
claim found the project held, to overlap the import with the queue's and the
``here``'s requests.  The helper's CPU work kept the GIL from the session's
thread at each answer: 91.8 ms against 88.0 ms median, 12 interleaved pairs
(docs/performance.md).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._host.settings import Settings


class ChannelKey:
    """The channel key of ``settings``' project (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        """Nothing is derived yet."""
        self._settings = settings
        self._key: bytes | None = None

    def get(self) -> bytes:
        """The key, derived at the first call."""
        if self._key is None:
            from highlander._core.sealing import channel_key  # noqa: PLC0415
            from highlander._host.token import resolve_token  # noqa: PLC0415

            settings = self._settings
            token = resolve_token(
                settings.token, runtime_dir=settings.paths.runtime_dir, env=settings.env
            )
            self._key = channel_key(token.secret, settings.project_key())
        return self._key
