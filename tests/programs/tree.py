"""Process trees for tests/cli/test_run_tree.py: an ``npm exec``-like launcher and a server.

``tree.py launcher CMD ARGS...`` starts ``CMD ARGS...`` and waits for it,
with no signal handling of its own: SIGTERM ends the launcher and leaves
the server running, as ``npm exec`` leaves ``node``.

``tree.py server --tag TAG [--setsid] [--ignore-term] [--slow-exit SECONDS]``
reports ``ready`` (and every signal it gets) as JSON lines to the FIFO named
by ``TREE_REPORT``, then serves (sleeps) until a signal ends it:
``--setsid`` leaves the session first, ``--ignore-term`` ignores SIGTERM,
``--slow-exit`` takes that long to exit after SIGTERM.  The tag is on its
command line, so a test can count the servers of one app in ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import FrameType


def report(**fields: object) -> None:
    tag = sys.argv[sys.argv.index("--tag") + 1] if "--tag" in sys.argv else None
    line = json.dumps({"pid": os.getpid(), "tag": tag, **fields}) + "\n"
    fd = os.open(os.environ["TREE_REPORT"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.write(fd, line.encode())  # under PIPE_BUF: one atomic line
    finally:
        os.close(fd)


def launcher(argv: list[str]) -> int:
    return subprocess.Popen(argv).wait()


def server(args: list[str]) -> int:
    if "--setsid" in args:
        os.setsid()
    slow = float(args[args.index("--slow-exit") + 1]) if "--slow-exit" in args else 0.0

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        report(event="signal", signal=signum)
        if signum == signal.SIGTERM and "--ignore-term" in args:
            return
        time.sleep(slow)
        os._exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, on_signal)
    report(event="ready", ppid=os.getppid(), pgid=os.getpgid(0), sid=os.getsid(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    role, rest = sys.argv[1], sys.argv[2:]
    sys.exit(launcher(rest) if role == "launcher" else server(rest))
