"""Helpers for the sans-IO protocol core tests (their fixtures are in tests/conftest.py).

A fake clock, fixed nonces, the test key, message factories and a full-handshake
driver.  Everything is deterministic: no clock is read, no randomness is drawn.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from highlander._core.connection import Closed
from highlander._core.deadlines import Timeouts
from highlander._core.messages import (
    AckSuccession,
    Hello,
    Intent,
    Message,
    ProgressReport,
    Save,
    Saved,
    Status,
)
from highlander._core.pair import ConnectionPair
from highlander._core.state import Role

#: The newcomer's and the incumbent's session nonces in core tests.
CORE_NEWCOMER_NONCE = bytes.fromhex("11" * 16)
CORE_INCUMBENT_NONCE = bytes.fromhex("22" * 16)
#: A third nonce, for "another session".
CORE_OTHER_NONCE = bytes.fromhex("33" * 16)
CORE_PROJECT_KEY = hashlib.sha256(b"/project").digest()
#: derive_key(b"test-token", CORE_PROJECT_KEY), written out: deriving it here, when
#: the tests import it, would make every core test fail to load under a mutant
#: of derive_key instead of letting the tests that check it fail
#: (tests/core/test_core_gaps.py checks this value).
CORE_KEY = bytes.fromhex("c68a8d34273fc5766d410c02859291ae466d4ac1b69102256870674e3315ff35")
#: Small timeouts keep deadline arithmetic readable.
CORE_TIMEOUTS = Timeouts(hello=1, request=2, stall=3, ceiling=10, exit_grace=4, term_grace=1)
CORE_START = 100.0


class FakeClock:
    """A hand-driven monotonic clock: ``now()`` only moves when ``advance()`` is called."""

    def __init__(self, start: float = CORE_START) -> None:
        self._ticks: list[float] = [start]

    def now(self) -> float:
        """Return the current fake time."""
        return self._ticks[-1]

    def __call__(self) -> float:
        return self.now()

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ValueError("a monotonic clock does not go backwards")
        self._ticks.append(self._ticks[-1] + seconds)
        return self._ticks[-1]


def build_hello(nonce: bytes = CORE_INCUMBENT_NONCE, **overrides: Any) -> Hello:
    """Return a valid HELLO carrying the incumbent ``nonce``."""
    values: dict[str, Any] = {
        "pid": 4242,
        "start_time": 123_456,
        "exe": "/usr/bin/python3",
        "app": "demo-app",
        "generation": 7,
        "since_ms": 1_000,
        "nonce": nonce.hex(),
    }
    values.update(overrides)
    return Hello(**values)


def build_save(
    nonce: bytes = CORE_NEWCOMER_NONCE,
    echo: bytes = CORE_INCUMBENT_NONCE,
    **overrides: Any,
) -> Save:
    """Return a valid SAVE from the newcomer ``nonce`` echoing the incumbent ``echo``."""
    values: dict[str, Any] = {
        "pid": 4343,
        "start_time": 123_999,
        "nonce": nonce.hex(),
        "echo": echo.hex(),
        "intent": Intent.SUCCEED,
        "app": "shop-mcp",
    }
    values.update(overrides)
    return Save(**values)


def build_status(nonce: bytes = CORE_NEWCOMER_NONCE, echo: bytes = CORE_INCUMBENT_NONCE) -> Status:
    """Return a valid STATUS from the newcomer ``nonce`` echoing the incumbent ``echo``."""
    return Status(nonce=nonce.hex(), echo=echo.hex())


@dataclass
class Transcript:
    """What each side of a :class:`ConnectionPair` sent and received, in order."""

    sent: dict[Role, list[Message]] = field(default_factory=lambda: {r: [] for r in Role})
    received: dict[Role, list[Message | Closed]] = field(
        default_factory=lambda: {r: [] for r in Role}
    )

    def send(self, pair: ConnectionPair, sender: Role, message: Message) -> None:
        """Send ``message`` through ``pair`` and record both ends."""
        self.sent[sender].append(message)
        self.received[sender.peer].extend(pair.send(sender, message))


def run_handshake(
    pair: ConnectionPair,
    progress_steps: int,
    *,
    handoff: dict[str, Any] | None = None,
    transcript: Transcript | None = None,
) -> Transcript:
    """Drive ``pair`` through HELLO, SAVE, ``progress_steps`` PROGRESS, SAVED, ACK."""
    t = transcript if transcript is not None else Transcript()
    t.send(pair, Role.INCUMBENT, build_hello(pair.incumbent.local_nonce))
    t.send(pair, Role.NEWCOMER, build_save(pair.newcomer.local_nonce, pair.incumbent.local_nonce))
    for step in range(progress_steps):
        note = f"step {step + 1} of {progress_steps}"
        t.send(pair, Role.INCUMBENT, ProgressReport(step, step + 1, progress_steps, note))
    t.send(pair, Role.INCUMBENT, Saved(handoff=handoff, generation=7))
    t.send(pair, Role.NEWCOMER, AckSuccession())
    return t
