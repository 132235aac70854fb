"""The etcd floor's pure parts: backend URLs (``_etcd/endpoints``), the gateway's JSON (``api``)."""

from __future__ import annotations

import base64
import binascii

import pytest
from hypothesis import given
from hypothesis import strategies as st

from highlander._core.errors import ConfigurationError
from highlander._etcd import api
from highlander._etcd.endpoints import parse


@pytest.mark.parametrize(
    ("backend", "endpoints"),
    [
        ("etcd://h1:2379,h2:2379", ("http://h1:2379", "http://h2:2379")),
        ("etcd://H1", ("http://h1:2379",)),
        ("etcd://h1, h2:2380/", ("http://h1:2379", "http://h2:2380")),
        ("etcds://h1:2379", ("https://h1:2379",)),
        ("ETCD://[::1]:2379,[::1]", ("http://[::1]:2379", "http://[::1]:2379")),
        ("etcd://127.0.0.1:1", ("http://127.0.0.1:1",)),
    ],
)
def test_a_backend_url_names_its_members(backend: str, endpoints: tuple[str, ...]) -> None:
    assert parse(backend, {}).endpoints == endpoints


@pytest.mark.parametrize(
    ("backend", "says"),
    [
        ("h1:2379", "expected etcd://"),
        ("http://h1:2379", "expected etcd://"),
        ("etcd://", "names no member"),
        ("etcd://h1,,h2", "empty member"),
        ("etcd://h1:port", "not a port"),
        ("etcd://h1:0", "not a port"),
        ("etcd://h1:65536", "not a port"),
        ("etcd://user:pw@h1", "HIGHLANDER_ETCD_PASSWORD"),
        ("etcd://[::1", "unclosed"),
        ("etcd://[::1]x", "':port'"),
        ("etcd://h1/path", "not host[:port]"),
    ],
)
def test_a_bad_backend_url_is_refused_with_the_fix(backend: str, says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse(backend, {})
    assert says in str(caught.value)
    assert "pw" not in str(caught.value)  # a password in the URL is never echoed


def test_credentials_and_tls_files_come_from_the_environment() -> None:
    environ = {
        "HIGHLANDER_ETCD_USER": "hl",
        "HIGHLANDER_ETCD_PASSWORD": "secret",
        "HIGHLANDER_ETCD_CA": "/ca.pem",
        "HIGHLANDER_ETCD_CERT": "/c.pem",
        "HIGHLANDER_ETCD_KEY": "/k.pem",
    }
    target = parse("etcds://h1", environ)
    assert (target.user, target.password) == ("hl", "secret")
    assert (target.ca, target.cert, target.key) == ("/ca.pem", "/c.pem", "/k.pem")
    assert target.tls
    assert "secret" not in target.describe()
    assert target.describe() == "hl@https://h1:2379"


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"HIGHLANDER_ETCD_USER": "hl"}, "both HIGHLANDER_ETCD_USER"),
        ({"HIGHLANDER_ETCD_PASSWORD": "x"}, "both HIGHLANDER_ETCD_USER"),
        ({"HIGHLANDER_ETCD_CERT": "/c"}, "needs its key"),
        ({"HIGHLANDER_ETCD_CA": "/ca"}, "write etcds://"),
    ],
)
def test_half_a_setting_is_refused(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse("etcd://h1", environ)
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"/a/", b"/a0"), (b"a\xff", b"b"), (b"\xff\xff", b"\0"), (b"", b"\0")],
)
def test_a_prefix_range_ends_just_past_every_key_under_it(prefix: bytes, end: bytes) -> None:
    assert api.prefix_end(prefix) == end


def test_the_gateways_spelling_is_undone() -> None:
    kv = api.key_value(
        {"key": api.b64(b"k"), "create_revision": "7", "mod_revision": "9", "lease": "42"}
    )
    assert kv == api.KeyValue(b"k", b"", 7, 9, 0, 42)
    assert api.header({"header": {"revision": "12", "member_id": "3"}}).revision == 12
    assert api.header({}).revision == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"key": "not base64!"},
        {"key": 5},
        {"key": api.b64(b"k"), "create_revision": "seven"},
        {"key": api.b64(b"k"), "lease": True},
        {"key": api.b64(b"k"), "lease": 1.5},
    ],
)
def test_a_malformed_key_is_refused(bad: api.Json) -> None:
    with pytest.raises(api.MalformedAnswer):
        api.key_value(bad)


def test_a_txn_reads_its_ranges_and_branch() -> None:
    kv = {"key": api.b64(b"k"), "create_revision": "3", "lease": "8"}
    answer = {
        "header": {"revision": "5"},
        "succeeded": True,
        "responses": [{"response_put": {}}, {"response_range": {"kvs": [kv]}}],
    }
    parsed = api.txn(answer)
    assert parsed.succeeded
    assert [k.create_revision for k in parsed.kvs] == [3]
    assert not api.txn({"responses": []}).succeeded


