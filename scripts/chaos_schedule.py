"""The chaos schedule: a list of steps drawn from ``random.Random(seed)`` alone.

The schedule is fixed by the seed before anything runs (kinds, their
parameters and the pause after each step); only the targets ("the holder")
are resolved when a step runs, from what the harness has seen by then.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Step kinds and their weights in the draw.
WEIGHTS: dict[str, int] = {
    "start_normal": 20,  # a newcomer whose own save, later, is quick
    "start_slow": 10,  # ... is slow but keeps advancing (never killed)
    "start_hang": 10,  # ... stalls, advances forever, or hangs after SAVED
    "sigkill_holder": 9,
    "sigstop_holder": 8,  # SIGCONT a few steps later, or left for a newcomer to kill
    "delete_socket": 6,
    "replace_socket": 6,  # a regular file or a stale (unbound) socket file
    "corrupt_state": 7,
    "legacy_lock": 5,  # a pid file naming a dead pid (or a live bystander)
    "pid_reuse": 7,  # an unrelated `sleep` whose pid is written into .state
}
STARTS = ("start_normal", "start_slow", "start_hang")
#: Ways to damage ``.state``: not JSON, cut short, every field of the wrong type, empty,
#: and well-typed but impossible values (a pid no process can have, a generation
#: past the protocol's 63 bits).
STATE_DAMAGE = ("garbage", "truncated", "wrong_types", "empty", "bad_pid", "huge_generation")
#: The impossible pids ``bad_pid`` draws from.
BAD_PIDS = (0, -1, 2**40)

#: Timeouts every child uses: each step settles within a few seconds.
TIMEOUTS = {
    "hello": 0.5,
    "stall": 0.6,
    "ceiling": 2.0,
    "exit_grace": 0.5,
    "term_grace": 0.3,
    "request": 2.0,
}


@dataclass(frozen=True)
class Step:
    """One scheduled event: ``kind`` with ``params``, then a pause of ``gap`` seconds."""

    index: int
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    gap: float = 0.0
    #: Indices of earlier SIGSTOP steps whose SIGCONT is due with this step.
    resume: tuple[int, ...] = ()


def _start_hang(rng: random.Random) -> dict[str, Any]:
    how = rng.choice(["stall", "forever", "deposed"])
    if how == "stall":
        return {"save": "stall", "steps": rng.randint(1, 2), "step_delay": 0.02}
    if how == "forever":
        return {"save": "forever", "step_delay": 0.15}
    return {"save": "normal", "steps": 1, "step_delay": 0.01, "hang_when_deposed": True}


#: How each kind draws its parameters (every draw comes from the one seeded generator).
_PARAMS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "start_normal": lambda rng: {"save": "normal", "steps": rng.randint(1, 3), "step_delay": 0.01},
    # Each step well inside the 0.6 s stall timeout, the whole save inside the ceiling.
    "start_slow": lambda rng: {
        "save": "normal",
        "steps": rng.randint(4, 7),
        "step_delay": round(rng.uniform(0.1, 0.2), 3),
    },
    "start_hang": _start_hang,
    # None: never resumed by the harness; a newcomer must deal with it.
    "sigstop_holder": lambda rng: {
        "resume_after": None if rng.random() < 0.4 else rng.randint(1, 4)
    },
    "replace_socket": lambda rng: {"variant": rng.choice(["file", "stale"])},
    "legacy_lock": lambda rng: {"variant": "live" if rng.random() < 0.25 else "dead"},
    "pid_reuse": lambda rng: {"variant": rng.choice(["reused", "forged"])},
}


def make_schedule(
    seed: int, count: int, state_damage: tuple[str, ...] = STATE_DAMAGE
) -> list[Step]:
    """``count`` steps for ``seed``; the first one always starts a holder."""
    rng = random.Random(seed)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    drafts: list[tuple[str, dict[str, Any], float]] = []
    for index in range(count):
        kind = "start_normal" if index == 0 else rng.choices(kinds, weights)[0]
        if kind == "corrupt_state":
            params = {"variant": rng.choice(state_damage)}
            if params["variant"] == "bad_pid":
                params["pid"] = rng.choice(BAD_PIDS)
        else:
            params = _PARAMS[kind](rng) if kind in _PARAMS else {}
        # A quarter of the steps follow the previous one at once (overlapping chaos).
        gap = rng.uniform(0.0, 0.05) if rng.random() < 0.25 else rng.uniform(0.15, 0.6)
        drafts.append((kind, params, round(gap, 3)))
    resumes: dict[int, list[int]] = {}
    for index, (kind, params, _) in enumerate(drafts):
        after = params.get("resume_after")
        if kind == "sigstop_holder" and after is not None and index + after < count:
            resumes.setdefault(index + after, []).append(index)
    return [
        Step(index, kind, params, gap, tuple(resumes.get(index, ())))
        for index, (kind, params, gap) in enumerate(drafts)
    ]


def child_config(params: dict[str, Any], witness: str, legacy_lock: str) -> dict[str, Any]:
    """The HL_CHILD configuration of tests/programs/child.py for a start step."""
    cfg: dict[str, Any] = {
        "app": "chaos",
        "witness": witness,
        "timeouts": TIMEOUTS,
        "thrash_limit": 1_000_000,
        "legacy_lock": legacy_lock,
        "hold": 3600,
    }
    cfg.update(params)
    return cfg
