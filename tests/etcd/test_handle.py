"""``Highlander`` on etcd, with real processes on simulated hosts (``HIGHLANDER_HOST_ID``).

Each child is ``tests/programs/child.py`` (the same user process the local
tests run) with ``HIGHLANDER_BACKEND`` naming the suite's cluster: a
succession across hosts carries the handoff, a stopped holder is fenced
and never acts again, a killed one is replaced once its lease ends, a
newcomer stopped before its ACK leaves one holder, a storm of newcomers on
several hosts converges on one.  Children on different simulated hosts are
"elsewhere": none is signalled, whatever it does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from highlander import ConfigurationError, Deposed, Highlander, Timeouts
from highlander._etcd import api
from highlander._etcd.session import app_root, holder_key
from highlander._host.settings import Settings
from highlander._shell.etcd_backend import EtcdBackend
from tests.support.etcd_cluster import Cluster, post
from tests.support.proctools import (
    WAIT,
    Child,
    Children,
    assert_no_overlap,
    wait_stopped,
    wait_until_one_left,
)

#: Short leases keep the tests short on the suite's quiet local cluster (users get >= 5 s).
TTL = 2
#: Hang guard for what must happen by itself (never a performance bound).
SETTLE = 60.0
FAST = {"hello": 1.0, "request": 1.0, "stall": 2.0, "exit_grace": 2.0}


class Hosts:
    """Children of one project on etcd, each on a simulated host of its own."""

    def __init__(self, kids: Children, etcd: Cluster) -> None:
        self.kids = kids
        self.etcd = etcd
        self.project = f"example.com/tests/{uuid.uuid4().hex}"

    def start(self, host: str, *, ttl: int = TTL, **cfg: Any) -> Child:
        env = self.kids.env(
            HIGHLANDER_BACKEND=self.etcd.backend,
            HIGHLANDER_PROJECT_ID=self.project,
            HIGHLANDER_ETCD_TTL=str(ttl),
            HIGHLANDER_HOST_ID=host,
        )
        cfg.setdefault("timeouts", FAST)
        return self.kids.start(env, **cfg)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return self.kids.events(kind)


@pytest.fixture
def hosts(kids: Children, etcd: Cluster) -> Iterator[Hosts]:
    """Start children of one fresh project; every one is ended by pid afterwards."""
    yield Hosts(kids, etcd)


def _stopped(child: Child) -> bool:
    with open(f"/proc/{child.pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def _passes(path: Path) -> list[tuple[int, int, int]]:
    """``check_current()`` passes: (pid, began ns, ended ns), monotonic."""
    passes = []
    for line in path.read_text().splitlines():
        verdict, pid, began, ended = line.split()
        if verdict == "pass":
            passes.append((int(pid), int(began), int(ended)))
    return passes


def _assert_no_two_passes_at_once(path: Path) -> None:
    """No two processes' passing ``check_current()`` calls overlap in time."""
    passes = sorted(_passes(path), key=lambda p: p[1])
    last: dict[int, int] = {}
    for pid, began, ended in passes:
        for other, until in last.items():
            assert other == pid or until <= began, f"pid {pid} and {other} passed at once"
        last[pid] = max(ended, last.get(pid, 0))


def test_a_newcomer_on_another_host_takes_over_with_the_handoff(hosts: Hosts) -> None:
    first = hosts.start("h1")
    claimed = first.wait_for("ready")
    assert claimed["outcome"] == "claimed_free" and claimed["generation"] == 1
    second = hosts.start("h2")
    report = second.wait_for("ready")
    assert report["outcome"] == "succeeded", report
    assert report["generation"] == 2  # reigns are counted across hosts
    assert report["handoff"]["from"] == first.pid and report["handoff"]["counter"] == 1
    status, out, _ = first.finish(SETTLE)
    assert status == 0 and out == b""  # deposed: it left by itself
    assert_no_overlap(hosts.kids.reigns())
    acked = hosts.events("acked")
    assert [e["pid"] for e in acked] == [first.pid]


