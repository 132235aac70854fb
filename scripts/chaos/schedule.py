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
WEIGHTS: dict[str, float] = {
    "start_normal": 20,  # a newcomer whose own save, later, is quick
    "start_slow": 10,  # ... is slow but keeps advancing (never killed)
    "start_hang": 10,  # ... stalls, advances forever, or hangs after SAVED
    "start_late_ack": 4,  # its first ACK lands at the incumbent's ACK deadline, +- 20 ms
    "start_stuck": 4,  # stops itself between SAVED's descriptors and ACK; its fate follows
    "start_low_nofile": 3,  # RLIMIT_NOFILE 48: a holder must back off EMFILE and serve on
    "sigkill_holder": 9,
    "sigstop_holder": 8,  # SIGCONT a few steps later, or left for a newcomer to kill
    "sigkill_newcomer": 3,  # a child that has not reported ready, whatever its phase
    "sigstop_newcomer": 3,  # ... resumed a few steps later
    "delete_socket": 6,
    "replace_socket": 8,  # a regular file, a stale socket, a FIFO, a symlink, a directory
    "corrupt_state": 7,
    "legacy_lock": 5,  # a pid file naming a dead pid (or a live bystander)
    "pid_reuse": 7,  # an unrelated `sleep` whose pid is written into .state
    "fill_disk": 2,  # the runtime dir's tmpfs filled to ENOSPC; `free_disk` follows
    "storm": 0.75,  # 64 newcomers back to back (about 1 step in 150)
    # Issue #11: the rendezvous taken from under the holder.
    "wipe_runtime_dir": 3,  # rm -rf of the runtime dir's contents, or of lock and socket only
    "switch_location": 3,  # a newcomer whose XDG_RUNTIME_DIR and TMPDIR point elsewhere
    "plant": 5,  # a FIFO, directory or symlink at .state, .events.jsonl, the socket or the lock
    "fork_worker": 3,  # a holder forks a worker, then is SIGKILLed; the worker lives on
    # A loaded machine: the holder kept off the CPU (SCHED_IDLE beside a busy loop).
    "starve_holder": 2,  # `feed_holder` follows
}
STARTS: tuple[str, ...] = ("start_normal", "start_slow", "start_hang", "start_late_ack")
STARTS += ("start_stuck", "start_low_nofile", "switch_location", "fork_worker")
#: Steps the schedule places itself, a few steps after the step that needs them:
#: an operator undoing what would otherwise block every newcomer.
FOLLOW_UPS = {
    "fill_disk": "free_disk",
    "replace_socket": "clear_socket_dir",
    "plant": "clear_plant",
    "starve_holder": "feed_holder",
}
#: Parameters a follow-up carries over from the step that needs it.
CARRIED = ("target",)
#: Where ``plant`` puts something, and what.
PLANT_TARGETS = ("state", "events", "socket", "lock")
PLANT_VARIANTS = ("fifo", "directory", "symlink_null", "symlink_dangling")
WIPE_VARIANTS = ("whole", "lock_and_socket")
#: Newcomers in a storm.
STORM = 64
#: What replaces the socket file.
SOCKET_DAMAGE = ("file", "stale", "fifo", "symlink", "directory")
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
    #: Signals due with this step, to what an earlier step stopped or started:
    #: ``("SIGCONT", index)`` or ``("SIGKILL", index)``.
    due: tuple[tuple[str, int], ...] = ()


def _start_hang(rng: random.Random) -> dict[str, Any]:
    how = rng.choice(["stall", "forever", "deposed"])
    if how == "stall":
        return {"save": "stall", "steps": rng.randint(1, 2), "step_delay": 0.02}
    if how == "forever":
        return {"save": "forever", "step_delay": 0.15}
    return {"save": "normal", "steps": 1, "step_delay": 0.01, "hang_when_deposed": True}


def _newcomer(rng: random.Random, **extra: Any) -> dict[str, Any]:
    return {"save": "normal", "steps": rng.randint(1, 3), "step_delay": 0.01, **extra}


