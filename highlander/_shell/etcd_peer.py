"""Who the peer of a conversation over etcd is: the holder key's value, and ``/proc`` here."""

from __future__ import annotations

import os

from highlander._host.identity import PeerCredentials

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import socket

    from highlander._core.messages import Hello
    from highlander._etcd.session import HolderValue
    from highlander._host.settings import Settings
    from highlander._shell.etcd_backend import EtcdBackend


def peer_of(
    backend: EtcdBackend, sock: socket.socket, holder: HolderValue | None
) -> PeerCredentials:
    """Who is at the other end of ``sock`` (:meth:`Backend.peer`).

    ``holder`` if we opened the conversation to it; else the newcomer whose
    opening key one of our bridges carries; else nobody we let in.
    """
    if holder is not None:
        return credentials(holder, local=backend.local(holder))
    from highlander._etcd.session import HolderValue  # noqa: PLC0415
    from highlander._host.identity import peer_credentials  # noqa: PLC0415

    incoming = backend.peers.get(sock.getpeername())
    value = HolderValue.decode(incoming.opening.value) if incoming else None
    if value is None or peer_credentials(sock).pid != os.getpid():
        return PeerCredentials(-1, -1, -1)  # not one of our bridges: refused by uid
    return credentials(value, local=backend.local(value))


def credentials(value: HolderValue, *, local: bool) -> PeerCredentials:
    """The peer ``value`` names, as a socket's credentials (``local``: on this host and boot).

    A uid means nothing on another host: there the token and etcd's own
    access control are what keep others out (docs/threat-model.md).
    """
    from highlander._host.identity import process_identity  # noqa: PLC0415

    if not local:
        return PeerCredentials(value.pid, os.geteuid(), -1)
    actual = process_identity(value.pid)
    if actual is None or actual.start_time != value.start_time:
        # Gone, its lease not yet: nobody answers, and nobody is left to signal.
        return PeerCredentials(value.pid, os.geteuid(), -1)
    return PeerCredentials(value.pid, actual.uid, -1)


def hello_mismatch(
    settings: Settings, hello: Hello, holder: HolderValue, pid: int, *, local: bool
) -> str | None:
    """What is wrong with ``hello`` against the holder key's ``holder`` (and ``/proc`` if local)."""
    claimed = (hello.pid, hello.start_time, hello.exe, hello.generation)
    if claimed != (holder.pid, holder.start_time, holder.exe, holder.generation):
        return (
            f"HELLO names pid {hello.pid} of generation {hello.generation}, but the holder "
            f"key names pid {holder.pid} of generation {holder.generation} on {holder.host}"
        )
    if local:
        from highlander._shell.client import hello_problem  # noqa: PLC0415

        return hello_problem(settings, hello, pid)
    return None
