"""The etcd chaos schedule (``--backend etcd``): the faults that mean something over etcd.

Drawn from ``random.Random(seed)`` alone, like the local schedule
(scripts/chaos/schedule.py, whose drawing it reuses with its own tables):
newcomers whose own save is quick, slow but advancing, or hanging (stalls,
or advances forever); newcomers whose first ACK lands at the incumbent's
deadline, or that stop themselves between SAVED and their ACK (then
SIGCONT, SIGKILL, or left stopped); storms of :data:`STORM` newcomers;
SIGKILL and SIGSTOP of the holder (SIGCONT a few steps later, or never:
the settling resumes it) and of newcomers in flight; holders that fork a
worker and are then SIGKILLed; and the cluster's own faults: SIGKILL or
SIGSTOP of the etcd leader or of a follower, restarted or resumed 1 to 4
steps later (one member at a time, so the cluster keeps its quorum); and the
leader SIGSTOPped exactly when a newcomer sends its ACK (it stops itself
there, the harness stops the leader and resumes it), so the incumbent's move
lands late, after an election; the leader is resumed 1 to 4 s later.  And
the holder's reign ended in etcd behind its back (``etcd_end_reign``: its
lease revoked early, as etcd 3.5.1 did itself, or its key deleted by hand;
scripts/chaos/etcd_data.py), after which it must step down by itself; and
the cluster's history compacted (``etcd_compact``), after which every watch
that resumes must list and watch again, losing nothing; and etcd full
(``etcd_full``: its NOSPACE alarm for 1 to 4 steps, never while a member is
down, whose restart waits for a health the alarm denies), also aimed at the
moment between an incumbent's accepting an ACK and its move
(``etcd_full_at_move``: the incumbent stops itself there, the harness fills
etcd and resumes it, so its move is refused and it takes its reign back).

Every start draws the simulated host of its child (``HIGHLANDER_HOST_ID``)
from :data:`HOSTS`, a storm one host per newcomer: three successions in four
cross hosts, where nobody may signal the holder and a hung one is fenced.

Left out, because they have no meaning on etcd (:data:`LOCAL_ONLY`): the
socket file deleted or replaced, the runtime directory wiped, things
planted at the rendezvous files, ``.state`` damaged or naming a bystander,
a full disk, the legacy lock, another XDG_RUNTIME_DIR.  The holders meet
in the holder key, not in those files.  Also left out: ``hang_when_deposed``
(a deposed process hung in its own ``on_deposed`` on another host can be
ended by nobody, by design), ``start_low_nofile`` and ``starve_holder``
(the etcd run keeps to the faults of issue #15; a starved holder is, for its
lease, a stopped one).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from scripts.chaos import schedule as local
from scripts.chaos.etcd_data import HOW
from scripts.chaos.schedule import Step, Tables

#: The simulated hosts a child is drawn on.
HOSTS = ("h1", "h2", "h3", "h4")
#: Newcomers in a storm (half the local storm: each one costs etcd round trips).
STORM = 32
#: Local harness step kinds the etcd schedule never draws (no meaning on etcd).
LOCAL_ONLY = frozenset(
    {
        "delete_socket",
        "replace_socket",
        "clear_socket_dir",
        "corrupt_state",
        "legacy_lock",
        "pid_reuse",
        "fill_disk",
        "free_disk",
        "wipe_runtime_dir",
        "switch_location",
        "plant",
        "clear_plant",
    }
)
#: The cluster's faults, and the follow-up that undoes each.
MEMBER_FAULTS = {
    "etcd_kill_leader": "etcd_restart",
    "etcd_stop_leader": "etcd_resume",
    "etcd_kill_follower": "etcd_restart",
    "etcd_stop_follower": "etcd_resume",
}

#: Step kinds and their weights in the draw (the local weights where the kind is shared).
WEIGHTS: dict[str, float] = {
    "start_normal": 20,
    "start_slow": 10,
    "start_hang": 10,
    "start_late_ack": 4,
    "start_stuck": 4,
    "sigkill_holder": 9,
    "sigstop_holder": 8,
    "sigkill_newcomer": 3,
    "sigstop_newcomer": 3,
    "storm": 0.75,
    "fork_worker": 3,
    "etcd_kill_leader": 1.5,
    "etcd_stop_leader": 1.5,
    "etcd_kill_follower": 1.5,
    "etcd_stop_follower": 1.5,
    "etcd_stop_at_commit": 2,
    "etcd_end_reign": 1.5,
    "etcd_compact": 1.5,
    "etcd_full": 1.5,
    "etcd_full_at_move": 1.5,
}


def _host(rng: random.Random) -> str:
    return rng.choice(HOSTS)


def _on_a_host(
    draw: Callable[[random.Random], dict[str, Any]],
) -> Callable[[random.Random], dict[str, Any]]:
    """A start's local draw, then the host its child runs on."""
    return lambda rng: {**draw(rng), "host": _host(rng)}