def _start_stuck(rng: random.Random) -> dict[str, Any]:
    """Stops itself before its ACK; then SIGCONT, SIGKILL, or stopped until the settling."""
    fate = rng.choice(["SIGCONT", "SIGKILL", None])
    return _newcomer(rng, before_ack={"stop": True, "once": True}, fate=fate, after=_later(rng))


def _replace_socket(rng: random.Random) -> dict[str, Any]:
    variant = rng.choice(SOCKET_DAMAGE)
    if variant == "directory":  # removed `after` steps later, as an operator would
        return {"variant": variant, "after": _later(rng)}
    return {"variant": variant}


def _plant(rng: random.Random) -> dict[str, Any]:
    """What to plant where; ``after`` when the plant blocks newcomers by design (anything at
    the lock file, a directory at the record or the socket) or is never replaced by the
    library (the event log): an operator removes it then, as the one-line error says."""
    target, variant = rng.choice(PLANT_TARGETS), rng.choice(PLANT_VARIANTS)
    params: dict[str, Any] = {"target": target, "variant": variant}
    if target in ("lock", "events") or variant == "directory":
        params["after"] = _later(rng)
    return params


def _fork_worker(rng: random.Random) -> dict[str, Any]:
    """A newcomer that, once holding, forks a worker; SIGKILLed 1 or 2 steps later."""
    return _newcomer(rng, fork_worker=True, fate="SIGKILL", after=rng.randint(1, 2))


def _ack_deadline(rng: random.Random) -> float:
    """The incumbent's ACK deadline (``request``), give or take 20 ms."""
    return round(TIMEOUTS["request"] + rng.uniform(-0.02, 0.02), 4)


def _later(rng: random.Random) -> int:
    return rng.randint(1, 4)


#: How each kind draws its parameters (every draw comes from the one seeded generator).
_PARAMS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "start_normal": _newcomer,
    # Each step well inside the 0.6 s stall timeout, the whole save inside the ceiling.
    "start_slow": lambda rng: {
        "save": "normal",
        "steps": rng.randint(4, 7),
        "step_delay": round(rng.uniform(0.1, 0.2), 3),
    },
    "start_hang": _start_hang,
    # The incumbent gives up on the ACK at `request`: land within 20 ms of it.
    "start_late_ack": lambda rng: _newcomer(
        rng, before_ack={"delay": _ack_deadline(rng), "once": True}
    ),
    "start_stuck": _start_stuck,
    "start_low_nofile": lambda rng: _newcomer(rng, nofile=48),
    # None: never resumed by the harness; a newcomer must deal with it.
    "sigstop_holder": lambda rng: {
        "resume_after": None if rng.random() < 0.4 else rng.randint(1, 4)
    },
    # `pick`: which of the newcomers in flight (a fraction of their list, oldest first).
    "sigkill_newcomer": lambda rng: {"pick": round(rng.random(), 4)},
    "sigstop_newcomer": lambda rng: {"pick": round(rng.random(), 4), "after": _later(rng)},
    "replace_socket": _replace_socket,
    "legacy_lock": lambda rng: {"variant": "live" if rng.random() < 0.25 else "dead"},
    "pid_reuse": lambda rng: {"variant": rng.choice(["reused", "forged"])},
    "fill_disk": lambda rng: {"after": _later(rng)},
    "storm": lambda rng: {"count": STORM, **_newcomer(rng)},
    "wipe_runtime_dir": lambda rng: {"variant": rng.choice(WIPE_VARIANTS)},
    "switch_location": _newcomer,
    "plant": _plant,
    "fork_worker": _fork_worker,
    "starve_holder": lambda rng: {"after": _later(rng)},
}
#: Parameters of a start step that are the harness's, not the child's.
_HARNESS_KEYS = ("fate", "after", "count")


