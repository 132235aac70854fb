"""Shared helpers for the sans-IO protocol core tests.

Only core helpers live here: a fake clock, fixed nonces, the test key, message
factories and a full-handshake driver.  Everything is deterministic: no clock
is read, no randomness is drawn.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from proctools import Children
from proctools_extra import Extras

from highlander._connection import Closed
from highlander._deadlines import Timeouts
from highlander._messages import (
    AckSuccession,
    Hello,
    Intent,
    Message,
    ProgressReport,
    Save,
    Saved,
    Status,
)
from highlander._pair import ConnectionPair
from highlander._state import Role

#: The sandbox fixture users get (docs/guide.md, "Testing your server"); the
#: examples' tests use it as theirs would.
pytest_plugins = ["highlander.testing"]

#: The newcomer's and the incumbent's session nonces in core tests.
CORE_NEWCOMER_NONCE = bytes.fromhex("11" * 16)
CORE_INCUMBENT_NONCE = bytes.fromhex("22" * 16)
#: A third nonce, for "another session".
CORE_OTHER_NONCE = bytes.fromhex("33" * 16)
CORE_PROJECT_KEY = hashlib.sha256(b"/project").digest()
#: derive_key(b"test-token", CORE_PROJECT_KEY), written out: deriving it here, when
#: conftest is imported, would make every core test fail to load under a mutant
#: of derive_key instead of letting the tests that check it fail
#: (tests/test_core_gaps.py checks this value).
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


@pytest.fixture
def clock() -> FakeClock:
    """A fresh fake clock at :data:`CORE_START`."""
    return FakeClock()


@pytest.fixture(scope="session")
def key() -> bytes:
    """The HMAC key both sides share in core tests."""
    return CORE_KEY


@pytest.fixture(scope="session")
def core_timeouts() -> Timeouts:
    """Small, readable timeouts (hello=1, request=2, stall=3, ceiling=10, exit_grace=4)."""
    return CORE_TIMEOUTS


@pytest.fixture
def pair(key: bytes, clock: FakeClock, core_timeouts: Timeouts) -> ConnectionPair:
    """A newcomer and an incumbent wired back to back, on the fake ``clock``."""
    return ConnectionPair(
        key=key,
        newcomer_nonce=CORE_NEWCOMER_NONCE,
        incumbent_nonce=CORE_INCUMBENT_NONCE,
        clock=clock,
        timeouts=core_timeouts,
    )


@pytest.fixture(scope="session")
def make_hello() -> Callable[..., Hello]:
    """Factory: ``make_hello(nonce=..., **field_overrides)`` -> valid :class:`Hello`."""
    return build_hello


@pytest.fixture(scope="session")
def make_save() -> Callable[..., Save]:
    """Factory: ``make_save(nonce=..., echo=..., **field_overrides)`` -> valid :class:`Save`."""
    return build_save


@pytest.fixture(scope="session")
def make_status() -> Callable[..., Status]:
    """Factory: ``make_status(nonce=..., echo=...)`` -> valid :class:`Status`."""
    return build_status


@pytest.fixture(scope="session")
def handshake() -> Callable[..., Transcript]:
    """The :func:`run_handshake` driver, for tests that take helpers as fixtures."""
    return run_handshake


@pytest.fixture(scope="session")
def newcomer_nonce() -> bytes:
    """The newcomer's 16-byte session nonce used by :func:`pair`."""
    return CORE_NEWCOMER_NONCE


@pytest.fixture(scope="session")
def incumbent_nonce() -> bytes:
    """The incumbent's 16-byte session nonce used by :func:`pair`."""
    return CORE_INCUMBENT_NONCE


@pytest.fixture(scope="session")
def other_nonce() -> bytes:
    """A nonce belonging to neither side of :func:`pair` (another session)."""
    return CORE_OTHER_NONCE


# -- real processes ----------------------------------------------------------------


@pytest.fixture(autouse=True, scope="session")
def private_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A HOME of the suite's own: Highlander keeps per-user state there (the fencing
    floor, a squatted default's fallback), and the tests must not leave any in the
    real one.  Children inherit it through the environment."""
    home = tmp_path_factory.mktemp("home")
    old = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        yield home
    finally:
        if old is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = old


@pytest.fixture
def kids(tmp_path: Path) -> Iterator[Children]:
    children = Children(tmp_path)
    try:
        yield children
    finally:
        children.cleanup()


@pytest.fixture
def extras(kids: Children) -> Iterator[Extras]:
    more = Extras(kids)
    try:
        yield more
    finally:
        more.cleanup()
