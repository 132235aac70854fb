"""HTTP/1.1 as the etcd client speaks it: a request's bytes out, a response's events in.

Pure code, no socket and no clock, in the manner of h11 (which the tests
use as the oracle) but only as much as etcd's JSON gateway needs: the
client sends ``POST`` with a JSON body and reads one response at a time
on a kept-alive connection.  A response's body is framed by
``Content-Length``, by the chunked transfer coding (a watch's stream, and
Go's net/http for any answer it did not buffer whole), or by the
connection's end.  :mod:`highlander._etcd.http` moves the bytes.

Why not httpx2 (which the backend used first): importing it and creating
its client cost a fresh etcd newcomer ~340 ms of its start, and each
request ~2 ms of CPU (docs/performance.md, issue #15).
"""

from __future__ import annotations

from collections.abc import Mapping

from highlander._core.values import Value

#: A response head larger than this is not etcd's (a misdirected port, a proxy's page).
MAX_HEAD = 64 * 1024
#: A chunk-size line (size, extensions) or a trailer line longer than this is refused.
MAX_LINE = 4096


_HEX = b"0123456789abcdefABCDEF"


class ProtocolError(Exception):
    """The peer's bytes are not an HTTP/1.1 response this client can read."""


class Head(Value):
    """A response's status line and headers (names in lower case, repeats joined by ``, ``)."""

    status: int
    reason: str
    headers: dict[str, str]
    http10: bool = False

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this response."""
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.http10:
            return "keep-alive" in tokens
        return "close" not in tokens


class End:
    """The response's body is complete."""


END = End()
Event = Head | bytes | End


