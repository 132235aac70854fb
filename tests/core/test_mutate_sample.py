"""A fixed sample of `make mutate` (issue #19) in the normal suite: every mutant is killed.

30 mutants, drawn with a fixed seed from the rules that decide who holds the
project (the state table, authentication, framing, the watch, the commit
point: scripts/mutate/main.py's SAMPLED_SCOPES), each run against the core's fast
tests.  A change that leaves one of them alive weakened a test of those
rules.  About 20 s; the whole run is `make mutate`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZE = 30


def test_every_sampled_mutant_of_the_core_rules_is_killed(tmp_path: Path) -> None:
    verdicts = tmp_path / "verdicts.json"
    command = [sys.executable, "-m", "scripts.mutate", "--quiet", "--json", str(verdicts)]
    run = subprocess.run(
        [*command, "--sample", str(SIZE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(verdicts.read_text(encoding="utf-8"))
    assert len(results) == SIZE
    alive = [
        f"{r['where']}: {r['key']} ({r['verdict']})" for r in results if r["verdict"] != "killed"
    ]
    assert alive == [], "\n".join(alive)