@dataclass(frozen=True)
class Tables:
    """What a schedule is drawn from: the kinds and their weights, how each kind draws
    its parameters, and the follow-ups placed after the steps that need them.

    The local harness's are the module's own (:data:`LOCAL`); the etcd run has its
    own (scripts/chaos/etcd_schedule.py).
    """

    weights: dict[str, float]
    params: dict[str, Callable[[random.Random], dict[str, Any]]]
    follow_ups: dict[str, str]


def make_schedule(
    seed: int,
    count: int,
    state_damage: tuple[str, ...] = STATE_DAMAGE,
    tables: Tables | None = None,
) -> list[Step]:
    """``count`` steps for ``seed``; the first one always starts a holder.

    A ``free_disk`` follows each ``fill_disk``, a ``clear_socket_dir`` each
    directory put at the socket path, and a ``clear_plant`` each plant that
    blocks newcomers or is never replaced, 1 to 4 steps later (in place of
    that step's draw; the next free index if two fall together).  ``tables``:
    what to draw from (default: the local harness's, :data:`LOCAL`).
    """
    tables = tables or LOCAL
    rng = random.Random(seed)
    kinds, weights = list(tables.weights), list(tables.weights.values())
    drafts: list[tuple[str, dict[str, Any], float]] = []
    placed: dict[int, tuple[str, dict[str, Any]]] = {}
    for index in range(count):
        if index in placed:
            kind, params = placed.pop(index)
        else:
            kind = "start_normal" if index == 0 else rng.choices(kinds, weights)[0]
            params = _draw(rng, kind, state_damage, tables.params)
        follow = tables.follow_ups.get(kind)
        if follow and "after" in params:
            at = index + params["after"]
            while at in placed:
                at += 1
            carried = {key: params[key] for key in CARRIED if key in params}
            placed[at] = (follow, {"origin": index, **carried})
        # A quarter of the steps follow the previous one at once (overlapping chaos).
        gap = rng.uniform(0.0, 0.05) if rng.random() < 0.25 else rng.uniform(0.15, 0.6)
        drafts.append((kind, params, round(gap, 3)))
    due: dict[int, list[tuple[str, int]]] = {}
    for index, (kind, params, _) in enumerate(drafts):
        after = params.get("resume_after", params.get("after"))
        what = {"sigstop_holder": "SIGCONT", "sigstop_newcomer": "SIGCONT"}.get(kind)
        what = params.get("fate") if kind in ("start_stuck", "fork_worker") else what
        if what and after is not None and index + after < count:
            due.setdefault(index + after, []).append((what, index))
    return [
        Step(index, kind, params, gap, tuple(due.get(index, ())))
        for index, (kind, params, gap) in enumerate(drafts)
    ]


def _draw(
    rng: random.Random,
    kind: str,
    state_damage: tuple[str, ...],
    params_of: dict[str, Callable[[random.Random], dict[str, Any]]],
) -> dict[str, Any]:
    if kind == "corrupt_state":
        params: dict[str, Any] = {"variant": rng.choice(state_damage)}
        if params["variant"] == "bad_pid":
            params["pid"] = rng.choice(BAD_PIDS)
        return params
    return params_of[kind](rng) if kind in params_of else {}


#: The local harness's tables (``make chaos``).
LOCAL = Tables(WEIGHTS, _PARAMS, FOLLOW_UPS)


#: How often every holder of the run calls ``check_current()`` (seconds).
CHECK_LOOP = 0.02


def child_config(params: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    """The HL_CHILD configuration of tests/programs/child.py for a start step.

    ``files``: the run-wide logs (``witness``, ``save_witness``, ``check_witness``,
    ``event_mirror``) and ``legacy_lock``.
    """
    cfg: dict[str, Any] = {
        "app": "chaos",
        **files,
        "check_loop": CHECK_LOOP,
        "timeouts": TIMEOUTS,
        "thrash_limit": 1_000_000,
        "hold": 3600,
    }
    cfg.update({k: v for k, v in params.items() if k not in _HARNESS_KEYS})
    return cfg
