"""Which modules a fresh interpreter has loaded after some statements (a fast path's weight)."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(statements: str, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` (a module, or a package and everything under it) in ``sys.modules``.

    In a fresh interpreter that ran ``statements`` (Python source), so what
    the test process imported itself does not count.
    """
    probe = (
        f"{statements}\n"
        "import json, sys\n"
        f"names = {list(names)!r}\n"
        "under = [m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in names)]\n"
        "print(json.dumps(sorted(under)))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    if ran.returncode != 0:
        raise AssertionError(f"the probe failed:\n{ran.stderr}")
    found: list[str] = json.loads(ran.stdout.strip().splitlines()[-1])
    return found
