"""The exception hierarchy: every error Highlander raises, in one place.

::

    HighlanderError
    ├── ProtocolError
    │   ├── LocalProtocolError          we misused the protocol (a bug on our side)
    │   └── RemoteProtocolError         the peer broke the protocol
    │       └── SignatureError          the peer's frame is not authentic
    ├── SuccessionRefused               a newcomer could not take over (``reason``)
    │   ├── AuthenticationError         the incumbent does not share our token
    │   ├── VersionMismatchError        the incumbent speaks another protocol version
    │   ├── ModeRefusedError            the incumbent's mode does not allow succession
    │   ├── ThrashError                 too many successions in the anti-thrash window
    │   ├── OtherAppError               the holder on this socket is another app
    │   └── SaveFailedError             the incumbent's save hook failed
    ├── IncumbentUnreachableError       a live holder does not answer on its socket
    ├── AcquireTimeoutError             acquire(timeout=) ran out (also a TimeoutError)
    ├── ForeignHolderError              the socket belongs to a process that is not ours
    ├── Deposed                         this process no longer holds the project
    ├── EtcdError                       etcd refused a request (``code``: gRPC status)
    │   └── EtcdUnavailableError        no etcd member answered in time
    ├── ConfigurationError              a bad option or environment variable
    │   └── ProjectIdError              no project id that is the same on every host
    ├── UnsafeRuntimeDirError           the runtime directory could be tampered with
    │   └── UnsafeFileError             a file in it is not what Highlander keeps there
    ├── SocketPathTooLongError          no socket name fits the kernel's sun_path
    └── UnsafeSecretError               the per-user secret file could be read by others

Every message says what happened and what to do about it.  Pure code: this
module imports nothing but the standard library's :mod:`enum`.
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    """Why a peer's request was refused: the fixed reason codes of REFUSED.

    ``AUTH``: the frame was not authentic (wrong token, replay, tampering).
    ``VERSION``: the peer speaks another protocol version.
    ``MODE``: the holder's mode does not allow the request.
    ``THRASH``: too many successions in the anti-thrash window.
    ``BUSY``: another succession is already running.
    ``INTERNAL``: the holder failed while serving the request.
    ``LATE``: the ACK_SUCCESSION came after the incumbent's deadline; it keeps
    the project.
    ``PREPARE``: the newcomer could not prepare its takeover (sent by the
    newcomer in answer to SAVED); the incumbent keeps the project.
    ``OTHER_APP``: the SAVE came from another app than the holder's; the
    holder keeps the project and its state.
    ``NO_SHARE``: the holder serves no attached sessions (share mode off, or
    its server does not run :func:`highlander.mcp.serve`).
    ``FINGERPRINT``: the ATTACH came from a server configured differently
    (command, working directory or environment: see docs/mcp.md).
    ``NEWER``: the ATTACH came from a newer build, which succeeds instead.
    ``LEAVING``: the holder's own client left; it hands its sessions and its
    state to a successor (the newcomer succeeds it, even with share ``only``).
    """

    AUTH = "auth"
    VERSION = "version"
    MODE = "mode"
    THRASH = "thrash"
    BUSY = "busy"
    INTERNAL = "internal"
    LATE = "late"
    PREPARE = "prepare"
    OTHER_APP = "other_app"
    NO_SHARE = "no_share"
    FINGERPRINT = "fingerprint"
    NEWER = "newer"
    LEAVING = "leaving"


class HighlanderError(Exception):
    """Base class of every error Highlander raises.

    Catch this to handle any Highlander failure; the subclasses say which.
    """


class ProtocolError(HighlanderError):
    """The succession protocol was violated, by us or by the peer.

    ``reason`` is the REFUSED code that best describes the failure, so the I/O
    shell can tell the peer why it is being dropped.
    """

    def __init__(self, message: str, *, reason: Reason = Reason.INTERNAL) -> None:
        super().__init__(message)
        self.reason = reason


class LocalProtocolError(ProtocolError):
    """Raised when our own side tries something the protocol does not allow.

    For example sending SAVE before HELLO arrived, or building a message with
    an invalid field.  This is a bug in the caller (or in Highlander): the
    message names the state and the message; fix the calling code.
    """


class RemoteProtocolError(ProtocolError):
    """Raised when the peer sends something the protocol does not allow.

    Malformed frames, unknown message types, another protocol version, missing
    or mistyped fields, a message that is illegal in the current state.  The
    connection is unusable afterwards; drop it.  If it keeps happening between
    two Highlander processes, they run incompatible versions: upgrade both.
    """


class SignatureError(RemoteProtocolError):
    """Raised when a frame's MAC does not verify: it is not authentic.

    Wrong or missing ``HIGHLANDER_TOKEN`` on one side, a replayed, reordered or
    reflected frame, or a tampered byte.  If both processes are yours, give
    them the same ``HIGHLANDER_TOKEN`` (set it in the IDE's MCP config for
    every client that starts the server).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.AUTH)


