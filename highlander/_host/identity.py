"""Who a process is, according to the kernel.

A pid is only a number and gets reused; a process is identified by its pid
*and* its start time (and, as a cross-check, its executable and uid).  On
Linux everything comes from ``/proc`` and ``SO_PEERCRED``; psutil is the
fallback where ``/proc`` is absent (imported only there).
"""

from __future__ import annotations

import os
import sys
from functools import cache

from highlander._core.deadlines import Sample
from highlander._core.values import Value

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (2 ms)
if TYPE_CHECKING:
    import socket


class PeerCredentials(Value):
    """The credentials the kernel recorded for the other end of a socket."""

    pid: int
    uid: int
    gid: int


class ProcessIdentity(Value):
    """A process as the kernel describes it: enough to tell it from a pid reuse."""

    pid: int
    start_time: int
    exe: str
    uid: int


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """Return the kernel's credentials of the peer of a connected Unix socket."""
    # Imported here: a duplicate's verdict never needs them (socket costs 2 ms).
    import socket  # noqa: PLC0415

    if hasattr(socket, "SO_PEERCRED"):
        # struct ucred, three native C ints (struct itself costs a newcomer 0.4 ms to import).
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        pid, uid, gid = (
            int.from_bytes(raw[at : at + 4], sys.byteorder, signed=True) for at in (0, 4, 8)
        )
        return PeerCredentials(pid, uid, gid)
    # macOS: LOCAL_PEERPID (0x002) at SOL_LOCAL (0) and getpeereid via LOCAL_PEERCRED.
    import struct  # noqa: PLC0415  # pragma: no cover - macOS

    pid = struct.unpack("i", sock.getsockopt(0, 0x002, 4))[0]  # pragma: no cover - macOS
    raw = sock.getsockopt(0, 0x001, struct.calcsize("iih16i"))  # pragma: no cover - macOS
    _version, uid, _ngroups, gid, *_ = struct.unpack("iih16i", raw)  # pragma: no cover
    return PeerCredentials(pid, uid, gid)  # pragma: no cover


@cache
def boot_id() -> str:
    """Return this boot's id (start times are only comparable within one boot)."""
    try:
        # Binary, then decoded: a text-mode open would load the ascii codec's module.
        with open("/proc/sys/kernel/random/boot_id", "rb") as handle:
            return handle.read().strip().decode("ascii")
    except OSError:  # pragma: no cover - not Linux
        import psutil  # noqa: PLC0415 - only where /proc is absent

        return str(int(psutil.boot_time()))


def process_identity(pid: int) -> ProcessIdentity | None:
    """Return the identity of live process ``pid``, or ``None`` if there is none."""
    if os.path.isdir("/proc/self"):
        return _proc_identity(pid)
    return _psutil_identity(pid)  # pragma: no cover - not Linux


def _proc_identity(pid: int) -> ProcessIdentity | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        status = _status_uid(pid)
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # a zombie has released everything it held
        return None
    start_time = int(fields[19])  # field 22 of the whole line
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = ""  # kernel threads, or a process we may not inspect
    return ProcessIdentity(pid=pid, start_time=start_time, exe=exe, uid=status)