def test_a_claim_after_a_release_is_free_and_after_a_death_stale(hosts: Hosts) -> None:
    first = hosts.start("h1", hold=0.2)
    first.wait_for("ready")
    assert first.finish(SETTLE)[0] == 0  # it let go by a release (at exit)
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    # The counter still counts the reign, and says it ended by a release.
    assert (report["outcome"], report["generation"]) == ("claimed_free", 2), report
    second.proc.kill()
    second.proc.wait(timeout=SETTLE)
    third = hosts.start("h3")
    report = third.wait_for("ready", timeout=SETTLE)
    assert (report["outcome"], report["generation"]) == ("claimed_stale", 3), report


def test_a_stopped_holder_never_acts_after_its_successor_began(
    hosts: Hosts, tmp_path: Path
) -> None:
    checks = tmp_path / "checks"
    first = hosts.start("h1", check_loop=0.005, check_witness=str(checks))
    first.wait_for("ready")
    deadline = time.monotonic() + SETTLE
    while not checks.exists() or not _passes(checks):
        assert time.monotonic() < deadline, "the holder never passed check_current()"
        time.sleep(0.01)
    os.kill(first.pid, signal.SIGSTOP)
    wait_stopped(first.pid)
    second = hosts.start("h2", check_loop=0.005, check_witness=str(checks))
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["outcome"] == "claimed_stale" and report["generation"] == 2
    assert first.proc.poll() is None and _stopped(first)  # another host's: never signalled
    os.kill(first.pid, signal.SIGCONT)
    deposed = first.wait_for("deposed", timeout=SETTLE)
    assert "lease" in deposed["why"], deposed
    assert first.finish(SETTLE)[0] == 0
    lost = hosts.events("lease_lost")
    assert [e["pid"] for e in lost] == [first.pid]
    time.sleep(0.2)  # the successor checks on meanwhile
    _assert_no_two_passes_at_once(checks)
    assert {pid for pid, _, _ in _passes(checks)} == {first.pid, second.pid}


def test_a_holder_hung_in_its_save_is_fenced_out_never_signalled(hosts: Hosts) -> None:
    # Its lease is renewed (the keeper runs) but its save stops advancing: only a fence helps.
    first = hosts.start("h1", save="stall")
    first.wait_for("ready")
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["outcome"] == "claimed_stale" and report["handoff"] is None
    assert [e["peer_pid"] for e in hosts.events("fenced")] == [first.pid]
    deposed = first.wait_for("deposed", timeout=SETTLE)  # its next keepalive is refused
    assert "lease" in deposed["why"], deposed
    assert first.finish(SETTLE)[0] == 0  # it left by itself: nobody signalled it
    assert hosts.events("terminated") == [] and hosts.events("killed") == []
    assert_no_overlap(hosts.kids.reigns())