class ConfigurationError(HighlanderError, ValueError):
    """Raised for an invalid option or environment variable.

    The message names the option, the value received and the valid values.
    """


class ProjectIdError(ConfigurationError):
    """Raised when no project id can be settled, or the one given is invalid.

    A backend shared between hosts (etcd, issue #15) needs a key that is the
    same on every host, where the project's path may differ.  The message says
    why (no repository, no or several remotes, a local-path remote, an id
    that is empty, too long or not printable) and the fix: set
    ``HIGHLANDER_PROJECT_ID`` (the same on every host) or pass
    ``project_id=``, or run inside a git repository with an ``origin`` remote.
    """


class UnsafeRuntimeDirError(HighlanderError):
    """Raised when the runtime directory could be tampered with by someone else.

    The directory that holds the socket, lock and state files must be a real
    directory (not a symlink), owned by the current user, with no group or
    other permission bits.  The message says which check failed and the
    command that fixes it; alternatively point ``HIGHLANDER_RUNTIME_DIR`` at a
    private directory.  ``squatted`` is true when someone else could have put
    it there (a symlink, not a directory, another owner): the default place
    then falls back to one nobody can guess.
    """

    def __init__(self, message: str, *, squatted: bool = False) -> None:
        super().__init__(message)
        self.squatted = squatted


class UnsafeFileError(UnsafeRuntimeDirError):
    """Raised when a file in the runtime directory is not what Highlander keeps there.

    The lock file, the record and the event log must be regular files and the
    socket a socket, each owned by the current user; a FIFO, a directory, a
    symlink or another owner's file at one of those names was planted or left
    by something else.  ``path`` names the file; the message says what it is
    and how to fix it (usually: remove it and start again).
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message, squatted=False)
        self.path = path


class SocketPathTooLongError(HighlanderError):
    """Raised when even the short socket name does not fit ``sun_path``.

    Unix-domain socket paths are limited by the kernel (107 bytes on Linux,
    103 on macOS).  Set ``HIGHLANDER_RUNTIME_DIR`` to a shorter directory.
    """


class UnsafeSecretError(HighlanderError):
    """Raised when the per-user secret file is not private.

    Without ``HIGHLANDER_TOKEN`` the HMAC key comes from a secret file in the
    runtime directory; it must be a regular file owned by the current user
    with mode 0600.  Remove it (a new one is created) or set
    ``HIGHLANDER_TOKEN``.
    """


class SuccessionRefused(HighlanderError):  # noqa: N818 - the name users catch
    """Raised in a newcomer when the incumbent cannot be taken over.

    ``reason`` is the :class:`Reason` code.  The incumbent is untouched and
    keeps holding the project.  Used through ``Highlander.ensure_singleton``
    from a script, this ends the process with status 1 and one line on
    stderr.  The subclasses say what to do.
    """

    def __init__(self, message: str, *, reason: Reason) -> None:
        super().__init__(message)
        self.reason = reason


class AuthenticationError(SuccessionRefused):
    """Raised when the incumbent's frames do not verify with our token (or ours with its).

    Give every client that starts this server the same ``HIGHLANDER_TOKEN``
    (in each IDE's MCP config), or unset it everywhere.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.AUTH)


class VersionMismatchError(SuccessionRefused):
    """Raised when the incumbent speaks another Highlander protocol version.

    Upgrade both to the same Highlander release; until then the incumbent
    keeps the project.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.VERSION)


class ModeRefusedError(SuccessionRefused):
    """Raised when the incumbent runs in OBSERVE or WARN mode and will not be deposed.

    Set the same ``HIGHLANDER_MODE`` for every client; switch all to ``auto``
    when the rollout reaches that stage.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.MODE)


