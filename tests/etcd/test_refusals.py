"""What the client does with each refusal etcd's gateway sends (pure: no cluster).

The words are etcd's own (``etcdserver: ...``, server/etcdserver/api/v3rpc/
rpctypes): a full database and a lagging member share the gRPC code 8, and
only the words tell "free space, then disarm" from "ask again".
"""

from __future__ import annotations

from highlander._etcd import api, refusals
from tests.support.imports import loaded_after


def test_a_member_that_lags_or_has_no_leader_is_asked_again() -> None:
    assert refusals.ask_again(8, "etcdserver: too many requests")
    assert refusals.ask_again(14, "etcdserver: no leader")
    assert refusals.ask_again(4, "etcdserver: request timed out")


def test_a_full_etcd_is_not_asked_again_and_its_error_names_the_fix() -> None:
    said = "etcdserver: mvcc: database space exceeded"
    assert not refusals.ask_again(8, said)
    error = refusals.refused("/v3/lease/grant", 8, said)
    assert error.code == api.RESOURCE_EXHAUSTED in api.DENIED
    text = str(error)
    assert said in text
    for step in ("etcdctl compact", "etcdctl defrag", "etcdctl alarm disarm", "docs/etcd.md"):
        assert step in text, text


def test_a_user_not_permitted_is_told_which_permission_to_give() -> None:
    said = "etcdserver: permission denied"
    assert not refusals.ask_again(7, said)
    error = refusals.refused("/v3/kv/txn", 7, said)
    assert error.code == api.PERMISSION_DENIED in api.DENIED
    for part in (said, "HIGHLANDER_ETCD_USER", "HIGHLANDER_ETCD_PREFIX", "Least privilege"):
        assert part in str(error), str(error)


def test_other_refusals_keep_etcds_words_and_code() -> None:
    error = refusals.refused("/v3/kv/put", 3, "etcdserver: request is too large")
    assert not refusals.ask_again(3, "etcdserver: request is too large")
    assert str(error) == "etcd refused /v3/kv/put: etcdserver: request is too large (gRPC code 3)"
    assert api.NOT_FOUND not in api.DENIED  # a lease gone: NO_LEASE, its own reply


def test_no_newcomer_or_holder_module_loads_them_before_a_refusal() -> None:
    # The newcomer's path loads only the codes (api); the words and messages come
    # with the first refusal (client, handover, the etcd shell), never at start-up.
    modules = (
        "highlander._etcd.client, highlander._etcd.handover, highlander._shell.etcd_backend,"
        " highlander._shell.etcd_claiming, highlander._shell.etcd_takeover"
    )
    assert loaded_after(f"import {modules}", ("highlander._etcd.refusals",)) == []