def _start_hang(rng: random.Random) -> dict[str, Any]:
    """A save that stalls, or advances forever (``hang_when_deposed`` is left out)."""
    if rng.random() < 0.5:
        return {"save": "stall", "steps": rng.randint(1, 2), "step_delay": 0.02}
    return {"save": "forever", "step_delay": 0.15}


def _storm(rng: random.Random) -> dict[str, Any]:
    hosts = [_host(rng) for _ in range(STORM)]
    return {"count": STORM, **local._newcomer(rng), "hosts": hosts}


def _stop_at_commit(rng: random.Random) -> dict[str, Any]:
    """A newcomer that stops itself before its ACK, so the harness can stop the leader
    exactly then: the incumbent's move lands only after an election (seed 27).

    ``freeze_s``: how long the leader stays stopped, counted by the harness from
    the stop (not a step: the newcomer may reach its ACK steps later, or never).
    """
    freeze = round(rng.uniform(1.0, 4.0), 2)
    return local._newcomer(rng, before_ack={"stop": True, "once": True}, freeze_s=freeze)


def _full_at_move(rng: random.Random) -> dict[str, Any]:
    """A newcomer that, as an incumbent later, stops itself before its move, once.

    ``full_s``: how long the alarm the harness raises then lasts, counted from
    the raise (not a step: the child may be succeeded much later, or never).
    """
    full = round(rng.uniform(0.5, 4.0), 2)
    return local._newcomer(rng, before_move={"stop": True, "once": True}, full_s=full)


def _member_fault(rng: random.Random) -> dict[str, Any]:
    """``pick``: which follower (a fraction of the followers); ``after``: the undo's step."""
    return {"pick": round(rng.random(), 4), "after": rng.randint(1, 4)}


_LOCAL = local.LOCAL.params
PARAMS: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "start_normal": _on_a_host(_LOCAL["start_normal"]),
    "start_slow": _on_a_host(_LOCAL["start_slow"]),
    "start_hang": _on_a_host(_start_hang),
    "start_late_ack": _on_a_host(_LOCAL["start_late_ack"]),
    "start_stuck": _on_a_host(_LOCAL["start_stuck"]),
    "fork_worker": _on_a_host(_LOCAL["fork_worker"]),
    "sigstop_holder": _LOCAL["sigstop_holder"],
    "sigkill_newcomer": _LOCAL["sigkill_newcomer"],
    "sigstop_newcomer": _LOCAL["sigstop_newcomer"],
    "storm": _storm,
    **dict.fromkeys(MEMBER_FAULTS, _member_fault),
    "etcd_stop_at_commit": _on_a_host(_stop_at_commit),
    "etcd_end_reign": lambda rng: {"how": rng.choice(HOW)},
    "etcd_compact": lambda rng: {},
    "etcd_full": lambda rng: {"after": rng.randint(1, 4)},
    "etcd_full_at_move": _on_a_host(_full_at_move),
}
#: What the etcd schedule is drawn from.
TABLES = Tables(WEIGHTS, PARAMS, {**MEMBER_FAULTS, "etcd_full": "etcd_unfull"})


def make_etcd_schedule(seed: int, count: int) -> list[Step]:
    """``count`` steps for ``seed``; the first one starts a holder (on a drawn host)."""
    return local.make_schedule(seed, count, tables=TABLES)


def settler_host(seed: int) -> str:
    """The host of the newcomer the settling starts (a draw of its own, from the seed)."""
    return random.Random(f"settler-{seed}").choice(HOSTS)


def child_params(params: dict[str, Any], host: str) -> dict[str, Any]:
    """A start step's parameters for one child on ``host`` (a storm's list of hosts dropped).

    ``host`` stays in the child's configuration (the child ignores it): the
    judge reads it there to know which simulated host each process ran on.
    """
    return {**{k: v for k, v in params.items() if k != "hosts"}, "host": host}