def test_a_sigkilled_holder_is_replaced_once_its_lease_ends(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    first.proc.kill()
    first.proc.wait(timeout=SETTLE)
    killed = time.monotonic_ns()
    second = hosts.start("h2")
    report = second.wait_for("ready", timeout=SETTLE)
    assert report["outcome"] == "claimed_stale" and report["generation"] == 2
    assert report["handoff"] is None
    (reign,) = [r for r in hosts.kids.reigns() if r[0] == second.pid]
    assert reign[2] > killed


def test_a_newcomer_stopped_before_its_ack_leaves_one_holder(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    second = hosts.start("h2", before_ack={"stop": True, "once": True})
    second.wait_for("before_ack", timeout=SETTLE)
    deadline = time.monotonic() + SETTLE
    while not _stopped(second):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # Past the incumbent's ACK deadline it keeps the project (and says so: REFUSED late).
    deadline = time.monotonic() + SETTLE
    while not any(e.get("phase") == "ack" for e in hosts.events("timeout")):
        assert time.monotonic() < deadline, "the incumbent never gave up on the ACK"
        time.sleep(0.05)
    assert first.proc.poll() is None
    os.kill(second.pid, signal.SIGCONT)
    report = second.wait_for("ready", timeout=SETTLE)  # its next attempt takes over
    assert report["outcome"] == "succeeded" and report["handoff"]["from"] == first.pid
    assert first.finish(SETTLE)[0] == 0
    assert_no_overlap(hosts.kids.reigns())


def test_a_storm_of_newcomers_on_several_hosts_ends_with_one_holder(
    hosts: Hosts, tmp_path: Path
) -> None:
    checks = tmp_path / "checks"
    # The shortest lease a user may choose: at the suite's 2 s, 32 processes starting on
    # two cores delayed a holder's keepalives past its TTL (CI, 2026-12-02), and a holder
    # that lost its lease with every other newcomer refused for thrash left nobody.
    watched = {"hold": 120, "check_loop": 0.05, "check_witness": str(checks), "ttl": 5}
    first = hosts.start("h0", **watched)
    first.wait_for("ready")
    storm = [hosts.start(f"h{1 + n % 4}", **watched) for n in range(32)]
    survivor = wait_until_one_left([first, *storm], timeout=240)
    if not any(report.get("event") == "ready" for report in survivor.heard):
        try:
            survivor.wait_for("ready", timeout=SETTLE)  # its predecessor left the moment it held
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_story(hosts, [first, *storm])}") from None
    reigns = hosts.kids.reigns()
    # The guarantee: never two processes passing check_current() at once.
    _assert_no_two_passes_at_once(checks)
    if not hosts.events("fenced"):
        # Handed over only: also no two acquire..release intervals at once.  (A holder
        # fenced under load believed until its lease bound, which check_current() shows;
        # its release line comes later, from on_deposed, after its loop noticed.)
        assert_no_overlap(reigns)
    generations = [generation for _, generation, _, _ in reigns]
    assert generations == sorted(set(generations))  # one reign per generation, in order
    assert reigns[-1][0] == survivor.pid
    for child in [first, *storm]:
        if child is not survivor:
            assert child.finish(SETTLE)[0] in (0, 1)  # deposed, or refused (thrash): not killed


def _story(hosts: Hosts, children: list[Child]) -> str:
    """How every child ended and the project's decisions, for a failure's message."""
    keys = ("ts", "pid", "event", "outcome", "peer_pid", "reason", "phase", "generation")
    lines = [f"pid {c.pid}: exit {c.proc.poll()}" for c in children]
    lines += [
        " ".join(f"{k}={e[k]}" for k in keys if k in e)
        for e in hosts.events()
        if e["event"] not in ("hello", "busy")
    ]
    return "\n".join(lines)


def test_observe_runs_beside_the_holder_without_asking_anything(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    beside = hosts.start("h2", mode="observe")
    report = beside.wait_for("ready")
    assert report["outcome"] == "duplicate" and not report["is_holder"]
    assert first.proc.poll() is None
    assert hosts.events("save_requested") == []


def _guarded_put(etcd: Cluster, fencing: tuple[str | None, int], key: bytes) -> bool:
    """A user's own write, guarded by the reign's fencing token (docs/etcd.md)."""
    fence_key, token = fencing
    assert fence_key is not None
    compare = {"key": api.b64(fence_key.encode()), "target": "MOD", "result": "EQUAL"}
    body = {
        "compare": [{**compare, "mod_revision": str(token)}],
        "success": [{"request_put": {"key": api.b64(key), "value": api.b64(b"x")}}],
    }
    return bool(post(etcd.endpoints[0], "/v3/kv/txn", body).get("succeeded", False))


def _in_this_process(hosts: Hosts, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process as one more host of ``hosts``' project (the children's settings)."""
    env = hosts.kids.env(HIGHLANDER_BACKEND=hosts.etcd.backend, HIGHLANDER_PROJECT_ID=hosts.project)
    for name, value in env.items():
        if name.startswith("HIGHLANDER_"):
            monkeypatch.setenv(name, value)


def test_a_deposed_holders_guarded_writes_fail(
    hosts: Hosts, etcd: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _in_this_process(hosts, monkeypatch)
    deposed: list[bool] = []
    hl = Highlander(
        app="child",
        project_id=hosts.project,
        on_deposed=lambda: deposed.append(True),
        exit_when_orphaned=False,
        timeouts=Timeouts(**FAST),
    ).acquire()
    try:
        ours = f"/users-own/{uuid.uuid4().hex}".encode()
        assert hl.generation == 1 and _guarded_put(etcd, hl.fencing, ours)
        fencing = hl.fencing
        successor = hosts.start("h2")
        assert successor.wait_for("ready")["outcome"] == "succeeded"
        # on_deposed runs after this process let go, which the successor waited for;
        # whether it ran before the successor's report reached us is not promised.
        until = time.monotonic() + WAIT
        while not deposed and time.monotonic() < until:
            time.sleep(0.01)
        assert deposed == [True]
        with pytest.raises(Deposed):
            hl.check_current()
        assert not _guarded_put(etcd, fencing, ours)  # the old token fences it out
    finally:
        hl.release()


def test_the_etcd_backend_refuses_to_start_without_a_shared_token(
    hosts: Hosts, etcd: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HIGHLANDER_TOKEN", raising=False)
    handle = Highlander(
        app="child",
        backend=etcd.backend,
        project_id=hosts.project,
        runtime_dir=hosts.kids.runtime,
    )
    with pytest.raises(ConfigurationError, match="HIGHLANDER_TOKEN"):
        handle.acquire()


def _cli(hosts: Hosts, *args: str) -> subprocess.CompletedProcess[str]:
    env = hosts.kids.env(HIGHLANDER_PROJECT_ID=hosts.project)
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args, "--backend", hosts.etcd.backend],
        env=env,
        capture_output=True,
        text=True,
        timeout=SETTLE,
        check=False,
    )


def test_status_on_etcd_names_the_holder_and_its_host(hosts: Hosts) -> None:
    assert _cli(hosts, "status", "--app", "child").returncode == 3  # nobody yet
    first = hosts.start("h1")
    first.wait_for("ready")
    done = _cli(hosts, "status", "--app", "child", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["held"], data["pid"], data["host"], data["generation"]) == (
        True, first.pid, "h1", 1,
    )  # fmt: skip
    forced = _cli(hosts, "stop", "--app", "child", "--force")
    assert forced.returncode == 1 and "never signalled" in forced.stderr
    assert first.proc.poll() is None  # nothing was done to it


def test_stop_on_etcd_asks_the_holder_on_another_host_to_save_and_leave(hosts: Hosts) -> None:
    first = hosts.start("h1")
    first.wait_for("ready")
    done = _cli(hosts, "stop", "--app", "child", "--json")
    assert done.returncode == 0, done.stderr
    stopped = json.loads(done.stdout)
    assert stopped["stopped"] == first.pid and stopped["handoff"]["from"] == first.pid
    assert first.finish(SETTLE)[0] == 0  # it left by itself
    assert _cli(hosts, "status", "--app", "child").returncode == 3  # its key went with it


def test_a_foreign_holder_key_is_refused_and_the_process_leaves(hosts: Hosts) -> None:
    # A holder key no Highlander wrote: AUTO refuses it (ForeignHolderError, never
    # fenced) and the process leaves; the session's loop thread does not keep it.
    root = app_root("child", hosts.project, {})
    put = {"key": api.b64(holder_key(root)), "value": api.b64(b"not a holder's value")}
    post(hosts.etcd.endpoints[0], "/v3/kv/put", put)
    child = hosts.start("h1", report_errors=True)
    assert child.wait_for("error")["type"] == "ForeignHolderError"
    assert child.finish(SETTLE)[0] == 1


def test_a_newcomer_whose_lease_etcd_lost_takes_a_new_one(
    hosts: Hosts, etcd: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _in_this_process(hosts, monkeypatch)
    first = hosts.start("h1")
    first.wait_for("ready")
    settings = Settings.resolve(
        app="child", project=None, mode=None, token=None, timeouts=None, runtime_dir=None
    )
    newcomer = EtcdBackend(settings)
    try:
        assert newcomer.claim(settings) is None  # held by the first
        lease = newcomer.session.lease_kept().lease
        post(etcd.endpoints[0], "/v3/lease/revoke", {"ID": str(lease)})  # etcd lost it
        first.proc.kill()
        first.proc.wait(timeout=SETTLE)
        deadline = time.monotonic() + SETTLE
        reign = None
        while reign is None:  # the first one's lease runs out by itself
            assert time.monotonic() < deadline
            reign = newcomer.claim(settings)
            time.sleep(0.05)
        assert newcomer.session.lease_kept().lease != lease
        reign.listener.close(unlink=False)
        reign.lock.release()
    finally:
        newcomer.session.close()
