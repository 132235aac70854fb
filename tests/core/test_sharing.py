"""Share mode's rules (highlander._core.sharing): who attaches, who succeeds, who refuses."""

from __future__ import annotations

import itertools

import pytest

from highlander._core.errors import Reason
from highlander._core.messages import Attach, Hello
from highlander._core.sharing import (
    EXPLAINED,
    SETTLED,
    Build,
    Choice,
    ShareMode,
    compare,
    incumbent_admits,
    newcomer_chooses,
)

NONCE = "ab" * 16
FP = "0f" * 16


def hello(build: str = "1.0", fingerprint: str = FP, *, shares: bool = True) -> Hello:
    return Hello(
        pid=10, start_time=1, exe="/usr/bin/python3", app="notes", generation=3, since_ms=0,
        nonce=NONCE, build=build, fingerprint=fingerprint, shares=shares,
    )  # fmt: skip


def attach(build: str = "1.0", fingerprint: str = FP, app: str = "notes") -> Attach:
    return Attach(20, 2, NONCE, NONCE, app, build, fingerprint)


@pytest.mark.parametrize(
    ("ours", "theirs", "order"),
    [
        ("1.0", "1.0", 0),
        ("1.2", "1.2.0", 0),
        ("1.10", "1.9.9", 1),
        ("2", "10", -1),
        ("1.3rc1", "1.2", 1),
        ("1.2rc1", "1.2", None),
        ("abc", "def", None),
        ("", "1", None),
        ("file:1:2", "file:1:3", None),
    ],
)
def test_builds_compare_by_their_leading_numbers(ours: str, theirs: str, order: int | None) -> None:
    assert compare(ours, theirs) == order
    assert compare(theirs, ours) == (None if order is None else -order)


def test_share_mode_off_is_todays_succession_with_nothing_logged() -> None:
    assert newcomer_chooses(ShareMode.OFF, Build("1.0", FP), hello()).choice is Choice.SUCCEED
    assert newcomer_chooses(ShareMode.OFF, Build("1.0", FP), hello()).reason is None


@pytest.mark.parametrize("mode", [ShareMode.ON, ShareMode.ONLY])
def test_the_same_build_and_configuration_attaches(mode: ShareMode) -> None:
    assert newcomer_chooses(mode, Build("1.0", FP), hello()).choice is Choice.ATTACH
    assert newcomer_chooses(mode, Build("0.9", FP), hello()).choice is Choice.ATTACH  # older


@pytest.mark.parametrize("mode", [ShareMode.ON, ShareMode.ONLY])
def test_a_newer_build_succeeds_an_upgrade(mode: ShareMode) -> None:
    verdict = newcomer_chooses(mode, Build("1.1", "other"), hello())
    assert (verdict.choice, verdict.reason) == (Choice.SUCCEED, Reason.NEWER)


@pytest.mark.parametrize(
    ("mode", "choice"), [(ShareMode.ON, Choice.SUCCEED), (ShareMode.ONLY, Choice.REFUSE)]
)
def test_what_cannot_share_succeeds_or_refuses_with_the_reason(
    mode: ShareMode, choice: Choice
) -> None:
    differs = newcomer_chooses(mode, Build("1.0", "other"), hello())
    assert (differs.choice, differs.reason) == (choice, Reason.FINGERPRINT)
    unshared = newcomer_chooses(mode, Build("2.0", FP), hello(build="", shares=False))
    assert (unshared.choice, unshared.reason) == (choice, Reason.NO_SHARE)


@pytest.mark.parametrize("mode", [ShareMode.ON, ShareMode.ONLY])
def test_a_holder_that_has_just_claimed_is_asked_again_before_it_is_judged(
    mode: ShareMode,
) -> None:
    """Its server starts sharing a moment after the claim: relays re-attaching arrive then."""
    unshared = hello(build="", shares=False)
    young = newcomer_chooses(mode, Build("1.0", FP), unshared, SETTLED - 0.001)
    assert (young.choice, young.reason) == (Choice.WAIT, None)
    settled = newcomer_chooses(mode, Build("1.0", FP), unshared, SETTLED)
    assert settled.reason is Reason.NO_SHARE and settled.choice is not Choice.WAIT
    assert newcomer_chooses(mode, Build("1.0", FP), hello(), 0.0).choice is Choice.ATTACH
    off = newcomer_chooses(ShareMode.OFF, Build("1.0", FP), unshared, 0.0)
    assert off.choice is Choice.SUCCEED  # share mode off: today's succession, at once


def test_the_holder_checks_the_attach_again() -> None:
    ours = Build("1.0", FP)
    assert incumbent_admits(True, "notes", ours, attach()) is None
    assert incumbent_admits(True, "notes", ours, attach(build="0.9")) is None
    assert incumbent_admits(False, "notes", ours, attach()) is Reason.NO_SHARE
    assert incumbent_admits(True, "notes", ours, attach(app="other")) is Reason.OTHER_APP
    assert incumbent_admits(True, "notes", ours, attach(fingerprint="x")) is Reason.FINGERPRINT
    assert incumbent_admits(True, "notes", ours, attach(build="1.1")) is Reason.NEWER
    assert incumbent_admits(True, "notes", ours, attach(build="1.0-dirty")) is Reason.NEWER


def test_every_refusal_is_explained() -> None:
    for reason in (Reason.NO_SHARE, Reason.FINGERPRINT, Reason.NEWER, Reason.OTHER_APP):
        assert EXPLAINED[reason]


BUILDS = ["", "1", "1.0", "1.1", "2.0rc1", "2.0", "abc"]
PRINTS = ["", FP, "other"]


def test_both_sides_agree_over_the_whole_small_domain() -> None:
    """A newcomer attaches exactly where the holder admits it: never an ATTACH it refuses."""
    for mine, my_print, theirs, their_print, shares, mode, held in itertools.product(
        BUILDS, PRINTS, BUILDS, PRINTS, [True, False], list(ShareMode), [0.0, SETTLED]
    ):
        hello_ = hello(theirs, their_print, shares=shares)
        verdict = newcomer_chooses(mode, Build(mine, my_print), hello_, held)
        admitted = incumbent_admits(
            shares, "notes", Build(theirs, their_print), attach(mine, my_print)
        )
        expected = admitted is None and mode is not ShareMode.OFF
        assert (verdict.choice is Choice.ATTACH) == expected, (
            mine,
            my_print,
            theirs,
            their_print,
            shares,
            mode,
            held,
        )