#: Clock ticks per second: the unit of the CPU times in ``/proc/<pid>/stat``.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_fields(pid: int, tid: int | None = None) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` from the state on (field 3 is index 0); ``None`` if gone.

    One read gives the state, parent, process group and start time together,
    so they describe one process even if the pid is reused right after.
    With ``tid``, the fields of that thread of ``pid``.
    """
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        with open(path, "rb") as handle:
            stat = handle.read()
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(b")") + 2 :].split()
    except (OSError, ValueError):
        return None
    return fields if len(fields) > 19 else None


def run_state(pid: int, *, threads: bool = True) -> Sample | None:
    """What the kernel shows of a process now; ``None`` if it is gone.

    ``/proc/<pid>/stat`` gives the CPU time of the whole process but the
    state of its main thread only, which sleeps while another thread (a
    holder's serving thread) runs or waits for a CPU.  So while the main
    thread is asleep the threads are asked too: one running (``R``) or
    waiting for the disk (``D``) makes the process's state.  ``threads=False``
    skips that: for a sample taken before a wait, which only its times and
    whether it is stopped matter for (:func:`~highlander._core.deadlines.looks_busy`),
    and which every greeting and handover takes.  The time spent waiting for
    a CPU (``/proc/<pid>/task/*/schedstat``) is always summed over threads.
    """
    fields = stat_fields(pid)
    if fields is None:
        return None
    state = fields[0].decode()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    queued = sum(_queued_ns(pid, tid) for tid in tids) / 1e9
    if threads and state in "SI":
        states = {t[0].decode() for t in (stat_fields(pid, int(tid)) for tid in tids) if t}
        state = next((s for s in "RD" if s in states), state)
    return Sample(state, cpu, queued)


def _queued_ns(pid: int, tid: str) -> int:
    """Nanoseconds thread ``tid`` has waited runnable for a CPU (0 if the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
            return int(handle.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def is_halted(pid: int) -> bool:
    """Whether the kernel shows ``pid`` stopped (SIGSTOP, a tracer) or gone."""
    fields = stat_fields(pid)  # a stop or an exit shows on the main thread
    return fields is None or fields[0].decode() in "TtZXx"


def _status_uid(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.startswith("Uid:"):
                return int(line.split()[2])  # the effective uid
    raise FileNotFoundError(pid)  # pragma: no cover - every status has Uid


def _psutil_identity(pid: int) -> ProcessIdentity | None:  # pragma: no cover - not Linux
    import psutil  # noqa: PLC0415 - only where /proc is absent

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            start = int(proc.create_time() * 100)
            try:
                exe = proc.exe()
            except psutil.AccessDenied:
                exe = ""
            return ProcessIdentity(pid=pid, start_time=start, exe=exe, uid=proc.uids().effective)
    except psutil.NoSuchProcess:
        return None


@cache
def own_identity() -> ProcessIdentity:
    """Return this process's identity (cached per process, reset after fork)."""
    me = process_identity(os.getpid())
    if me is None:  # pragma: no cover - we are alive
        raise RuntimeError("cannot read this process's own identity")
    return me


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=own_identity.cache_clear)


def cmdline(pid: int) -> list[str]:
    """Return the command line of ``pid`` (empty if unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return list(sys.orig_argv) if pid == os.getpid() else []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def gone(pid: int, start_time: int) -> bool:
    """Whether process (``pid``, ``start_time``) has exited: its pid is free, or another's now."""
    who = process_identity(pid)
    return who is None or who.start_time != start_time


def let_go(pid: int, start_time: int, file_id: tuple[int, int]) -> bool:
    """Whether process (``pid``, ``start_time``) is gone or no longer has the file open.

    ``file_id`` is (device, inode), taken from a descriptor of our own, so a
    path deleted or replaced meanwhile cannot fool the check.  A zombie has
    no descriptors left: it has let go.
    """
    if gone(pid, start_time):
        return True
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return True
    except OSError:
        return False  # it exists but we may not look: assume it still holds
    for name in names:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == file_id:
            return False
    return True


def holds_lock(pid: int, path: str) -> bool:
    """Whether process ``pid`` holds the exclusive ``flock`` on the file at ``path``.

    Having the file open is not enough (anyone may open it read-only): one
    of ``pid``'s descriptors must be the open file description that owns the
    lock.  ``/proc/<pid>/fdinfo/<fd>`` lists exactly the locks owned by that
    descriptor's description, in ``/proc/locks``' format.  ``/proc/locks``
    itself is no proof: it names the process that called ``flock``, which
    after a succession is the predecessor (the lock came with ``SCM_RIGHTS``).
    """
    try:
        target = os.stat(path, follow_symlinks=False)
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    wanted = (target.st_dev, target.st_ino)
    for name in names:
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")
            if (st.st_dev, st.st_ino) != wanted:
                continue
            with open(f"/proc/{pid}/fdinfo/{name}", "rb") as handle:
                info = handle.read()
        except OSError:
            continue
        if any(_is_write_flock(line) for line in info.splitlines()):
            return True
    return False


def flock_held(path: str) -> bool:
    """Whether some open file description holds a ``flock`` on the file at ``path`` now.

    ``/proc/locks`` lists every lock with the file's device and inode; it
    says nothing reliable of who holds it (the process it names is the one
    that called ``flock``: after a succession, the predecessor).
    """
    try:
        st = os.stat(path, follow_symlinks=False)
        with open("/proc/locks", "rb") as handle:
            listed = handle.read().splitlines()
    except OSError:
        return False
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}".encode()
    return any(_flock_on(line.split()) == wanted for line in listed)


def fd_holds_flock(fd: int) -> bool:
    """Whether our descriptor ``fd``'s open file description owns an exclusive ``flock``.

    Asked without taking the lock: ``flock`` on a description that does not
    hold it would *acquire* it if it is free.
    """
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as handle:
            info = handle.read()
    except OSError:
        return False
    return any(_is_write_flock(line) for line in info.splitlines())


def _is_write_flock(line: bytes) -> bool:
    # An fdinfo line: "lock:\t" and then a line of /proc/locks; exclusive only.
    fields = line.split()
    return fields[:1] == [b"lock:"] and fields[4:5] == [b"WRITE"] and bool(_flock_on(fields[1:]))


def _flock_on(fields: list[bytes]) -> bytes:
    """The ``dev:ino`` of the file a granted ``flock`` line of /proc/locks is on (else empty)."""
    # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2147010 0 EOF"; a process still
    # waiting for the lock shows "1: -> FLOCK ..." and does not count.
    return fields[5] if fields[1:2] == [b"FLOCK"] and len(fields) > 5 else b""


class Expected(Value):
    """Who a process must be before Highlander may signal it.

    ``lock_path``, when set, must be locked by the process (:func:`holds_lock`):
    proof from the kernel that it is the one holding the project's lock.  ``boot_id``, when
    set, must be this boot's (start times restart at every boot).
    """

    pid: int
    start_time: int
    exe: str
    uid: int
    boot_id: str | None = None
    lock_path: str | None = None


def mismatch(expected: Expected) -> str | None:
    """Return why the live process ``expected.pid`` is not ``expected``, or ``None``."""
    pid = expected.pid
    if expected.boot_id is not None and expected.boot_id != boot_id():
        return "the record is from another boot"
    actual = process_identity(pid)
    if actual is None:
        return f"pid {pid} is gone"
    problems = [
        (actual.start_time != expected.start_time, f"started at {actual.start_time}"),
        (actual.uid != expected.uid, f"runs as uid {actual.uid}"),
        (bool(expected.exe) and actual.exe != expected.exe, f"runs {actual.exe!r}"),
    ]
    for failed, what in problems:
        if failed:
            return f"pid {pid} {what}, unlike the holder"
    if expected.lock_path is not None and not holds_lock(pid, expected.lock_path):
        return f"pid {pid} does not hold the project's lock (having its file open is not enough)"
    return None
