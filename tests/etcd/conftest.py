"""Fixtures of the etcd backend's tests: one real 3-member cluster per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.etcd_cluster import Cluster, external_cluster, start_cluster


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A healthy etcd cluster: ours on 127.0.0.1, or ``ETCD_ENDPOINTS``'s."""
    external = external_cluster()
    if external is not None:
        yield external
        return
    cluster = start_cluster(tmp_path_factory.mktemp("etcd"))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def faulty(etcd: Cluster) -> Iterator[Cluster]:
    """The cluster, for a test that kills or stops members; healthy again afterwards."""
    if etcd.external:
        pytest.skip("ETCD_ENDPOINTS names an external cluster: its members cannot be killed here")
    try:
        yield etcd
    finally:
        for member in etcd.members:
            if member.pid in etcd.stopped:
                etcd.resume(member)
            if member.process is not None and member.process.poll() is not None:
                etcd.restart(member)
        etcd.wait_healthy()
