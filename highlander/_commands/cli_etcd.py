"""``highlander status`` on etcd: who holds the project, as the holder key says (exit 0 or 3).

On etcd the holder key exists exactly while somebody holds the project, on
that holder's lease, so reading it (linearizable) says who holds; the
holder is not asked anything (a signed STATUS over etcd would need the
shared token; ``check_current()`` in the holder is the proof that matters).
``highlander stop`` asks the holder to save and leave over an etcd
conversation, as on one machine (never ``--force``: a process on another
host is never signalled).  ``events`` are each host's own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from highlander._commands.cli_common import NO_HOLDER, OK, fail, print_json, root_of


def etcd_status(args: argparse.Namespace, backend: str) -> int:
    """Run ``highlander status`` against the etcd cluster ``backend``."""
    from highlander._etcd.session import HolderValue, app_root, holder_key, session_for  # noqa: PLC0415
    from highlander._host.project_id import derive  # noqa: PLC0415

    if not args.app:
        return fail(args, "on etcd, name the app: highlander status --app NAME --backend ...")
    project_id = derive(Path(root_of(args)), None, os.environ).key
    key = holder_key(app_root(args.app, project_id, os.environ))
    session = session_for(backend, os.environ)
    try:
        kv = session.holder(key)
    finally:
        session.close(revoke=False)
    value = HolderValue.decode(kv.value) if kv is not None else None
    data: dict[str, Any] = {
        "held": kv is not None,
        "app": args.app,
        "project_id": project_id,
        "backend": session.target.describe(),
    }
    if kv is not None:
        data.update(key=key.decode(), token=kv.mod_revision, lease=kv.lease)
    if value is not None:
        since = value.since_ms / 1000
        data.update(
            host=value.host,
            pid=value.pid,
            exe=value.exe,
            generation=value.generation,
            uptime_s=round(max(0.0, time.time() - since), 1),
            ttl_s=value.ttl,
        )
    if args.json:
        print_json(data)
    elif kv is None:
        sys.stdout.write(f"no holder for {args.app} of project {project_id!r} on etcd\n")
    else:
        rows = [(name, data.get(name, "?")) for name in
                ("host", "pid", "exe", "app", "project_id", "generation", "token", "uptime_s",
                 "ttl_s", "backend")]  # fmt: skip
        sys.stdout.write("\n".join(f"{name:<11} {value}" for name, value in rows) + "\n")
    return OK if kv is not None else NO_HOLDER


def etcd_stop(args: argparse.Namespace, backend: str) -> int:
    """Run ``highlander stop`` against the etcd cluster ``backend`` (needs the token)."""
    from highlander._commands.cli_common import NO_HOLDER  # noqa: PLC0415
    from highlander._commands.cli_stop import show_progress  # noqa: PLC0415
    from highlander._host.settings import Settings  # noqa: PLC0415
    from highlander._host.waiting import BLOCKING, run_blocking  # noqa: PLC0415
    from highlander._shell.control import request_stop  # noqa: PLC0415
    from highlander._shell.etcd_backend import EtcdBackend  # noqa: PLC0415

    if not args.app:
        return fail(args, "on etcd, name the app: highlander stop --app NAME --backend ...")
    if args.force:
        return fail(
            args,
            "--force is not for etcd: a holder on another host is never signalled; start a "
            "newcomer instead, which fences a hung holder out through etcd",
        )
    settings = Settings.resolve(
        app=args.app,
        project=args.project,
        mode=None,
        token=None,
        timeouts=None,
        runtime_dir=args.runtime_dir,
        backend=backend,
    )
    etcd = EtcdBackend(settings)
    try:
        if etcd.holder(settings) is None:
            return fail(args, f"no holder for {args.app} on etcd", NO_HOLDER, held=False)
        pid, handoff = run_blocking(request_stop(settings, show_progress, BLOCKING, etcd))
    finally:
        etcd.session.close()
    if args.json:
        print_json({"stopped": pid, "handoff": handoff, "forced": False})
    else:
        sys.stdout.write(f"stopped pid {pid}; handoff: {json.dumps(handoff)}\n")
    return OK
