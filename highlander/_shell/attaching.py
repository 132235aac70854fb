"""The newcomer's side of share mode: choose from HELLO, ATTACH, become a relay.

After a verified HELLO, :func:`attach` takes the rules' choice
(:func:`highlander._core.sharing.newcomer_chooses`): attach, succeed as
without share mode (the reason logged, ``share_declined``), or refuse to
start (``only``: :class:`ShareRefusedError`).  Attaching is a signed ATTACH
under the same token, uid and identity checks as SAVE; on ATTACHED this
process stops being a server: :func:`become_relay` replaces it (``exec``)
by the stdlib-only relay of :mod:`highlander._relay`, which pumps its
client's stdio to the holder's session and back.  The relay is small (no
application code, no Highlander import) and keeps the pid, so the client
never notices.
"""

from __future__ import annotations

import os
import sys
import time

from highlander._core.errors import HighlanderError, Reason, ShareRefusedError
from highlander._core.findings import Changed, Leaving, Setback
from highlander._core.messages import Attach, Attached, Busy, Refused
from highlander._core.sharing import (
    EXPLAINED,
    Choice,
    ShareMode,
    newcomer_chooses,
    succeeds_anyway,
)
from highlander._core.values import Value
from highlander._host.event_log import Event, Outcome
from highlander._host.identity import own_identity
from highlander._host.settings import Settings
from highlander._shell.client import Greeting
from highlander._shell.wire import receive_event, send_message

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms): a newcomer's path
if TYPE_CHECKING:
    from typing import NoReturn

    from highlander._core.messages import Hello

#: The environment variable that tells the relay how to start its server again.
RELAY_COMMAND = "HIGHLANDER_RELAY_COMMAND"
#: The relay program (stdlib only), run with ``python -I -S``.
RELAY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_relay.py")


class Relay(Value):
    """A holder serves our client now: the connection to hand the relay, and what it read."""

    fd: int
    rest: bytes
    holder: int
    generation: int
    sessions: int


class Declined:
    """Which holder refused our ATTACH in this acquire: that one we succeed, as unshared.

    Per holder (pid and generation): a leaving holder refuses every ATTACH
    and its first newcomer succeeds it; the others must attach to that
    successor, not succeed it in turn.
    """

    def __init__(self) -> None:
        """Not declined yet."""
        self.reason: Reason | None = None
        self.by: tuple[int, int] | None = None

    def covers(self, hello: Hello) -> bool:
        """Whether the holder that sent ``hello`` is the one that refused us."""
        return self.reason is not None and self.by == (hello.pid, hello.generation)


async def attach(
    settings: Settings, greeting: Greeting, declined: Declined
) -> Relay | Setback | None:
    """Attach to the holder ``greeting`` verified, if the rules say so; ``None``: succeed it."""
    hello = greeting.hello
    if declined.covers(hello):
        return None
    held_for = time.time() - hello.since_ms / 1000  # one machine: share mode is local only
    verdict = newcomer_chooses(settings.share, settings.build(), hello, held_for)
    if verdict.choice is Choice.WAIT:
        return Changed()  # a holder that has just claimed: ask it again in a moment
    if verdict.choice is not Choice.ATTACH:
        if verdict.reason is not None:
            refuse = verdict.choice is Choice.REFUSE
            _declined(settings, greeting.peer.pid, verdict.reason, refuse=refuse)
        return None
    conn, waiter, build, me = greeting.conn, greeting.waiter, settings.build(), own_identity()
    assert conn.peer_nonce is not None
    request = Attach(
        me.pid, me.start_time, conn.local_nonce.hex(), conn.peer_nonce.hex(), settings.app,
        build.version, build.fingerprint,
    )  # fmt: skip
    await send_message(greeting.sock, conn, request, waiter)
    # A missed deadline raises Overdue: the newcomer judges it as a missed SAVE answer.
    answer = await receive_event(greeting.sock, conn, waiter)
    return _answered(settings, greeting, answer, declined)


def _answered(
    settings: Settings, greeting: Greeting, answer: object, declined: Declined
) -> Relay | Setback:
    """What the holder's answer to our ATTACH means for this acquire."""
    peer = greeting.peer
    if isinstance(answer, Busy):
        settings.events.emit(Event.BUSY, peer_pid=peer.pid, successor_pid=answer.pid)
        return Leaving(peer.pid)
    if isinstance(answer, Refused):
        only = settings.share is ShareMode.ONLY and not succeeds_anyway(answer.reason)
        _declined(settings, peer.pid, answer.reason, refuse=only)
        declined.reason, declined.by = (
            answer.reason,
            (greeting.hello.pid, greeting.hello.generation),
        )
        return Changed()  # the next attempt, on a new connection, succeeds it
    if not isinstance(answer, Attached):
        return Changed()  # it went away: look again
    fd = os.dup(greeting.sock.fileno())  # the attempt closes its socket; the relay keeps this
    rest = greeting.conn.unframed()
    return Relay(fd, rest, greeting.hello.pid, answer.generation, answer.sessions)


def _declined(settings: Settings, pid: int, reason: Reason, *, refuse: bool) -> None:
    why = EXPLAINED.get(reason, reason.value)
    settings.events.emit(Event.SHARE_DECLINED, peer_pid=pid, reason=reason, detail=why)
    if refuse:
        raise ShareRefusedError(
            f"cannot share the holder (pid {pid}) of {settings.paths.socket}: {why}; with "
            "HIGHLANDER_SHARE=only this process does not replace it. Align the two "
            "configurations, or set HIGHLANDER_SHARE=on to let this server take over"
        )


def restart_argv() -> list[str]:
    """This server's command line, to run it again from any directory.

    ``sys.orig_argv`` with the script as ``__main__.__file__`` names it
    (absolute since Python 3.9): a server started as ``python server.py``
    that changed directory since would not find ``server.py`` again.
    """
    argv = [sys.executable, *sys.orig_argv[1:]]
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    at = len(argv) - len(sys.argv)  # the script, if there is one, comes before its arguments
    relative = 1 <= at < len(argv) and argv[at] == sys.argv[0] and not os.path.isabs(argv[at])
    if relative and isinstance(script, str) and os.path.isabs(script):
        argv[at] = script
    return argv


def become_relay(settings: Settings, relay: Relay) -> NoReturn:
    """Replace this process by the relay (never returns; raises if it cannot start)."""
    from highlander._host.log import flush  # noqa: PLC0415

    settings.events.emit(
        Event.ATTACHED,
        peer_pid=relay.holder,
        generation=relay.generation,
        sessions=relay.sessions,
        outcome=Outcome.ATTACHED,
    )
    flush()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()  # the application's own lines, written before it called us
    os.set_inheritable(relay.fd, True)
    from highlander._relay import command as relay_command  # noqa: PLC0415 - only a relay

    argv = relay_command(relay.fd, relay.rest, relay.holder)
    # How to start this server again when the holder goes (the relay re-attaches
    # or is promoted: docs/mcp.md); HIGHLANDER_RESUME, if we were started so,
    # stays in the environment for the relay to replay its client's setup.
    import json  # noqa: PLC0415 - only a relay needs it

    command = {"argv": restart_argv(), "cwd": os.getcwd()}
    env = {**os.environ, RELAY_COMMAND: json.dumps(command)}
    try:
        os.execve(sys.executable, argv, env)  # noqa: S606 - the relay replaces us, by design
    except OSError as exc:
        os.close(relay.fd)
        raise HighlanderError(
            f"cannot start the share-mode relay ({sys.executable} {RELAY}): {exc}; "
            "set HIGHLANDER_SHARE=off to run this server on its own"
        ) from exc
