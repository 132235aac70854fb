"""What a holder calls itself on etcd, and where a project's keys live (``_etcd/session``)."""

from __future__ import annotations

import hashlib
import os

import pytest

from highlander._core.errors import ConfigurationError
from highlander._etcd.session import HolderValue, holder_key, host_id, project_root
from highlander._host.identity import boot_id


def test_the_host_is_the_boot_id_unless_named() -> None:
    assert host_id({}) == boot_id()
    assert host_id({"HIGHLANDER_HOST_ID": "  ci-runner-7 "}) == "ci-runner-7"
    assert host_id({"HIGHLANDER_HOST_ID": "  "}) == boot_id()


def test_a_projects_keys_are_under_the_hash_of_its_id() -> None:
    digest = hashlib.sha256(b"github.com/Org/Repo").hexdigest()
    root = project_root("github.com/Org/Repo", {})
    assert root == f"/highlander/{digest}/".encode()
    assert holder_key(root) == root + b"holder"
    assert project_root("github.com/Org/Repo", {"HIGHLANDER_ETCD_PREFIX": "/team/"}) == (
        f"/team/{digest}/".encode()
    )
    assert project_root("github.com/Org/Other", {}) != root


@pytest.mark.parametrize("prefix", ["team/", "/team", "team"])
def test_a_prefix_without_its_slashes_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigurationError, match="slashes around"):
        project_root("p", {"HIGHLANDER_ETCD_PREFIX": prefix})


def test_a_holder_names_itself_and_reads_back() -> None:
    me = HolderValue.mine("indexer", {"HIGHLANDER_HOST_ID": "h1"})
    assert (me.host, me.pid, me.app, me.boot_id) == ("h1", os.getpid(), "indexer", boot_id())
    assert HolderValue.decode(me.encode()) == me


@pytest.mark.parametrize("raw", [b"", b"holder", b"[]", b'{"host": "h"}', b"\xff"])
def test_a_value_that_is_no_holders_reads_as_none(raw: bytes) -> None:
    assert HolderValue.decode(raw) is None
