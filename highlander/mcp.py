"""Share one MCP server among every client of a project (docs/mcp.md).

Replace ``server.run("stdio")`` by ``highlander.mcp.run(server, hl)`` (or
``await highlander.mcp.serve(server, hl)`` inside your own loop): the holder
serves its own client over stdio as before, and every client whose newcomer
attached (share mode, ``HIGHLANDER_SHARE=on``) as a session of its own in the
same server: one lifespan, shared tools and state; per client its request
ids, progress, cancellation, roots, client info and protocol era (the SDK's
sessions keep them apart).

Change notifications of the 2025 protocol go to one session, the one a
handler sends them on; :func:`notify_list_changed` sends one to every
session of that era.  Modern (2026-07-28) clients receive them through
``subscriptions/listen`` already.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread
import anyio.to_thread
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.shared.message import SessionMessage

from highlander import _resume
from highlander._highlander import Highlander
from highlander._mcp_sdk import lowlevel, serve_dual_era_loop, stdio_server
from highlander._shell.sessions import Session

__all__ = ["notify_list_changed", "run", "serve"]

#: The longest JSON-RPC line an attached client may send (the SDK's stdio has no limit;
#: the relay leaves past the same length, highlander._relay.MAX_LINE).
MAX_LINE = 64 * 1024 * 1024
#: How long a holder whose client left waits for a relay to take over (the SDK's
#: stdio client kills its server 2 s after closing stdin; others may not).
PROMOTE_WAIT = 10.0
#: The write streams of live sessions, for :func:`notify_list_changed`.
_writers: set[Any] = set()


def run(server: Any, hl: Highlander) -> None:
    """Serve ``server`` on stdio and every attached session until stdin closes."""
    anyio.run(serve, server, hl)


async def serve(server: Any, hl: Highlander) -> None:
    """Serve ``server`` like :func:`run`, in the running anyio loop."""
    low = lowlevel(server)
    init = low.create_initialization_options()
    # Started again by a relay whose holder went: its client's setup, to replay.
    setup = _resume.Setup(_resume.parse(os.environ.pop(_resume.RESUME, "").encode()))
    resumed = setup if setup.initialize is not None else None
    loop_thread = threading.get_ident()
    async with (
        low.lifespan(low) as state,
        anyio.from_thread.BlockingPortal() as portal,
        anyio.create_task_group() as tg,
    ):

        def accept(session: Session) -> None:
            # Called on the holder's serving side: its thread (sync API) or this loop.
            if threading.get_ident() == loop_thread:
                tg.start_soon(_serve_session, low, session, state, init)
            else:
                portal.start_task_soon(_serve_session, low, session, state, init)

        hl.serve_attached(accept)
        try:
            async with stdio_server() as (read, write):
                if resumed is None:
                    await _serve_streams(low, read, write, state, init)
                else:
                    await _serve_resumed(low, read, write, state, init, resumed)
            # Our client left: one of the relays takes over, with the handoff.
            await anyio.to_thread.run_sync(hl.promote, PROMOTE_WAIT, abandon_on_cancel=True)
        finally:
            hl.serve_attached(None)
            tg.cancel_scope.cancel()


async def _serve_streams(low: Any, read: Any, write: Any, state: Any, init: Any) -> None:
    _writers.add(write)
    try:
        await serve_dual_era_loop(low, read, write, lifespan_state=state, init_options=init)
    finally:
        _writers.discard(write)


async def _serve_resumed(
    low: Any, read: Any, write: Any, state: Any, init: Any, setup: _resume.Setup
) -> None:
    """Our client's session, started by a relay: its setup replayed, the answers kept from it.

    The client initialized with the server that went; this one is told the
    same setup under private ids (:func:`highlander._resume.Setup.replay`).
    A server that answers ``initialize`` otherwise than the old one did
    (protocol version, capabilities) ends the session: the client sees the
    server exit rather than a server it did not negotiate with.
    """
    in_tx, in_rx = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_tx, out_rx = anyio.create_memory_object_stream[SessionMessage](0)

    async def feed() -> None:
        async with in_tx:
            for step in setup.replay():
                message = types.jsonrpc_message_adapter.validate_python(step, by_name=False)
                await in_tx.send(SessionMessage(message))
            async for item in read:
                await in_tx.send(item)

    async def drain() -> None:
        async with out_rx:
            async for sent in out_rx:
                message = sent.message
                if not _resume.private(getattr(message, "id", None)) or hasattr(message, "method"):
                    await write.send(sent)
                    continue
                # As the wire carries it (the SDK writes exclude_unset), like the result
                # the relay kept from the old server: the two compare field by field.
                wire = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
                told = setup.answered(wire)
                if told is None:
                    tasks.cancel_scope.cancel()  # not the server our client negotiated with
                    return
                for line in told:
                    note = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    await write.send(SessionMessage(note))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(feed)
        tasks.start_soon(drain)
        await _serve_streams(low, in_rx, out_tx, state, init)
        tasks.cancel_scope.cancel()


async def _serve_session(low: Any, session: Session, state: Any, init: Any) -> None:
    """One attached client: its connection's JSON-RPC lines in and out of an SDK session."""
    stream = await anyio.abc.UNIXSocketStream.from_socket(session.sock)
    in_tx, in_rx = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    out_tx, out_rx = anyio.create_memory_object_stream[SessionMessage](0)
    buffered = BufferedByteReceiveStream(stream)
    if session.rest:
        buffered.feed_data(session.rest)

    async def reader() -> None:
        async with in_tx:
            with contextlib.suppress(
                anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError,
                anyio.DelimiterNotFound, anyio.ClosedResourceError, OSError,
            ):  # fmt: skip
                while True:
                    line = await buffered.receive_until(b"\n", MAX_LINE)
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:  # the SDK answers a malformed line itself
                        await in_tx.send(exc)
                        continue
                    await in_tx.send(SessionMessage(message))

    async def writer() -> None:
        async with out_rx:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                async for sent in out_rx:
                    line = sent.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stream.send(line.encode() + b"\n")

    try:
        async with stream, anyio.create_task_group() as tasks:
            tasks.start_soon(reader)
            tasks.start_soon(writer)
            await _serve_streams(low, in_rx, out_tx, state, init)
            tasks.cancel_scope.cancel()
    finally:
        session.ended()


async def notify_list_changed(kind: str = "tools") -> None:
    """Tell every live session that the ``kind`` list changed (tools, resources, prompts)."""
    method = f"notifications/{kind}/list_changed"
    note = SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method=method))
    for write in list(_writers):
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await write.send(note)
