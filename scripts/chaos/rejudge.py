"""Judge the kept evidence of an etcd chaos run again (``--keep DIR``), without running it.

    .venv/bin/python -m scripts.chaos.rejudge /tmp/evidence [--show N]

The processes come back from ``procs.jsonl``, the events, witness, save and
check logs from their files, and what the harness saw beside them (the end
of the run, the last holder, what was left behind) from ``run.json``.  The
judge is the run's own (:func:`scripts.chaos.etcd_main.verdict`), so a
change to it can be tried on a failure that took half an hour to find.
Evidence kept before ``run.json`` existed is judged with what can be
derived (the end of the run from the harness's last SIGKILLs, the last
holder from ``--final-pid``); the lists only the run could make (processes
left behind, the end state) are then empty, and a note says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scripts.chaos.etcd_main import Evidence, Facts, verdict
from scripts.chaos.log import read_checks, read_saves, read_witness
from scripts.chaos.process import Adopted, Proc

#: The fields of a kept process that are :class:`Proc` fields of the same name.
_FIELDS = (
    "role", "start_time", "step", "cfg", "spawn_ns", "spawn_wall", "exit_ns", "exit_wall",
    "returncode", "killed_ns", "kill_began_ns", "self_stop_ns", "move_stop_ns", "ready", "ready_ns",
    "deposed", "kept", "stdout_bytes",
)  # fmt: skip


def _wall(ns: int | None, clock: list[list[float]]) -> float | None:
    """A monotonic time on the wall clock, via the nearest sample (older evidence)."""
    if ns is None:
        return None
    wall, mono = min(clock, key=lambda sample: abs(sample[1] - ns))
    return wall + (ns - mono) / 1e9


def load_procs(path: Path, clock: list[list[float]]) -> list[Proc]:
    """The processes of a kept run, as the judge knew them."""
    procs = []
    for line in path.read_text().splitlines():
        kept: dict[str, Any] = json.loads(line)
        kept.setdefault("spawn_wall", _wall(kept["spawn_ns"], clock))
        kept.setdefault("exit_wall", _wall(kept["exit_ns"], clock))
        fields = {name: kept[name] for name in _FIELDS if name in kept}
        proc = Proc(popen=Adopted(kept["pid"]), pidfd=-1, **fields)  # type: ignore[arg-type]
        proc.signals = [(name, before, after) for name, before, after in kept["signals"]]
        proc.starved = [(a, b) for a, b in kept.get("starved", [])]
        proc.stderr_tail = kept.get("stderr", "").encode()
        procs.append(proc)
    return procs


def _derived_facts(where: Path, procs: list[Proc], final_pid: int | None) -> Facts:
    """What ``run.json`` would say, as far as the evidence tells (older evidence)."""
    settings = json.loads((where / "etcd.json").read_text())
    kills = sorted(p.kill_began_ns for p in procs if p.kill_began_ns is not None)
    # end_all SIGKILLs every live process within moments: the last burst of kills.
    burst = [k for k in kills if kills and k >= kills[-1] - 1_000_000_000]
    return Facts(
        seed=int(settings.get("seed", 0)),
        events=len(json.loads((where / "steps.json").read_text())),
        ttl=int(settings["HIGHLANDER_ETCD_TTL"]),
        ended_ns=(burst[0] - 1) if burst else None,
        final_pid=final_pid,
        duration_s=0.0,
        convergence_s=None,
        interventions=0,
        final_status=None,
        left_behind=[],
        members_left=[],
        final_problems=[],
        notes=["re-judged from evidence without run.json: left-behind and end-state unknown"],
        noops={},
        harness={},
        faults=[tuple(f) for f in json.loads((where / "member-faults.json").read_text())],
    )


def main(argv: list[str] | None = None) -> int:
    """Judge ``DIR`` again and print the report; 1 if a must-be-zero number is not zero."""
    parser = argparse.ArgumentParser(prog="python -m scripts.chaos.rejudge")
    parser.add_argument("evidence", type=Path, help="a directory --keep wrote (etcd runs)")
    parser.add_argument("--show", type=int, default=10**9, help="lines per list (default all)")
    parser.add_argument("--final-pid", type=int, help="the last holder (evidence without run.json)")
    args = parser.parse_args(argv)
    where: Path = args.evidence
    clock = json.loads((where / "clock.json").read_text())
    procs = load_procs(where / "procs.jsonl", clock)
    if (where / "run.json").exists():
        facts = Facts(**json.loads((where / "run.json").read_text()))
    else:
        facts = _derived_facts(where, procs, args.final_pid)
    events = [json.loads(line) for line in (where / "events.jsonl").read_text().splitlines()]
    evidence = Evidence(
        procs,
        sorted(events, key=lambda e: e.get("ts", 0.0)),
        read_witness(where / "witness.log"),
        [(wall, mono) for wall, mono in clock],
        read_saves(where / "saves.log"),
        read_checks(where / "checks.log"),
    )
    report = verdict(evidence, facts)
    report.show = args.show
    print(report.render())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
