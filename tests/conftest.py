"""The suite's shared fixtures: the protocol core's (helpers in tests/support/core.py) and
real processes' (tests/support/proctools.py), and a private HOME for every test.

Helpers are imported by full name (``from tests.support.proctools import ...``);
tests/README.md says why and which folder holds what.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from highlander._core.deadlines import Timeouts
from highlander._core.messages import (
    Hello,
    Save,
    Status,
)
from highlander._core.pair import ConnectionPair
from tests.support.core import (
    CORE_INCUMBENT_NONCE,
    CORE_KEY,
    CORE_NEWCOMER_NONCE,
    CORE_OTHER_NONCE,
    CORE_TIMEOUTS,
    FakeClock,
    Transcript,
    build_hello,
    build_save,
    build_status,
    run_handshake,
)
from tests.support.proctools import Children
from tests.support.proctools_extra import Extras

#: The sandbox fixture users get (docs/guide.md, "Testing your server"); the
#: examples' tests use it as theirs would.
pytest_plugins = ["highlander.testing"]


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


@pytest.fixture
def full_socket() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected pair whose first end cannot take one more byte (its peer has read nothing)."""
    left, right = socket.socketpair()
    with left, right:
        left.setblocking(False)
        with pytest.raises(BlockingIOError):
            while True:
                left.send(b"x" * 65536)
        yield left, right