class ThrashError(SuccessionRefused):
    """Raised when too many successions happened in the anti-thrash window.

    Two clients are probably restarting the server in turn.  Stop one of
    them, or raise ``thrash_limit=`` / ``thrash_window=``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.THRASH)


class OtherAppError(SuccessionRefused):
    """Raised when the holder this process reached is another app.

    Two apps met on one socket, which their names no longer allow (a hash
    collision, or a peer that names its files its own way): the holder keeps
    its project and its state, and hands nothing to another app.  Give each
    server its own name (``--app``, ``app=``).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.OTHER_APP)


class ShareRefusedError(HighlanderError):
    """Raised when share mode is ``only`` and the holder cannot serve this client.

    The holder runs another configuration (its fingerprint differs), does not
    share, or refused the ATTACH; with ``share="only"`` (``HIGHLANDER_SHARE=only``)
    this process does not replace it either.  The message says which; align
    the two configurations, or set ``HIGHLANDER_SHARE=on`` to let a server that
    cannot share take over (docs/mcp.md).
    """


class SaveFailedError(SuccessionRefused):
    """Raised when the incumbent's save hook failed or returned an invalid handoff.

    The incumbent keeps running with its state.  Its stderr and event log
    name the exception; fix the save hook.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason=Reason.INTERNAL)


class TakeoverError(HighlanderError):
    """Raised when this process could not write what holding the project needs.

    In a handover, the incumbent handed over its state but this process could
    not write its record (a full disk, a ``.state`` that is a directory, ...)
    and declined before the handover committed: the incumbent keeps the
    project and its state.  Claiming a free project, it let go of the lock
    again.  The message names the file and the fix.
    """


class IncumbentUnreachableError(HighlanderError):
    """Raised when a live process holds the project's lock but does not answer.

    Its socket is missing or it does not speak in time.  ``highlander status``
    shows the holder; stop it, or remove it from the IDE configuration.
    """


class AcquireTimeoutError(HighlanderError, TimeoutError):
    """Raised when ``acquire(timeout=...)`` did not hold the project in time.

    The holder keeps the project (a takeover that had committed is finished
    first; nothing is left half done).  The message names the holder: give
    ``acquire()`` more time (or ``timeout=None``: wait as long as the holder
    makes progress), or see what it is doing with ``highlander status``.
    """


class ForeignHolderError(HighlanderError):
    """Raised when the project's socket is served by a process that is not a verified holder.

    Another user's process, or one whose kernel identity contradicts what it
    claims.  Highlander never signals such a process.  The message names its
    pid and executable: stop it yourself if it is yours.
    """


class Deposed(HighlanderError):  # noqa: N818 - the name users catch
    """Raised by ``check_current()`` once this process no longer holds the project.

    A successor took over (or the project was released).  Do not write shared
    state any more: finish up and exit.
    """


class EtcdError(HighlanderError):
    """Raised when the etcd cluster refused one of Highlander's requests.

    ``code`` is the gRPC status etcd gave (7: permission denied: give the
    etcd user read and write on the key prefix, docs/etcd.md "Least
    privilege"), ``message`` etcd's own words.
    """

    def __init__(self, message: str, code: int = 0) -> None:
        """Keep etcd's status code beside the message."""
        super().__init__(message)
        self.code = code


class EtcdUnavailableError(EtcdError):
    """Raised when no etcd member answered within the request's time.

    Every endpoint of ``HIGHLANDER_BACKEND`` was tried.  Check that they are
    the cluster's client URLs and that a majority of its members run
    (``etcdctl endpoint health``).
    """
