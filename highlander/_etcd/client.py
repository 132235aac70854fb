"""A small etcd v3 client over its JSON/HTTP API: every member tried, short timeouts.

Why HTTP and not gRPC: etcd serves the same API as JSON beside gRPC, a
small HTTP/1.1 client (:mod:`highlander._etcd.http`) speaks it on any
:class:`~highlander._host.waiting.Runtime` (the session's loop without
asyncio, or anyio's on asyncio and trio), and no grpcio or protobuf pin
lands in the user's environment.  What this client adds to a plain
HTTP call is what a holder needs from a cluster whose members come and go:

* **Rotation.** A request goes to the member that answered last; a member
  that does not connect, times out, or says it cannot serve (no leader,
  stopping: gRPC ``UNAVAILABLE``) costs one short try, and the next member
  is asked, round the list, until the request's budget is spent.  A frozen
  member (SIGSTOPped, a VM paused) accepts connections and answers nothing,
  so only a per-request timeout gets past it.
* **Auth.** etcd's simple tokens are known to the member that issued them
  only, so a token is kept per member and fetched again when a member says
  it does not know it.
* **Watches that resume.** A watch remembers the revision after the last
  event it delivered and the keys it reported; when its member goes (or is
  silent), it reads its range on the next one and opens again from that
  read, so a change is not lost (only the deletes of keys it never
  reported, which no reader here needs) and history is neither replayed
  nor needed (a compaction is no failure).

The bodies and answers are :mod:`highlander._etcd.api`'s; this module only
moves them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator

from highlander._core.errors import EtcdError, EtcdUnavailableError
from highlander._etcd import api
from highlander._etcd.endpoints import Target
from highlander._etcd.http import Pool, TransportError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from highlander._host.waiting import Runtime

#: Per-request timeout unless the caller gives one (keepalives give less: _core/lease).
DEFAULT_TIMEOUT = 1.0
#: A request's whole budget, every member tried, unless the caller gives one.
DEFAULT_BUDGET = 5.0
#: A watch with nothing to say for this long is opened again (on the next member if
#: its own is frozen): an upper bound on how late a frozen member makes an event.
WATCH_IDLE = 5.0
#: Pause between rounds of the member list, so a cluster without quorum is not hammered.
ROUND_PAUSE = 0.05


#: What a watch asked to ``report_created`` yields first, once etcd has it.
CREATED = api.Event("created", api.KeyValue(b"", b"", 0, 0, 0, 0))


def _note(present: set[bytes], event: api.Event) -> None:
    """Keep ``present`` (the keys a watch reported there) up to date with ``event``."""
    (present.add if event.kind == "put" else present.discard)(event.kv.key)


async def _lines(raw: AsyncIterator[bytes]) -> AsyncGenerator[api.Json, None]:
    """The JSON objects of a newline-delimited stream (a watch's answer)."""
    pending = b""
    async for data in raw:
        pending += data
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if line.strip():
                message = json.loads(line)
                if not isinstance(message, dict):
                    raise api.MalformedAnswer("a watch line that is not a JSON object")
                yield message


def _encode(body: api.Json) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _headers(extra: dict[str, str]) -> dict[str, str]:
    return {"Content-Type": "application/json", **extra}


class _Retry(Exception):  # noqa: N818 - internal control flow
    """This member could not serve the request; ask the next one."""


class _Compacted(Exception):  # noqa: N818 - internal control flow
    """The history a watch resumes from was compacted away: list, then watch again."""


class _Spent(_Retry):
    """The call's budget ran out before this member was asked: ask nobody else."""


def _plain_refusal(url: str, status: int, text: str) -> str:
    """A refusal etcd wrote as plain text, with the fix where it is known."""
    said = text.strip()[:200]
    if "CommonName" in said:
        return (
            f"etcd refused {url}: {said!r}. With auth on, etcd's HTTP gateway refuses a "
            "client certificate that carries a CommonName: make HIGHLANDER_ETCD_CERT one "
            'without (subject alternative names only), docs/etcd.md "TLS"'
        )
    return f"etcd refused {url}: HTTP {status}: {said!r}"


class Client:
    """An etcd client for one :class:`~highlander._etcd.endpoints.Target`; ``async with`` it."""

    def __init__(
        self,
        target: Target,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        budget: float = DEFAULT_BUDGET,
        runtime: Runtime | None = None,
    ) -> None:
        """Nothing is connected until the first request.

        ``timeout``: one request's, per member; ``budget``: a call's whole
        time, every member tried (unless the call gives its own);
        ``runtime``: where its coroutines wait (anyio's running loop if none).
        """
        if runtime is None:
            from highlander._host.waiting import ANYIO  # noqa: PLC0415

            runtime = ANYIO
        self.runtime: Runtime = runtime
        self.target = target
        self.timeout = timeout
        self.budget = budget
        self._current = 0
        #: POSTs sent so far, answered or not (a caller tells a retried write by it).
        self.posts = 0
        self._tokens: dict[str, str] = {}
        self._http: Pool | None = None

    async def __aenter__(self) -> Client:
        """Open the connection pool."""
        # Plain http:// members need no trust store: loading one costs ~100 ms a start.
        context = None
        if self.target.tls:
            import ssl  # noqa: PLC0415 (only TLS deployments pay for it)

            context = ssl.create_default_context(cafile=self.target.ca)
            if self.target.cert and self.target.key:
                context.load_cert_chain(self.target.cert, self.target.key)
        # No proxy is ever used (no HTTP_PROXY read): a proxy meant for the user's
        # downloads must not silently carry the project's claim and its auth token.
        self._http = Pool(context, self.runtime)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def endpoint(self) -> str:
        """The member asked first (the last one that answered)."""
        return self.target.endpoints[self._current]

    def _rotate(self, failed: int) -> None:
        if self._current == failed:
            self._current = (failed + 1) % len(self.target.endpoints)

    async def call(
        self,
        path: str,
        body: api.Json,
        *,
        timeout: float | None = None,
        budget: float | None = None,
    ) -> api.Json:
        """POST ``body`` to ``path`` (``/v3/kv/txn``, ...) on the first member that answers.

        Raises :class:`EtcdUnavailableError` when none did within ``budget``
        seconds, :class:`EtcdError` when etcd refused the request.  A request
        that timed out may still have been applied: callers of writes that
        are not idempotent read back (see ``api.put_if_absent``).
        """
        budget = self.budget if budget is None else budget
        # Each member's latest failure, for the error: a request the budget's
        # end cut short says only "timed out" and must not hide what the same
        # member said before (CERTIFICATE_VERIFY_FAILED names the fix).
        failures: dict[str, str] = {}
        runtime = self.runtime
        deadline = runtime.now() + budget
        while runtime.now() < deadline:
            for _ in self.target.endpoints:
                index = self._current
                endpoint = self.target.endpoints[index]
                try:
                    return await self._once(index, path, body, timeout or self.timeout, deadline)
                except _Spent:
                    break
                except _Retry as why:
                    if runtime.now() < deadline or endpoint not in failures:
                        failures[endpoint] = str(why)
                    self._rotate(index)
            else:
                await runtime.sleep(min(ROUND_PAUSE, max(deadline - runtime.now(), 0.0)))
        said = "; ".join(f"{where}: {why}" for where, why in failures.items())
        raise EtcdUnavailableError(
            f"no etcd member answered {path} within {budget:g} s "
            f"({said or 'no member was tried'}); check "
            f"HIGHLANDER_BACKEND ({self.target.describe()}) and that a majority of the "
            "cluster's members run (etcdctl endpoint health)",
            api.UNAVAILABLE,
        )

    async def _once(
        self, index: int, path: str, body: api.Json, timeout: float, deadline: float
    ) -> api.Json:
        """One member's answer: each request within ``timeout`` and before ``deadline``."""
        endpoint = self.target.endpoints[index]
        for attempt in range(2):
            headers = await self._auth(index, self._within(timeout, deadline))
            answer = await self._post(
                endpoint + path, body, headers, self._within(timeout, deadline)
            )
            failure = api.error_of(answer)
            if failure is None:
                return answer
            code, message = failure
            if code == api.UNAUTHENTICATED and self.target.user and attempt == 0:
                self._tokens.pop(endpoint, None)
                continue
            from highlander._etcd import refusals  # noqa: PLC0415 - a refusal's path only

            if refusals.ask_again(code, message):
                raise _Retry(message)
            raise refusals.refused(path, code, message)
        raise EtcdError(
            f"etcd refused user {self.target.user!r} twice on {endpoint}: check "
            "HIGHLANDER_ETCD_USER / HIGHLANDER_ETCD_PASSWORD",
            api.UNAUTHENTICATED,
        )

    def _within(self, timeout: float, deadline: float) -> float:
        """``timeout``, cut to what is left before ``deadline`` (a call's budget)."""
        left = deadline - self.runtime.now()
        if left <= 0:
            raise _Spent
        return min(timeout, left)

    async def _post(
        self, url: str, body: api.Json, headers: dict[str, str], timeout: float
    ) -> api.Json:
        """One POST; its JSON object, or :class:`_Retry` / :class:`EtcdError`."""
        assert self._http is not None, "use the client as `async with Client(...)`"
        self.posts += 1
        try:
            status, raw = await self._http.post(url, _encode(body), _headers(headers), timeout)
        except TransportError as exc:
            raise _Retry(str(exc)) from exc
        try:
            answer = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if 400 <= status < 500:  # the same on every member: no use retrying
                text = raw.decode("utf-8", "replace")
                raise EtcdError(_plain_refusal(url, status, text)) from exc
            raise _Retry(f"HTTP {status}, not JSON") from exc
        if not isinstance(answer, dict):
            raise _Retry("the answer is not a JSON object")
        if status >= 500 and api.error_of(answer) is None:
            raise _Retry(f"HTTP {status}")
        return answer

    async def _auth(self, index: int, timeout: float) -> dict[str, str]:
        if not self.target.user or self.target.password is None:
            return {}
        endpoint = self.target.endpoints[index]
        if endpoint not in self._tokens:
            body = api.authenticate(self.target.user, self.target.password)
            answer = await self._post(endpoint + "/v3/auth/authenticate", body, {}, timeout)
            failure = api.error_of(answer)
            if failure is not None:
                code, message = failure
                from highlander._etcd import refusals  # noqa: PLC0415 - a refusal's path only

                if refusals.ask_again(code, message):
                    raise _Retry(message)
                raise EtcdError(
                    f"etcd refused to authenticate {self.target.user!r}: {message}; check "
                    "HIGHLANDER_ETCD_USER / HIGHLANDER_ETCD_PASSWORD",
                    code,
                )
            self._tokens[endpoint] = api.token(answer)
        return {"Authorization": self._tokens[endpoint]}

    async def watch(
        self,
        key: bytes,
        start_revision: int,
        *,
        prefix: bool = False,
        end: bytes = b"",
        idle: float = WATCH_IDLE,
        report_created: bool = False,
        known: tuple[bytes, ...] = (),
    ) -> AsyncGenerator[api.Event, None]:
        """Every change of ``key`` (under it; up to ``end``) from ``start_revision`` on, in order.

        ``start_revision`` 0: from the moment etcd has the watch.  With
        ``report_created``, the first item is :data:`CREATED`, once etcd
        has the watch: what is written after that is seen, and seen at
        once.  (etcd delivers a watch that starts at a revision it has
        already passed only at its next resynchronisation, up to 100 ms
        later: a conversation's answer must not be watched for after it
        may have come.)

        Resumes on another member when its member goes or stays silent for
        ``idle`` seconds, and on the same one when etcd compacted the history
        it started from.  A resume lists, then watches again
        (:func:`~highlander._etcd.relist.relisted`): a put for each key
        written since the last event, a delete for each key it had reported,
        or the caller named in ``known``, that is gone, then on from the
        read's revision.
        """
        following, failures = start_revision, 0
        present, relist = set(known), False  # keys reported there; resume by a read
        range_end = end or (api.prefix_end(key) if prefix else b"")
        while True:
            index = self._current
            try:
                if relist:
                    from highlander._etcd.relist import relisted  # noqa: PLC0415 - resumes only

                    events, following = await relisted(self, key, range_end, following, present)
                    relist = False
                    for event in events:
                        _note(present, event)
                        yield event
                body = _encode(api.watch(key, following, prefix=prefix, end=end))
                async with contextlib.aclosing(self._batches(index, body, idle)) as batches:
                    async for batch in batches:
                        if batch.created and following == 0:
                            following = batch.header.revision + 1  # "from now": a revision
                        if batch.created and report_created:
                            report_created = False
                            yield CREATED
                        failures = 0
                        for event in batch.events:
                            if event.kv.mod_revision < following:
                                continue  # seen before a resume
                            following = event.kv.mod_revision + 1
                            _note(present, event)
                            yield event
            except _Compacted:
                relist = True
                continue  # list, then watch again, on the same member
            except (_Retry, TransportError, json.JSONDecodeError, api.MalformedAnswer):
                pass  # a resume from `following` loses nothing
            except EtcdUnavailableError:
                pass  # the list: asked again
            # Every resume lists rather than replays: a quiet watch's `following` is as
            # old as its last event, and etcd would scan every revision since, each time.
            relist = following > 0 and not report_created
            self._rotate(index)
            failures += 1
            if failures >= len(self.target.endpoints):
                await self.runtime.sleep(ROUND_PAUSE)

    async def _batches(
        self, index: int, body: bytes, idle: float
    ) -> AsyncGenerator[api.WatchBatch, None]:
        """The batches of one watch stream on member ``index`` (``body``: its create request)."""
        assert self._http is not None, "use the client as `async with Client(...)`"
        headers = await self._auth(index, self.timeout)
        async with (
            self._http.stream(
                self.target.endpoints[index] + "/v3/watch",
                body,
                _headers(headers),
                timeout=self.timeout,
                idle=idle,
            ) as stream,
            contextlib.aclosing(_lines(stream)) as messages,
        ):
            async for message in messages:
                failure = api.error_of(message)
                if failure is not None:
                    raise _Retry(failure[1])
                batch = api.watch_batch(message)
                if batch.compact_revision:
                    raise _Compacted
                if batch.canceled:
                    raise _Retry(batch.cancel_reason or "watch canceled")
                yield batch
