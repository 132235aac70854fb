"""What the chaos does to the project's files: sockets, records, legacy locks.

Each function takes the project's paths (``Settings.paths``), does one thing
to the runtime directory and returns a short note for the run's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

from highlander._identity import boot_id, process_identity
from highlander._record import HolderRecord


def delete_socket(paths: Any) -> str:
    try:
        os.unlink(paths.socket)
    except FileNotFoundError:
        return "no socket file"
    return "socket deleted"


def replace_socket(paths: Any, variant: str) -> str:
    """Put a regular file, or a socket file nobody listens on, at the socket path."""
    tmp = os.path.join(paths.runtime_dir, f"chaos-{variant}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    if variant == "file":
        Path(tmp).write_bytes(b"not a socket\n")
    else:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(tmp)  # bound, never listening, then closed: a stale socket file
    os.replace(tmp, paths.socket)
    return f"socket replaced by a {'regular file' if variant == 'file' else 'stale socket'}"


def _record(paths: Any) -> dict[str, Any] | None:
    try:
        data = json.loads(Path(paths.state).read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _template(pid: int) -> dict[str, Any]:
    """A complete, well-typed record (for damage that needs one when none is left)."""
    return {
        "pid": pid,
        "start_time": 1,
        "exe": "",
        "uid": os.geteuid(),
        "boot_id": boot_id(),
        "app": "chaos",
        "mode": "auto",
        "generation": 1,
        "since_ms": 0,
        "cmdline": [],
        "successions_ms": [],
    }


def corrupt_state(paths: Any, variant: str, pid: int = 0) -> str:
    """Overwrite the holder's record in place (not atomically: a crash mid-write)."""
    record = _record(paths)
    if variant == "garbage":
        data = b"\x00{garbage\xff not json"
    elif variant == "truncated":
        whole = json.dumps(record or {"pid": 1}).encode()
        data = whole[: len(whole) // 2]
    elif variant == "wrong_types":
        # Every field of a record present, every value of the wrong type (a list).
        names = record or dict.fromkeys(HolderRecord.FIELDS, 0)
        data = json.dumps({key: [str(value)] for key, value in names.items()}).encode()
    elif variant == "bad_pid":
        data = json.dumps({**(record or _template(pid)), "pid": pid}).encode()
    elif variant == "huge_generation":
        data = json.dumps({**(record or _template(1)), "generation": 2**63}).encode()
    else:
        data = b""
    with open(paths.state, "wb") as handle:
        handle.write(data)
    return f"state corrupted ({variant}{f' {pid}' if variant == 'bad_pid' else ''})"


def plant_pid(paths: Any, pid: int, variant: str) -> str:
    """Write ``pid`` (a live, unrelated process) into the record, keeping the rest.

    ``reused``: the holder's start time and executable stay (its pid was reused);
    ``forged``: the bystander's own start time and executable (a record that
    matches the live process in every respect but the lock).
    """
    record = _record(paths) or _template(0)
    record["pid"] = pid
    if variant == "forged":
        ident = process_identity(pid)
        if ident is not None:
            record.update(start_time=ident.start_time, exe=ident.exe, boot_id=boot_id())
    tmp = f"{paths.state}.chaos.tmp"
    Path(tmp).write_text(json.dumps(record))
    os.replace(tmp, paths.state)
    return f"state names pid {pid} ({variant})"


def write_legacy(path: Path, pid: int) -> str:
    path.write_text(f"{pid}\n")
    return f"legacy lock names pid {pid}"
