"""A process that holds a project's key on etcd for the tests (``_etcd/session``).

``etcd_holder.py BACKEND KEY WITNESS [TTL]``: claims KEY (trying again every
20 ms while another process holds it), then, while it may act as holder,
appends ``act <CLOCK_BOOTTIME>`` to WITNESS every 5 ms; ``held TOKEN T`` when
it begins and ``lost WHY T`` when it lets go.  Nothing on stdout.  Ends by
itself after 60 s (a bound for the tests, which end it by pid first).
"""

from __future__ import annotations

import sys
import time

from highlander._etcd.claim import Held
from highlander._etcd.keeper import boottime
from highlander._etcd.session import session_for

backend, key, witness = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
session = session_for(backend)
if len(sys.argv) > 4:
    session.ttl = int(sys.argv[4])
deadline = time.monotonic() + 60


def note(line: str) -> None:
    with open(witness, "a", encoding="ascii") as out:
        out.write(f"{line}\n")


while time.monotonic() < deadline:
    result = session.claim(key, b"holder")
    if isinstance(result, Held):
        note(f"held {result.token} {boottime():.6f}")
        break
    time.sleep(0.02)
while time.monotonic() < deadline:
    if not session.holds():
        assert session.keeper is not None
        note(f"lost {session.keeper.why or 'expired'} {boottime():.6f}")
        break
    note(f"act {boottime():.6f}")
    time.sleep(0.005)
session.close()