def request(
    method: str, authority: str, path: str, headers: Mapping[str, str], body: bytes
) -> bytes:
    """The bytes of one request with a body of known length."""
    for text in (method, authority, path, *headers, *headers.values()):
        if any(c in text for c in "\r\n\0"):
            raise ValueError(f"a request field with a line break or NUL: {text!r}")
    lines = [f"{method} {path} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _head(block: bytes) -> Head:
    """Parse a status line and its header lines (without the blank line)."""
    status_line, *lines = block.decode("latin-1").split("\n")
    version, _, rest = status_line.rstrip("\r").partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip("\r")
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or " " in name:
            raise ProtocolError(f"a malformed header line: {line[:80]!r}")
        name, value = name.lower(), value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return Head(int(code), reason, headers, http10=version == "HTTP/1.0")


class Response:
    """Reads one response from the bytes a connection delivers, as events.

    ``feed(data)`` the bytes received (``b""`` for the connection's end),
    then take :meth:`next_event` until it says ``None`` (more bytes needed):
    one :class:`Head` (informational 1xx heads are skipped), the body as
    ``bytes`` pieces, and :data:`END`.  Bytes after the end stay in
    :attr:`leftover` (a server that answered ahead: not reusable).
    """

    def __init__(self) -> None:
        """Nothing read yet."""
        self._buffer = bytearray()
        self._eof = False
        self._state = "head"
        self._remaining = 0  # body bytes left: of the whole body, or of the current chunk
        self._framed = True  # False: the body ends with the connection
        self.head: Head | None = None

    def feed(self, data: bytes) -> None:
        """Bytes received from the connection; ``b""`` when it ended."""
        if data:
            if self._eof:
                raise ProtocolError("bytes after the connection's end")
            self._buffer += data
        else:
            self._eof = True

    @property
    def leftover(self) -> bytes:
        """Bytes received past the response's end."""
        return bytes(self._buffer) if self._state == "done" else b""

    @property
    def reusable(self) -> bool:
        """Whether the whole response was read and the connection may take another request."""
        return (
            self._state == "done"
            and not self._buffer
            and not self._eof
            and self.head is not None
            and self.head.keep_alive
            and self._framed
        )

    def next_event(self) -> Event | None:
        """The next event, or ``None`` until more bytes are fed."""
        step = getattr(self, f"_in_{self._state}")
        event: Event | None = step()
        return event

    def _line(self, limit: int) -> bytes | None:
        end = self._buffer.find(b"\n")
        if end < 0:
            if len(self._buffer) > limit:
                raise ProtocolError(f"a line longer than {limit} bytes")
            self._truncated()
            return None
        line = bytes(self._buffer[:end]).rstrip(b"\r")
        del self._buffer[: end + 1]
        return line

    def _truncated(self) -> None:
        if self._eof:
            raise ProtocolError(f"the connection ended in the response's {self._state}")

    def _in_head(self) -> Event | None:
        while True:
            # A head ends at the first empty line (CRLF CRLF; a bare LF accepted).
            start = 0
            while self._buffer.startswith(b"\r\n", start) or self._buffer.startswith(b"\n", start):
                start += 2 if self._buffer.startswith(b"\r\n", start) else 1
            del self._buffer[:start]  # blank lines before a status line (RFC 9112 2.2)
            crlf, lf = self._buffer.find(b"\r\n\r\n"), self._buffer.find(b"\n\n")
            ends = [(at, size) for at, size in ((crlf, 4), (lf, 2)) if at >= 0]
            if not ends:
                if len(self._buffer) > MAX_HEAD:
                    raise ProtocolError(f"a response head longer than {MAX_HEAD} bytes")
                self._truncated()
                return None
            at, size = min(ends)
            if at > MAX_HEAD:
                raise ProtocolError(f"a response head longer than {MAX_HEAD} bytes")
            head = _head(bytes(self._buffer[:at]))
            del self._buffer[: at + size]
            if 100 <= head.status < 200:
                if head.status == 101:
                    raise ProtocolError("the server switched protocols")
                continue  # 100 Continue and the like: the real head follows
            self.head = head
            self._start_body(head)
            return head

    def _start_body(self, head: Head) -> None:
        self._framed = True
        codings = head.headers.get("transfer-encoding")
        length = head.headers.get("content-length")
        if head.status in (204, 304):
            self._state = "end"
        elif codings is not None:
            if codings.rsplit(",", 1)[-1].strip().lower() != "chunked":
                raise ProtocolError(f"a transfer coding this client cannot read: {codings!r}")
            self._state = "size"
        elif length is not None:
            values = {v.strip() for v in length.split(",")}
            if len(values) != 1 or not (value := values.pop()).isdigit():
                raise ProtocolError(f"an invalid Content-Length: {length!r}")
            self._remaining = int(value)
            self._state = "length" if self._remaining else "end"
        else:
            self._framed = False
            self._state = "until_eof"

    def _take(self, then: str) -> Event | None:
        if not self._buffer:
            self._truncated()
            return None
        piece = bytes(self._buffer[: self._remaining])
        del self._buffer[: len(piece)]
        self._remaining -= len(piece)
        if not self._remaining:
            self._state = then
        return piece

    def _in_length(self) -> Event | None:
        return self._take("end")

    def _in_until_eof(self) -> Event | None:
        if self._buffer:
            piece = bytes(self._buffer)
            self._buffer.clear()
            return piece
        if self._eof:
            self._state = "done"
            return END
        return None

    def _in_size(self) -> Event | None:
        line = self._line(MAX_LINE)
        if line is None:
            return None
        digits = line.split(b";", 1)[0].strip(b" \t")
        # int(x, 16) alone would take "0x1f", "+1f" and "1_f".
        if not digits or len(digits) > 16 or digits.translate(None, _HEX):
            raise ProtocolError(f"an invalid chunk size: {line[:40]!r}")
        size = int(digits, 16)
        self._remaining = size
        self._state = "data" if size else "trailer"
        return self.next_event()

    def _in_data(self) -> Event | None:
        return self._take("crlf")

    def _in_crlf(self) -> Event | None:
        line = self._line(2)
        if line is None:
            return None
        if line:
            raise ProtocolError("a chunk not followed by CRLF")
        self._state = "size"
        return self.next_event()

    def _in_trailer(self) -> Event | None:
        while (line := self._line(MAX_LINE)) is not None:
            if not line:
                self._state = "end"
                return self.next_event()
        return None

    def _in_end(self) -> Event | None:
        self._state = "done"
        return END

    def _in_done(self) -> Event | None:
        return None
