"""Core rules that mutation testing (`make mutate`, issue #19) found unpinned.

Each test says which mutant it kills; without it that change to the code
went unnoticed by every test.  Framing, deadlines, the connection's
accessors and the fix-naming hints in its messages.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from highlander._core.codec import HEADER, NEED_DATA, FrameDecoder, decode_payload, encode_frame
from highlander._core.connection import Closed, Connection
from highlander._core.deadlines import (
    QUEUED_EVIDENCE,
    Deadline,
    Phase,
    Sample,
    Timeouts,
    Watch,
    grace_again,
    looks_busy,
    spared_busy,
    starved,
)
from highlander._core.errors import ConfigurationError, RemoteProtocolError, SignatureError
from highlander._core.messages import Hello, ProgressReport, Save
from highlander._core.pair import ConnectionPair
from highlander._core.signing import derive_key
from highlander._core.state import Role, State
from tests.support.core import CORE_KEY, CORE_PROJECT_KEY, FakeClock, build_hello, build_save

NEW, INC = Role.NEWCOMER, Role.INCUMBENT


def test_the_suites_key_is_derived_from_its_token() -> None:
    # conftest writes the key out (see there); this keeps it honest.
    assert derive_key(b"test-token", CORE_PROJECT_KEY) == CORE_KEY


# -- framing ----------------------------------------------------------------------


def test_a_bad_header_behind_a_good_frame_raises_when_its_frame_is_next() -> None:
    # One read can bring a good frame and the next one's bad header: feed() checks only
    # the first; next_frame() must check the next (mutant: its _check_header() dropped).
    decoder = FrameDecoder(max_frame=100)
    body = b"{}" + bytes(40)
    decoder.feed(encode_frame(body) + HEADER.pack(101))
    assert decoder.next_frame() == body
    with pytest.raises(
        RemoteProtocolError, match=r"^frame length 101 exceeds the cap of 100 bytes$"
    ):
        decoder.next_frame()


def test_a_stream_cut_right_after_the_header_is_described_as_such(key: bytes) -> None:
    # Mutant `<=` in describe_partial: "4 of 4 header bytes" for a header that arrived.
    newcomer = Connection(NEW, key=key, nonce=bytes(16), now=0.0)
    newcomer.receive_data(HEADER.pack(40))
    assert newcomer.next_event(0.0) is NEED_DATA
    newcomer.receive_data(b"")
    with pytest.raises(RemoteProtocolError) as info:
        newcomer.next_event(0.0)
    assert str(info.value) == "truncated frame: stream ended after 0 of 40 body bytes"


def test_a_frame_over_the_cap_says_to_send_less() -> None:
    with pytest.raises(
        Exception, match=r"^frame body is 101 bytes; the cap is 100: send less data$"
    ):
        encode_frame(bytes(101), max_frame=100)


def test_another_protocol_version_says_to_run_the_same_version() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_payload(b'{"seq":0,"type":"ACK_SUCCESSION","v":2}')
    assert str(info.value) == (
        "peer speaks protocol version 2; this Highlander speaks 1: "
        "run the same Highlander version on both sides"
    )


# -- the hints that name the fix --------------------------------------------------


def test_a_foreign_token_is_told_to_give_every_client_the_same_token(
    key: bytes, incumbent_nonce: bytes, make_hello: Callable[..., Hello]
) -> None:
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0)
    frame = incumbent.send(make_hello(incumbent_nonce), 0.0)
    newcomer = Connection(NEW, key=derive_key(b"other", CORE_PROJECT_KEY), nonce=bytes(16), now=0)
    newcomer.receive_data(frame)
    with pytest.raises(SignatureError) as info:
        newcomer.next_event(0.0)
    assert str(info.value) == (
        "bad MAC on HELLO: the peer does not share this HIGHLANDER_TOKEN "
        "(or the frame was altered); give every client the same token"
    )


def test_a_replayed_request_is_named_as_one(
    key: bytes,
    incumbent_nonce: bytes,
    other_nonce: bytes,
    make_hello: Callable[..., Hello],
    make_save: Callable[..., Save],
) -> None:
    incumbent = Connection(INC, key=key, nonce=incumbent_nonce, now=0.0)
    incumbent.send(make_hello(incumbent_nonce), 0.0)
    stale = Connection(NEW, key=key, nonce=bytes.fromhex("44" * 16), now=0.0)
    stale.receive_data(
        Connection(INC, key=key, nonce=other_nonce, now=0).send(make_hello(other_nonce), 0)
    )
    stale.next_event(0.0)
    incumbent.receive_data(stale.send(make_save(bytes.fromhex("44" * 16), other_nonce), 0.0))
    with pytest.raises(SignatureError) as info:
        incumbent.next_event(0.0)
    assert str(info.value) == (
        "SAVE echoes the nonce of another session: it was replayed from an earlier exchange"
    )


# -- deadlines --------------------------------------------------------------------


def test_timeouts_check_every_field_and_ceiling_against_stall() -> None:
    assert Timeouts(stall=7, ceiling=7).checked().ceiling == 7  # ceiling == stall is allowed
    with pytest.raises(ConfigurationError) as info:
        Timeouts(stall=7, ceiling=6.5).checked()
    assert str(info.value) == "timeouts.ceiling (6.5) must be >= timeouts.stall (7)"
    for bad in (0, -1, float("inf"), float("nan"), True, "2", None):
        with pytest.raises(ConfigurationError) as info:
            Timeouts(request=bad).checked()  # type: ignore[arg-type]
        assert str(info.value) == (
            f"timeouts.request must be a positive number of seconds, got {bad!r}"
        )
    assert Timeouts(hello=1e-9, ceiling=1e300).checked().hello == 1e-9


def test_every_phase_has_its_own_timeout() -> None:
    timeouts = Timeouts(hello=1, request=2, stall=3, ceiling=4, exit_grace=5, term_grace=6)
    assert {phase: timeouts.for_phase(phase) for phase in Phase} == {
        Phase.HELLO: 1,
        Phase.REPLY: 1,
        Phase.STALL: 3,
        Phase.CEILING: 4,
        Phase.EXIT: 5,
        Phase.REQUEST: 2,
        Phase.ACK: 2,
    }


def test_watch_progress_says_whether_it_advanced() -> None:
    watch = Watch(Timeouts(stall=3, ceiling=10))
    assert watch.deadline is None
    assert watch.last_counter == -1
    watch.enter(Phase.STALL, 100.0)
    assert watch.progress(0, 101.0) is True  # 0 advances from "none yet"
    assert watch.progress(0, 102.0) is False
    assert watch.last_counter == 0
    assert watch.deadline == Deadline(Phase.STALL, 104.0)


@pytest.mark.parametrize("phase", [Phase.STALL, Phase.EXIT])
def test_watch_spares_only_a_stall_or_exit(phase: Phase) -> None:
    watch = Watch(Timeouts(stall=3, ceiling=10, exit_grace=4))
    watch.enter(phase, 100.0)
    assert watch.spare(105.0) is True
    assert watch.deadline == Deadline(phase, 105.0 + watch.timeouts.for_phase(phase))


@pytest.mark.parametrize("phase", [None, Phase.HELLO, Phase.REPLY, Phase.REQUEST, Phase.ACK])
def test_watch_does_not_spare_another_phase(phase: Phase | None) -> None:
    watch = Watch(Timeouts())
    watch.enter(phase, 100.0)
    before = watch.deadline
    assert watch.spare(105.0) is False
    assert watch.deadline == before


def test_a_sample_without_queued_time_counts_none() -> None:
    assert Sample("S", 1.5).queued == 0.0  # where the kernel does not tell


def test_looks_busy_at_its_boundaries() -> None:
    asleep = Sample("S", 1.0, 0.0)
    assert looks_busy(asleep, Sample("S", 1.0, QUEUED_EVIDENCE)) is True  # exactly the evidence
    assert looks_busy(asleep, Sample("S", 1.0, 0.0099)) is False
    assert looks_busy(asleep, Sample("D", 1.0, 0.0)) is True  # waiting for the disk
    assert looks_busy(asleep, Sample("R", 1.0, 0.0)) is True
    assert looks_busy(Sample("T", 1.0), Sample("R", 2.0)) is False  # stopped before
    assert looks_busy(None, asleep) is False
    assert looks_busy(asleep, None) is False


def test_starved_at_its_boundaries() -> None:
    before = Sample("R", 1.0)
    assert starved(before, Sample("R", 1.5), 0.6) is True
    assert starved(before, Sample("R", 1.5), 0.5) is False  # used the whole limit: stuck
    assert starved(Sample("R", 3.0), Sample("R", 3.5), 1.0) is True  # a difference, not a sum
    assert starved(before, None, 0.6) is False
    assert starved(Sample("S", 1.0), Sample("S", 1.0), 0.6) is False


def test_grace_again_while_starved_and_under_four_graces() -> None:
    before, starving, stuck = Sample("R", 1.0), Sample("R", 1.2), Sample("S", 1.0)
    assert grace_again(before, starving, elapsed=3.99, limit=1.0) is True
    assert grace_again(before, starving, elapsed=4.0, limit=1.0) is False  # STARVED_CAP graces
    assert grace_again(before, starving, elapsed=7.9, limit=2.0) is True  # the cap scales
    assert grace_again(Sample("S", 1.0), stuck, elapsed=0.5, limit=1.0) is False  # not starved
    assert grace_again(before, Sample("R", 2.5), elapsed=0.5, limit=1.0) is False  # used the CPU


def test_spared_busy_at_its_boundaries() -> None:
    assert spared_busy(elapsed=8.0, cpu=2.0, ceiling=2.0) is True  # both exactly at the cap
    assert spared_busy(elapsed=8.0, cpu=2.01, ceiling=2.0) is False
    assert spared_busy(elapsed=8.01, cpu=0.0, ceiling=2.0) is False


# -- the connection's accessors ---------------------------------------------------


def test_a_fresh_connection_has_seen_no_progress(pair: ConnectionPair) -> None:
    assert pair.newcomer.last_progress == -1  # documented: -1 before any PROGRESS
    assert pair.incumbent.last_progress == -1


def test_progress_zero_is_the_first_advance(pair: ConnectionPair, clock: FakeClock) -> None:
    pair.send(INC, build_hello(pair.incumbent.local_nonce))
    pair.send(NEW, build_save(pair.newcomer.local_nonce, pair.incumbent.local_nonce))
    clock.advance(2)
    pair.send(INC, ProgressReport(0))
    assert pair.newcomer.last_progress == 0
    assert pair.newcomer.deadline == Deadline(Phase.STALL, clock.now() + 3)


def test_connection_spare_restarts_a_missed_stall(pair: ConnectionPair, clock: FakeClock) -> None:
    pair.send(INC, build_hello(pair.incumbent.local_nonce))
    assert pair.newcomer.spare(clock.now()) is False  # READY waits for nothing
    pair.send(NEW, build_save(pair.newcomer.local_nonce, pair.incumbent.local_nonce))
    clock.advance(5)
    assert pair.newcomer.overdue(clock.now()) == Deadline(Phase.STALL, 103.0)
    assert pair.newcomer.spare(clock.now()) is True
    assert pair.newcomer.overdue(clock.now()) is None
    assert pair.newcomer.deadline == Deadline(Phase.STALL, 108.0)


def test_no_deadline_once_closed(pair: ConnectionPair) -> None:
    assert pair.deliver(NEW, b"") == [Closed(expected=False, state=State.AWAIT_HELLO)]
    assert pair.newcomer.state is State.CLOSED
    assert pair.newcomer.deadline is None
