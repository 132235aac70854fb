"""What the two exhaustive model checks share: the report, the trace back, counting traces.

``tests/core/test_model_check.py`` (the local handover) and
``tests/core/test_etcd_model_check.py`` (the handover over etcd) each search
their own state graph breadth first; this module holds what does not depend
on the model.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    """What one exhaustive search found."""

    states: int = 0
    transitions: int = 0
    terminal: int = 0
    traces: int = 0
    #: The first (shortest, breadth first) trace to each kind of violation.
    violations: dict[str, list[str]] = field(default_factory=dict)
    #: (side, fault, step) of every fault taken.
    faults: set[tuple[str, str, Any]] = field(default_factory=set)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)


def trace_back(parents: Mapping[Any, tuple[Any, str] | None], state: Hashable) -> list[str]:
    """The labels of the steps from the start to ``state``, following ``parents``."""
    steps: list[str] = []
    link = parents[state]
    while link is not None:
        state, label = link
        steps.append(label)
        link = parents[state]
    return steps[::-1]


def count_traces(root: Hashable, edges: Mapping[Any, Sequence[Any]]) -> int:
    """Paths from ``root`` to terminal states, by DP in topological order (Kahn).

    Both graphs are acyclic: every step consumes or sends one of a bounded
    number of frames or moves a side (or etcd, or a clock) forward, and a
    stop happens once per side.
    """
    indegree: collections.Counter[Any] = collections.Counter()
    for outs in edges.values():
        indegree.update(outs)
    paths: collections.Counter[Any] = collections.Counter({root: 1})
    ready, done, traces = [root], 0, 0
    while ready:
        here = ready.pop()
        done += 1
        outs = edges[here]
        if not outs:
            traces += paths[here]
        for there in outs:
            paths[there] += paths[here]
            indegree[there] -= 1
            if indegree[there] == 0:
                ready.append(there)
    assert done == len(edges), "the state graph has a cycle: count traces another way"
    return traces


def describe(report: Report) -> str:
    """The counts, for humans (printed by a test under ``pytest -s``)."""
    lines = [
        f"states: {report.states}",
        f"transitions: {report.transitions}",
        f"terminal states: {report.terminal}",
        f"complete traces: {report.traces}",
        f"(side, fault, step) triples visited: {len(report.faults)}",
    ]
    lines += [
        f"  {count:6d} terminal states: {what}" for what, count in sorted(report.outcomes.items())
    ]
    for what, trace in report.violations.items():
        lines.append(f"VIOLATION {what}:")
        lines += [f"  {i:2d}. {step}" for i, step in enumerate(trace, 1)]
    return "\n".join(lines)
