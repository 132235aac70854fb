"""A failed chaos run keeps its evidence without ``--keep``: a failure found under load
may not come back on the next run, and a report alone cannot be analysed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from scripts.chaos import main as chaos
from scripts.chaos import report as chaos_report
from tests.support.paths import REPO


@pytest.mark.timeout(120)
def test_a_failed_run_keeps_its_evidence(monkeypatch: pytest.MonkeyPatch) -> None:
    # The judge is the harness's own code: make it call this short run a failure.
    monkeypatch.setattr(chaos_report.Report, "ok", property(lambda self: False))
    report = chaos.run(4, 1, say=lambda line: None)
    kept = [n for n in report.notes if "evidence is kept in" in n]
    assert len(kept) == 1, report.notes
    where = Path(kept[0].rsplit(" ", 1)[1])
    try:
        assert where.name.startswith("highlander-chaos-evidence-seed1-")
        steps = json.loads((where / "steps.json").read_text())
        assert len(steps) >= 4  # every scheduled step, as run
        assert (where / "events.jsonl").stat().st_size > 0
        assert (where / "witness.log").exists() and (where / "clock.json").exists()
        assert "evidence is kept in" in report.render()
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.timeout(120)
def test_a_passing_run_keeps_nothing_unasked() -> None:
    before = set(Path(tempfile.gettempdir()).glob("highlander-chaos-evidence-*"))
    report = chaos.run(4, 2, say=lambda line: None)
    assert report.ok, report.render()
    assert not [n for n in report.notes if "evidence is kept" in n]
    assert set(Path(tempfile.gettempdir()).glob("highlander-chaos-evidence-*")) == before


@pytest.mark.timeout(120)
def test_a_sigterm_ends_every_child_and_unmounts() -> None:
    """timeout(1) or a CI runner stops a run with SIGTERM: it must unwind like Ctrl-C."""
    root = Path(tempfile.gettempdir())
    before = set(root.glob("highlander-chaos-*"))
    run = subprocess.Popen(
        [sys.executable, "-m", "scripts.chaos", "--events", "200", "--seed", "4"],
        cwd=REPO,  # ``scripts`` is a package there
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert run.stderr is not None
        line = run.stderr.readline()
        while line and not line.startswith(b"step 0:"):
            line = run.stderr.readline()
        (made,) = set(root.glob("highlander-chaos-*")) - before
        pid = int(line.split()[-1])  # "step 0: start_normal: started pid N"
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 128 + signal.SIGTERM
    assert not made.exists()
    with open("/proc/self/mounts") as mounts:
        assert str(made) not in mounts.read()
    assert not Path(f"/proc/{pid}").exists() or _now_another_process(pid)


def _now_another_process(pid: int) -> bool:
    # The pid may already belong to an unrelated new process: then it is not the child.
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return b"child.py" not in handle.read()


def test_the_event_tail_lets_go_of_a_deleted_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deleted log file held open keeps its blocks: on the run's 4 MiB tmpfs a few wipes
    filled the disk for good (seed 8: nobody could write a record at the settling)."""
    from scripts.chaos import log as chaos_log

    monkeypatch.setattr(chaos_log, "GONE_GRACE_S", 0.0)
    log = tmp_path / "p.events.jsonl"
    log.write_text('{"ts": 1, "event": "a"}\n')
    tail = chaos_log.EventTail(str(log))
    tail.poll()
    (fd,) = [entry[0] for entry in tail._files.values()]
    tail.poll()
    os.fstat(fd)  # still linked: kept open however often it is read
    with open(log, "a") as out:
        out.write('{"ts": 2, "event": "b"}\n')
    log.unlink()  # a wipe
    tail.poll()  # reads "b", then sees it deleted at its end
    tail.poll()  # past the grace: let go
    assert [e["event"] for e in tail.events()] == ["a", "b"]
    assert tail._files == {} and tail.files == 1
    with pytest.raises(OSError):
        os.fstat(fd)
    log.write_text('{"ts": 3, "event": "c"}\n')  # the next start's new log
    tail.poll()
    assert [e["event"] for e in tail.events()] == ["a", "b", "c"] and tail.files == 2
    tail.close()
