"""The etcd client's HTTP/1.1 bytes (highlander/_etcd/http11.py), against h11 as the oracle.

Pure: no socket, no clock.  A response is generated (status, headers, a body
framed by Content-Length, chunks or the connection's end), cut at random
points, and read by both; they must agree on the status, the headers, the
body and whether the connection may be reused.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

import h11
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from highlander._etcd.http11 import END, Head, ProtocolError, Response, request


@dataclass
class Read:
    status: int
    headers: dict[str, str]
    body: bytes
    reusable: bool


def ours(pieces: list[bytes], *, eof: bool) -> Read | None:
    response = Response()
    body = b""
    head = None
    for piece in [*filter(None, pieces), *([b""] if eof else [])]:  # b"": the end
        response.feed(piece)
        while (event := response.next_event()) is not None:
            if isinstance(event, Head):
                head = event
            elif event is END:
                assert head is not None
                return Read(head.status, head.headers, body, response.reusable)
            else:
                assert isinstance(event, bytes)
                body += event
    return None


def oracle(pieces: list[bytes], *, eof: bool) -> Read | None:
    connection = h11.Connection(our_role=h11.CLIENT)
    connection.send(h11.Request(method="POST", target="/", headers=[("Host", "etcd")]))
    connection.send(h11.EndOfMessage())
    body, head = b"", None
    for piece in [*pieces, *([b""] if eof else [])]:
        connection.receive_data(piece)
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                headers: dict[str, str] = {}
                for name, value in head.headers:
                    key, text = name.decode(), value.decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
                reusable = connection.their_state is h11.DONE and not eof
                if reusable:
                    connection.start_next_cycle()
                return Read(head.status_code, headers, body, reusable)
            elif isinstance(event, h11.ConnectionClosed):
                return None
            elif isinstance(event, h11.InformationalResponse):
                continue
    return None


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
_value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789 /;=", max_size=20).map(str.strip)


@st.composite
def responses(draw: st.DrawFn) -> tuple[bytes, bool]:
    """One response's bytes, and whether only the connection's end completes it."""
    status = draw(st.sampled_from([200, 200, 400, 401, 404, 500, 503]))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    reserved = {"content-length", "transfer-encoding", "connection"}
    extra = draw(st.lists(st.tuples(_token.filter(lambda t: t not in reserved), _value)))
    head = [f"HTTP/1.1 {status} Whatever"] + [f"{n}: {v}" for n, v in extra]
    if draw(st.booleans()):
        head.insert(0, "HTTP/1.1 100 Continue\r\n")
    if draw(st.booleans()):
        head.append("Connection: close")
    if framing == "length":
        head.append(f"Content-Length: {len(body)}")
        payload = body
    elif framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        sizes = draw(st.lists(st.integers(1, 64), max_size=8))
        payload, at = b"", 0
        for size in sizes:
            piece, at = body[at : at + size], at + size
            if piece:
                ext = ";x=1" if draw(st.booleans()) else ""
                payload += f"{len(piece):x}{ext}\r\n".encode() + piece + b"\r\n"
        rest = body[at:]
        if rest:
            payload += f"{len(rest):X}\r\n".encode() + rest + b"\r\n"
        trailer = "Grpc-Trailer: 0\r\n" if draw(st.booleans()) else ""
        payload += f"0\r\n{trailer}\r\n".encode()
    else:
        payload = body
    data = "\r\n".join(head).encode() + b"\r\n\r\n"
    return data + payload, framing == "close"


@given(responses(), st.lists(st.integers(0, 2000), max_size=6))
def test_a_response_cut_anywhere_reads_as_h11_reads_it(
    response: tuple[bytes, bool], cuts: list[int]
) -> None:
    data, needs_eof = response
    pieces = _cut(data, cuts)
    expected = oracle(pieces, eof=needs_eof)
    got = ours(pieces, eof=needs_eof)
    assert expected is not None
    assert got == expected


@given(responses(), st.integers(0, 2000))
def test_a_response_that_ends_early_is_a_protocol_error(
    response: tuple[bytes, bool], at: int
) -> None:
    data, needs_eof = response
    assume(not needs_eof)  # there, the connection's end is the body's
    cut = data[: at % len(data)]
    assert ours([cut], eof=False) is None
    with pytest.raises(ProtocolError):
        ours([cut], eof=True)


@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=4))
def test_any_bytes_end_as_a_response_none_or_a_protocol_error(data: bytes, cuts: list[int]) -> None:
    with contextlib.suppress(ProtocolError):
        ours(_cut(data, cuts), eof=True)


@pytest.mark.parametrize(
    "bad",
    [
        b"HTTP/2 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\nA\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+1\r\nA\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nAB\r\n0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70000 + b"\r\n\r\n",
    ],
)
def test_a_malformed_response_is_refused(bad: bytes) -> None:
    with pytest.raises(ProtocolError):
        ours([bad], eof=True)


def test_bytes_past_the_response_make_the_connection_unusable() -> None:
    response = Response()
    response.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200")
    events = [response.next_event() for _ in range(3)]
    assert events[1:] == [b"{}", END]
    assert response.leftover == b"HTTP/1.1 200"
    assert not response.reusable


def test_a_request_reads_as_h11_reads_it() -> None:
    body = b'{"key":"a2V5"}'
    data = request("POST", "127.0.0.1:2379", "/v3/kv/range", {"Authorization": "tok"}, body)
    server = h11.Connection(our_role=h11.SERVER)
    server.receive_data(data)
    head = server.next_event()
    assert isinstance(head, h11.Request)
    assert (head.method, head.target) == (b"POST", b"/v3/kv/range")
    assert (b"host", b"127.0.0.1:2379") in head.headers
    assert (b"authorization", b"tok") in head.headers
    got = server.next_event()
    assert isinstance(got, h11.Data) and got.data == body
    assert isinstance(server.next_event(), h11.EndOfMessage)


@pytest.mark.parametrize("field", ["/v3\r\nX: y", "tok\nen", "a\0b"])
def test_a_request_field_with_a_line_break_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        request("POST", "h:1", "/", {"Authorization": field}, b"")
    with pytest.raises(ValueError, match="line break"):
        request("POST", "h:1", field, {}, b"")
