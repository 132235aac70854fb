"""The commit rules over etcd (highlander._core.etcd_commit), branch by branch."""

from __future__ import annotations

import pytest

from highlander._core import etcd_commit as rules
from highlander._core.commit import Answer, Decision, Ending
from highlander._core.etcd_commit import Key, Reply, Then, Verdict

N_LEASE, I_LEASE, I_TOKEN = 7, 5, 40


def _classify(lease: int | None, token: int) -> Key:
    return rules.classify(
        lease, token, newcomer_lease=N_LEASE, incumbent_lease=I_LEASE, incumbent_token=I_TOKEN
    )


@pytest.mark.parametrize(
    ("lease", "token", "key"),
    [
        (None, 0, Key.ABSENT),
        (N_LEASE, 41, Key.OURS),
        (I_LEASE, I_TOKEN, Key.THEIRS_INTACT),
        (I_LEASE, I_TOKEN + 1, Key.OTHER),  # I's lease, another reign (never written so)
        (9, I_TOKEN, Key.OTHER),  # I's token on another lease
        (9, 99, Key.OTHER),
    ],
)
def test_classify(lease: int | None, token: int, key: Key) -> None:
    assert _classify(lease, token) is key


@pytest.mark.parametrize("ending", list(Ending))
def test_only_a_timely_ack_commits_and_only_the_deadline_tells(ending: Ending) -> None:
    timely = ending is Ending.ACK_IN_TIME
    assert rules.incumbent_decides(ending) is (Decision.COMMIT if timely else Decision.KEEP)
    assert rules.incumbent_tells(ending) is (ending is Ending.DEADLINE)


@pytest.mark.parametrize("key", [None, *Key])
def test_a_move_known_applied_deposes_and_a_missing_lease_keeps(key: Key | None) -> None:
    assert rules.incumbent_learns(Reply.SUCCEEDED, key) is Then.DEPOSED
    assert rules.incumbent_learns(Reply.NO_LEASE, key) is Then.KEEP
    assert rules.incumbent_learns(Reply.NO_LEASE, key, can_retry=False) is Then.KEEP


@pytest.mark.parametrize("key", [*Key])
def test_a_first_move_etcd_refused_outright_keeps_whatever_the_read(key: Key) -> None:
    # Full, or not permitted: nothing was applied, and no earlier attempt may still be.
    assert rules.incumbent_learns(Reply.DENIED, key) is Then.KEEP
    assert rules.incumbent_learns(Reply.DENIED, key, can_retry=False) is Then.KEEP


@pytest.mark.parametrize(
    ("reply", "unsure"),
    [(Reply.FAILED, False), (Reply.LOST, False), (Reply.LOST, True), (Reply.DENIED, True)],
)
@pytest.mark.parametrize(
    ("key", "then", "last_try"),
    [
        (Key.OURS, Then.DEPOSED, Then.DEPOSED),
        (Key.THEIRS_INTACT, Then.RETRY, Then.STEP_DOWN),  # never KEEP: a lost move may land
        (Key.ABSENT, Then.STEP_DOWN, Then.STEP_DOWN),
        (Key.OTHER, Then.STEP_DOWN, Then.STEP_DOWN),
    ],
)
def test_an_unsettled_move_is_settled_by_the_key(
    reply: Reply, unsure: bool, key: Key, then: Then, last_try: Then
) -> None:
    # A refusal after a lost attempt says nothing of that one: as a lost answer.
    assert rules.incumbent_learns(reply, key, unsure=unsure) is then
    assert rules.incumbent_learns(reply, key, can_retry=True, unsure=unsure) is then
    assert rules.incumbent_learns(reply, key, can_retry=False, unsure=unsure) is last_try


def test_an_unsettled_move_needs_the_key() -> None:
    with pytest.raises(AssertionError):
        rules.incumbent_learns(Reply.LOST)


@pytest.mark.parametrize("key", [None, *Key])
def test_refused_aborts_and_silence_fences_whatever_the_key(key: Key | None) -> None:
    assert rules.newcomer_decides(Answer.REFUSED, key) is Verdict.ABORT
    assert rules.newcomer_decides(Answer.SILENT, key) is Verdict.FENCE


@pytest.mark.parametrize("answer", [Answer.CLOSED, Answer.SEND_FAILED])
@pytest.mark.parametrize(
    ("key", "verdict"),
    [
        (Key.OURS, Verdict.COMMIT),
        (Key.THEIRS_INTACT, Verdict.ABORT),
        (Key.ABSENT, Verdict.CLAIM),
        (Key.OTHER, Verdict.ABORT),
    ],
)
def test_an_end_of_stream_is_decided_by_the_key(answer: Answer, key: Key, verdict: Verdict) -> None:
    assert rules.newcomer_decides(answer, key) is verdict
    assert rules.after_fence(key) is verdict


def test_an_end_of_stream_needs_the_key() -> None:
    with pytest.raises(AssertionError):
        rules.newcomer_decides(Answer.CLOSED)


@pytest.mark.parametrize("key", list(Key))
def test_a_claim_holds_only_on_our_lease(key: Key) -> None:
    assert rules.after_claim(key) is (Verdict.COMMIT if key is Key.OURS else Verdict.ABORT)


@pytest.mark.parametrize("ttl", [5.0, 12.5])
def test_the_fence_waits_one_ttl(ttl: float) -> None:
    assert rules.fence_wait(ttl) == ttl
