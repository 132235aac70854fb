"""#13 item 3: a waiting newcomer shows the holder's save moving, live, on its stderr.

At most one ``progress`` line a second, written while the save still runs
(not all at once when it ends), each stamped with the time of its event,
which is also its record's time in the event log.  Real processes: the
holder's save advances until the test lets it end, so "while the save runs"
is a fact of the test, not a timing guess.
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

from tests.support.proctools import WAIT, Child, Children, readable

LINE = re.compile(r"^timestamp='(?P<ts>[^']+)' level='(?P<level>\w+)' event='(?P<event>\w+)'")
COUNTER = re.compile(r"\bcounter=(\d+)\b")
PID = re.compile(r"\bpid=(\d+)\b")


def stamp(iso: str) -> float:
    """Seconds since the epoch of a line's ISO-8601 UTC timestamp."""
    return datetime.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class StderrLines:
    """A child's stderr, read line by line as it is written (bounded waits)."""

    def __init__(self, child: Child) -> None:
        assert child.proc.stderr is not None
        self.fd = child.proc.stderr.fileno()
        self.buffer = b""
        self.lines: list[str] = []

    def until(self, wanted: int, event: str) -> list[str]:
        """Read until ``wanted`` lines of ``event`` have been written; return those lines."""
        while len(self.of(event)) < wanted:
            if not readable([self.fd], WAIT):
                raise TimeoutError(f"{len(self.of(event))} {event} lines after {WAIT} s")
            chunk = os.read(self.fd, 65536)
            assert chunk, f"stderr closed after {self.lines}"
            self.buffer += chunk
            *done, self.buffer = self.buffer.split(b"\n")
            self.lines += [line.decode() for line in done]
        return self.of(event)

    def of(self, event: str) -> list[str]:
        return [line for line in self.lines if f" event='{event}' " in line]


def test_progress_lines_appear_while_the_save_runs_at_most_one_a_second(
    kids: Children, tmp_path: Path
) -> None:
    gate = tmp_path / "save-may-end"
    holder = kids.start(save="until", until=str(gate), step_delay=0.05)
    holder.wait_for("ready")
    newcomer = kids.start(hold=0)  # once it holds, it leaves (flushing its log)
    stderr = StderrLines(newcomer)
    live = stderr.until(3, "progress")
    # Three lines are on the newcomer's stderr and the save has not ended: it
    # cannot, until the gate exists.
    assert kids.events("saved") == []
    gate.touch()
    assert newcomer.wait_for("ready")["is_holder"]
    (saved,) = kids.events("saved")
    assert saved["pid"] == holder.pid

    stamps = [stamp(LINE.match(line)["ts"]) for line in live]  # type: ignore[index]
    assert all(at < saved["ts"] for at in stamps), "a progress line after the save ended"
    # At most one a second, by the lines' own timestamps (their text keeps
    # microseconds: 1e-5 s of rounding, no clock).
    assert len(stamps) - 1 <= stamps[-1] - stamps[0] + 1e-5, stamps

    # Stamped when the event happened: the event log's record of the same
    # frame has the same time.
    records = {(e["pid"], e["counter"]): e["ts"] for e in kids.events("progress") if "counter" in e}
    for line in live:
        pid = int(PID.search(line)[1])  # type: ignore[index]
        counter = int(COUNTER.search(line)[1])  # type: ignore[index]
        assert pid == newcomer.pid
        assert abs(stamp(LINE.match(line)["ts"]) - records[pid, counter]) < 1e-5, line  # type: ignore[index]

    status, out, _ = newcomer.finish()
    assert (status, out) == (0, b""), "the newcomer wrote to stdout"


def test_a_quick_save_prints_no_progress_line(kids: Children) -> None:
    holder = kids.start(steps=3, step_delay=0.01)
    holder.wait_for("ready")
    newcomer = kids.start(hold=0)
    assert newcomer.wait_for("ready")["is_holder"]
    status, out, err = newcomer.finish()
    assert (status, out) == (0, b"")
    lines = err.decode().splitlines()
    assert any(" event='claimed' " in line for line in lines), lines
    assert not [line for line in lines if " event='progress' " in line]
    assert len(kids.events("progress")) >= 3, "every step is still in the event log"
