"""A failed chaos run keeps its evidence without ``--keep``: a failure found under load
may not come back on the next run, and a report alone cannot be analysed."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.append(str(SCRIPTS))

import chaos  # noqa: E402
import chaos_report  # noqa: E402


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
