"""The bench's environment: constants, the children's environment, the machine line.

Shared by every ``bench_*`` module; imports nothing from them.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOKEN = "bench-token-0123456789abcdef0123456789abcdef"
APP = "bench"
#: Hang guard for every wait on a child (not a performance threshold).
WAIT = 30.0
#: How long a holder child holds at most if nobody ends it (the bench always does).
HOLD = 600.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A benchmark could not produce a valid measurement."""


def child_env(pycache: Path) -> dict[str, str]:
    """The environment of every child: no inherited Highlander settings, warm bytecode.

    Children keep their compiled bytecode in a private cache in the scratch
    directory (filled by each benchmark's warm-up run), so modules load from
    ``.pyc`` as they do from an installed wheel, whatever
    ``PYTHONDONTWRITEBYTECODE`` says, and nothing is written into the source tree.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HIGHLANDER_", "CLAUDE_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point fd 2 at ``path`` (the library's log lines are not this script's output)."""
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 2)
        yield
    finally:
        # The library renders its log lines on a thread: let it finish first.
        with contextlib.suppress(Exception):
            flush = getattr(sys.modules.get("highlander._host.log"), "flush", None)
            if flush is not None:
                flush()
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


# -- machine -------------------------------------------------------------------


def machine_info(tmp: str) -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "nproc": len(os.sched_getaffinity(0)),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "tmp_fs": f"{tmp} on {_fs_type(tmp)}",
        "highlander": _git_state(),
        "loadavg_1min_at_start": os.getloadavg()[0],
    }


def _fs_type(path: str) -> str:
    best, kind = "", "unknown"
    real = os.path.realpath(path)
    with contextlib.suppress(OSError), open("/proc/self/mounts", encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) < 3:
                continue
            mount = parts[1]
            inside = real == mount or real.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) > len(best):
                best, kind = mount, parts[2]
    return kind


def _git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "highlander"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+uncommitted changes in highlander/" if dirty else "")


def proc_stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name (index 0 is field 3)."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return handle.read().rsplit(b")", 1)[1].split()


def machine_busy() -> float:
    """Seconds of CPU time the whole machine has spent busy since boot (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as handle:
        fields = [int(v) for v in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def own_cpu() -> float:
    """CPU seconds of this script and of every child it has reaped."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def machine_line(info: dict[str, Any], command: str) -> str:
    return (
        f"machine: {info['cpu']}, nproc {info['nproc']}, {info['python']}, {info['kernel']}, "
        f"tmp {info['tmp_fs']}, load {info['loadavg_1min_at_start']:.2f}, "
        f"highlander {info['highlander']} | command: {command}"
    )