def test_the_commit_compares_the_reigns_token_and_lease() -> None:
    body = api.move(b"k", b"v", token=41, from_lease=7, to_lease=8)
    assert body["compare"] == [
        {"key": api.b64(b"k"), "target": "MOD", "result": "EQUAL", "mod_revision": "41"},
        {"key": api.b64(b"k"), "target": "LEASE", "result": "EQUAL", "lease": "7"},
    ]
    assert body["success"][0]["request_put"] == {
        "key": api.b64(b"k"),
        "value": api.b64(b"v"),
        "lease": "8",
    }
    assert body["failure"] == [{"request_range": {"key": api.b64(b"k")}}]


def test_the_commit_can_mark_its_conversation_on_another_lease() -> None:
    body = api.move(b"k", b"v", token=41, from_lease=7, to_lease=8, mark=(b"moved", 7))
    assert body["success"][1]["request_put"] == {
        "key": api.b64(b"moved"),
        "value": api.b64(b"v"),
        "lease": "7",
    }
    assert len(body["success"]) == 3  # the key, the mark, the read


def test_a_fence_also_requires_keys_to_be_absent() -> None:
    body = api.move(b"k", b"v", token=41, from_lease=7, to_lease=8, absent=(b"fin",))
    assert body["compare"][2] == {
        "key": api.b64(b"fin"),
        "target": "CREATE",
        "result": "EQUAL",
        "create_revision": "0",
    }
    assert len(body["compare"]) == 3


def test_put_if_absent_compares_the_create_revision_with_zero() -> None:
    body = api.put_if_absent(b"k", b"v", 8)
    assert body["compare"] == [
        {"key": api.b64(b"k"), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
    ]
    assert body["success"][0]["request_put"]["lease"] == "8"
    assert body["failure"] == [{"request_range": {"key": api.b64(b"k")}}]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (
            {"error": "etcdserver: no leader", "code": 14, "message": "etcdserver: no leader"},
            (14, "etcdserver: no leader"),
        ),
        (
            {"error": {"grpc_code": 5, "code": 5, "message": "lease not found"}},
            (5, "lease not found"),
        ),
        ({"header": {}}, None),
        ([], None),
    ],
)
def test_the_gateways_error_bodies_are_recognised(
    answer: object, error: tuple[int, str] | None
) -> None:
    assert api.error_of(answer) == error


def test_a_watch_line_is_parsed() -> None:
    kv = {"key": api.b64(b"k"), "mod_revision": "4"}
    batch = api.watch_batch(
        {
            "result": {
                "header": {"revision": "4"},
                "events": [{"kv": kv}, {"type": "DELETE", "kv": kv}],
            }
        }
    )
    assert [e.kind for e in batch.events] == ["put", "delete"]
    assert api.watch_batch({"result": {"created": True}}).created
    assert api.watch_batch({"result": {"compact_revision": "9"}}).compact_revision == 9


def test_a_grant_without_a_lease_is_refused() -> None:
    assert api.granted({"ID": "5", "TTL": "5"}) == (5, 5)
    with pytest.raises(api.MalformedAnswer):
        api.granted({"error": "too many leases"})


@pytest.mark.parametrize(
    ("version", "warned"),
    [
        ("3.5.13", False),
        ("3.5.17", False),
        ("3.6.0", False),
        ("3.5.12", True),
        ("3.5.1", True),
        ("3.4.23", True),
        ("3.5.13-rc.0", False),
        ("", True),
        ("three", True),
    ],
)
def test_an_etcd_older_than_3_5_13_is_warned_about(version: str, warned: bool) -> None:
    warning = api.version_warning({"version": version})
    assert (warning is not None) == warned
    if warned and version[:1].isdigit():
        assert "older than 3.5.13" in warning  # type: ignore[operator]


@given(st.binary(max_size=512))
def test_the_gateways_base64_is_the_stdlibs(data: bytes) -> None:
    """binascii's codecs, as ``base64.b64encode`` / ``b64decode(validate=True)`` call them."""
    assert api.b64(data) == base64.b64encode(data).decode("ascii")
    assert api.unb64(api.b64(data)) == data


@pytest.mark.parametrize("text", ["a", "YQ", "YQ=", "Y Q==", "YQ==\n", "YQ==YQ==", "é"])
def test_what_base64_refuses_is_malformed(text: str) -> None:
    with pytest.raises(binascii.Error if text.isascii() else ValueError):
        base64.b64decode(text, validate=True)
    with pytest.raises(api.MalformedAnswer):
        api.unb64(text)
