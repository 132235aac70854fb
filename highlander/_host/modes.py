"""Rollout modes and the anti-thrash rule: what a newcomer may do to an incumbent.

* ``OBSERVE``: detect the incumbent and log it; never interfere.  The
  newcomer runs as a duplicate.
* ``WARN``: as OBSERVE, plus a warning on stderr naming the incumbent and an
  optional ``on_duplicate`` callback.
* ``AUTO`` (default): succession; the newcomer takes over.

Precedence: the ``mode=`` argument, then ``HIGHLANDER_MODE``, then AUTO.
An incumbent running in OBSERVE or WARN refuses to be deposed (``mode``):
a team that is still observing has not agreed to successions yet.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence

from highlander._core.errors import ConfigurationError
from highlander._core.values import Value

MODE_VAR = "HIGHLANDER_MODE"
#: Succession times this far ahead of our clock still count (clocks of one host agree).
_CLOCK_SKEW_MS = 1000


class Mode(enum.StrEnum):
    """The rollout stage: OBSERVE, WARN or AUTO (see the module docstring)."""

    OBSERVE = "observe"
    WARN = "warn"
    AUTO = "auto"

    @property
    def deposable(self) -> bool:
        """Whether an incumbent in this mode hands over to a newcomer."""
        return self is Mode.AUTO


def resolve_mode(explicit: Mode | str | None, env: Mapping[str, str] | None = None) -> Mode:
    """Return the mode in effect: ``explicit``, else ``HIGHLANDER_MODE``, else AUTO."""
    env = os.environ if env is None else env
    if explicit is not None:
        return _parse(explicit, "mode=")
    value = env.get(MODE_VAR, "").strip()
    return _parse(value, MODE_VAR) if value else Mode.AUTO


def _parse(value: Mode | str, source: str) -> Mode:
    if isinstance(value, Mode):
        return value
    try:
        return Mode(value.strip().lower())
    except ValueError:
        valid = ", ".join(mode.value for mode in Mode)
        raise ConfigurationError(
            f"{source} is {value!r}; valid modes are {valid} (case-insensitive)"
        ) from None


class ThrashPolicy(Value):
    """At most ``limit`` successions per ``window`` seconds; more would be a kill loop.

    Two clients that each restart their server can make "newest wins" depose
    back and forth forever; past the limit, newcomers are refused instead.
    """

    limit: int = 3
    window: float = 60.0

    def checked(self) -> ThrashPolicy:
        """Return ``self``; raise :class:`ConfigurationError` naming a bad value."""
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(f"thrash limit must be an integer >= 1, got {self.limit!r}")
        window = self.window
        if isinstance(window, bool) or not isinstance(window, int | float) or not window > 0:
            raise ConfigurationError(f"thrash window must be > 0 seconds, got {window!r}")
        return self

    def recent(self, history_ms: Sequence[int], now_ms: int) -> list[int]:
        """Return the succession times (Unix ms) that still count at ``now_ms``.

        Times in the future (a clock stepped back, a damaged record) are
        dropped: they would otherwise count forever.
        """
        horizon = now_ms - int(self.window * 1000)
        return [at for at in history_ms if horizon < at <= now_ms + _CLOCK_SKEW_MS]

    def allows(self, history_ms: Sequence[int], now_ms: int) -> bool:
        """Whether one more succession is allowed now."""
        return len(self.recent(history_ms, now_ms)) < self.limit

    def explain(self, history_ms: Sequence[int], now_ms: int) -> str:
        """A sentence saying why a succession is refused and how to change that."""
        count = len(self.recent(history_ms, now_ms))
        return (
            f"{count} successions in the last {self.window:g} s reached the limit of "
            f"{self.limit}: two clients are probably restarting the server in turn. Stop one "
            "of them, or raise the limit with thrash_limit= / thrash_window="
        )
