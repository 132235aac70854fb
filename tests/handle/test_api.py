"""The public handle, in-process: claim, release, fencing, configuration errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from highlander import ConfigurationError, Deposed, Highlander, Mode, Outcome
from highlander._host import log as _log


@pytest.fixture(autouse=True)
def _logs_written_inside_the_test() -> Iterator[None]:
    """Log lines render on a thread: write them before pytest stops capturing."""
    yield
    _log.flush()


def _handle(tmp_path: Path, **options: object) -> Highlander:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    return Highlander(
        app="api",
        project=str(project),
        runtime_dir=str(tmp_path / "rt"),
        token="api-test-token-0123456789",
        exit_when_orphaned=False,
        **options,  # type: ignore[arg-type]
    )


def test_release_right_after_acquire_is_clean(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Unhandled exceptions in the serving thread fail the test (pytest's
    # threadexception plugin with warnings as errors).
    for generation in range(1, 21):
        hl = _handle(tmp_path).acquire()
        assert hl.is_holder
        assert hl.generation == generation
        assert hl.outcome is Outcome.CLAIMED_FREE  # release removed the socket
        hl.release()
        assert not hl.is_holder
        assert not list((tmp_path / "rt").glob("*.sock"))
    assert capfd.readouterr().out == ""


def test_check_current_fences_a_released_holder(tmp_path: Path) -> None:
    hl = _handle(tmp_path).acquire()
    hl.check_current()
    hl.release()
    with pytest.raises(Deposed, match="generation 1"):
        hl.check_current()
    hl.release()  # idempotent


def test_check_current_sees_a_newer_generation_on_disk(tmp_path: Path) -> None:
    first = _handle(tmp_path).acquire()
    first.release()
    second = _handle(tmp_path).acquire()
    try:
        # A holder that believes it is current but whose generation is over.
        first._released = False
        with pytest.raises(Deposed, match="generation 2"):
            first.check_current()
        second.check_current()
    finally:
        first._released = True
        second.release()


@pytest.mark.parametrize("bad", ["OBSERVER", "kill", ""])
def test_bad_mode_names_the_valid_ones(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigurationError, match="observe, warn, auto"):
        _handle(tmp_path, mode=bad or " ").acquire()


def test_mode_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGHLANDER_MODE", "warn")
    hl = _handle(tmp_path).acquire()
    try:
        assert hl.mode is Mode.WARN
    finally:
        hl.release()
    hl = _handle(tmp_path, mode="OBSERVE").acquire()
    try:
        assert hl.mode is Mode.OBSERVE
    finally:
        hl.release()


def test_claiming_twice_in_one_process_is_an_error_not_a_suicide(tmp_path: Path) -> None:
    first = _handle(tmp_path).acquire()
    try:
        with pytest.raises(ConfigurationError, match="already holds"):
            _handle(tmp_path).acquire()
        assert first.is_holder
        first.check_current()
    finally:
        first.release()


def test_thrash_history_ignores_times_in_the_future() -> None:
    from highlander._host.modes import ThrashPolicy

    policy = ThrashPolicy(limit=2, window=60.0)
    now = 1_000_000_000_000
    assert policy.recent([now - 61_000, now - 1_000, now + 3_600_000], now) == [now - 1_000]
    assert policy.allows([now + 10**9] * 5, now)


@pytest.mark.parametrize(
    ("timeouts", "says"),
    [
        ({"hello": 0}, "timeouts.hello must be a positive number of seconds, got 0"),
        ({"stall": -1.0}, "timeouts.stall must be a positive"),
        ({"request": float("nan")}, "timeouts.request must be a positive"),
        ({"exit_grace": float("inf")}, "timeouts.exit_grace must be a positive"),
        ({"term_grace": True}, "timeouts.term_grace must be a positive"),
        ({"hello": "2"}, "timeouts.hello must be a positive"),
        ({"stall": 20.0, "ceiling": 10.0}, r"timeouts.ceiling \(10.0\) must be >= timeouts.stall"),
    ],
)
def test_bad_timeouts_are_refused_naming_the_field(
    tmp_path: Path, timeouts: dict[str, object], says: str
) -> None:
    from highlander import Timeouts

    handle = _handle(tmp_path, timeouts=Timeouts(**timeouts))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=says):
        handle.acquire()
    assert not list((tmp_path / "rt").glob("*.lock")), "refused before touching the project"


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"thrash_limit": 0}, "thrash limit must be an integer >= 1, got 0"),
        ({"thrash_limit": True}, "thrash limit must be an integer >= 1, got True"),
        ({"thrash_limit": 2.5}, "thrash limit must be an integer >= 1"),
        ({"thrash_window": 0}, "thrash window must be > 0 seconds, got 0"),
        ({"thrash_window": float("nan")}, "thrash window must be > 0 seconds"),
    ],
)
def test_bad_thrash_settings_are_refused_naming_them(
    tmp_path: Path, options: dict[str, object], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        _handle(tmp_path, **options).acquire()
