"""The documented defaults and tables are the code's: docs/defaults.md and docs/protocol.md.

Issue #19: every `Timeouts` default could change by a second, the frame cap
by a byte, a phase's name or a waiting state unnoticed; nothing tied the
tables users read to the code.  These tests parse the tables.
"""

from __future__ import annotations

import re

import pytest

from highlander._core.codec import DEFAULT_MAX_FRAME
from highlander._core.deadlines import QUEUED_EVIDENCE, STARVED_CAP, Phase, Timeouts
from highlander._core.errors import Reason
from highlander._core.messages import MAX_HANDOFF_BYTES
from highlander._core.state import TRANSITIONS, WAITING, Move, Role, State
from tests.support.paths import DOCS

DEFAULTS = (DOCS / "defaults.md").read_text(encoding="utf-8")
PROTOCOL = (DOCS / "protocol.md").read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of any level."""
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#)", text + "\n#", re.S | re.M)
    assert match, f"no section {heading!r}"
    return match.group(1)


def _rows(section: str) -> list[list[str]]:
    """The body rows of the first table in ``section``, cells stripped."""
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert len(lines) > 2, section
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _seconds(cell: str) -> float:
    match = re.fullmatch(r"([\d.]+) s\b.*", cell)
    assert match, cell
    return float(match.group(1))


def test_timeouts_table_is_the_defaults() -> None:
    rows = _rows(_section(DEFAULTS, "Timeouts (`Timeouts(...)`)"))
    documented = {name.strip("`"): _seconds(default) for name, default, _ in rows}
    assert documented == Timeouts()._asdict()
    assert list(documented) == list(Timeouts.FIELDS)


def test_ceiling_equal_to_stall_is_allowed_as_documented() -> None:
    assert "`ceiling` at least\n`stall`" in DEFAULTS
    timeouts = Timeouts(stall=7, ceiling=7)
    assert timeouts.checked() is timeouts


def _limit(name: str) -> str:
    rows = _rows(_section(DEFAULTS, "Limits"))
    return next(value for row_name, value in rows if row_name == name)


def test_frame_and_handoff_limits_are_the_code() -> None:
    assert _limit("handoff payload") == "64 KiB of canonical JSON"
    assert MAX_HANDOFF_BYTES == 64 * 1024
    frame = re.fullmatch(r"([\d ]+) bytes \(handoff \+ 1 KiB envelope and MAC\)", _limit("frame"))
    assert frame, _limit("frame")
    assert int(frame.group(1).replace(" ", "")) == DEFAULT_MAX_FRAME == MAX_HANDOFF_BYTES + 1024


def test_starved_holder_limits_are_the_code() -> None:
    (row,) = [" | ".join(r) for r in _rows(_section(DEFAULTS, "Limits")) if "kernel" in r[0]]
    starved = re.search(r"\((\d+) ms or more since the last look\)", row)
    cap = re.search(r"never past (\d+) × `ceiling` of wall time", row)  # noqa: RUF001 - the doc's sign
    assert starved and cap, row
    assert int(starved.group(1)) / 1000 == QUEUED_EVIDENCE
    assert int(cap.group(1)) == STARVED_CAP


# -- docs/protocol.md --------------------------------------------------------------

_ROLES = {"newcomer": Role.NEWCOMER, "incumbent": Role.INCUMBENT}


def test_deadline_table_is_the_code() -> None:
    """§8: which state waits in which phase, the phase's name and its default."""
    rows = _rows(_section(PROTOCOL, "8. Deadlines"))
    waiting: dict[tuple[Role, State], Phase] = {}
    for side_state, phase_name, default, _ in rows:
        side, state = side_state.split(", ")
        if state == "after SIGTERM":
            assert phase_name == "`term_grace`"
            assert _seconds(default) == Timeouts().term_grace
            continue
        phase = Phase(phase_name.strip("`"))  # the names users see in events and errors
        assert _seconds(default) == Timeouts().for_phase(phase), phase
        if phase is not Phase.CEILING:  # the ceiling caps STALL; no state waits in it
            waiting[_ROLES[side], State[state]] = phase
    assert waiting == WAITING
    assert {phase.value for phase in Phase} == {"hello", "reply", "stall", "ceiling"} | {
        "exit",
        "request",
        "ack",
    }


def test_reason_codes_table_is_the_code() -> None:
    rows = _rows(_section(PROTOCOL, "7. Reason codes (`REFUSED.reason`)"))
    assert [code.strip("`") for code, _ in rows] == [reason.value for reason in Reason]


@pytest.mark.parametrize("role", list(Role))
def test_transition_table_is_the_code(role: Role) -> None:
    table = next(
        block
        for block in PROTOCOL.split("\n\n")
        if block.startswith("| role | state | sends / receives | message | next state |")
    )
    documented = {}
    for who, state, event, message, target in _rows(table):
        key = (_ROLES[who], State[state], Move.SENT if event == "sends" else Move.RECEIVED)
        documented[(*key, message)] = State[target]
    assert {k: v for k, v in documented.items() if k[0] is role} == {
        k: v for k, v in TRANSITIONS.items() if k[0] is role
    }
