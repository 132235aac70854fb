"""What stays off the critical path: no event loop before holding, no crypto for a verdict.

Each start runs in a fresh interpreter whose import system records which
thread imported what.  The claim runs in the main thread; the serving side
(its loop, the protocol core) must be imported by other threads, after the
claim, and a sync holder never imports an event loop at all.  These are
structural checks, not timings.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import pytest

from tests.support.proctools import Child, Children, wait_stopped

#: A start that reports what the main thread imported while claiming.
#: HL_SNIPPET_MODE: the mode; HL_SNIPPET_HELLO: the hello deadline (seconds);
#: HL_SNIPPET_WAIT_PROBE: wait for the background probe before reporting "probed".
SNIPPET = """
import json, os, sys, threading

seen = {}

class Spy:
    def find_spec(self, name, path=None, target=None):
        seen.setdefault(name, threading.current_thread().name)
        return None

sys.meta_path.insert(0, Spy())
FD = int(os.environ["HL_READY_FD"])

def report(**fields):
    os.write(FD, (json.dumps(fields) + "\\n").encode())

from highlander import Highlander, Timeouts

hl = Highlander(
    app="child",
    mode=os.environ["HL_SNIPPET_MODE"],
    timeouts=Timeouts(hello=float(os.environ["HL_SNIPPET_HELLO"])),
)
hl.acquire()
main = sorted(name for name, thread in seen.items() if thread == "MainThread")
probe = hl._probe
report(
    event="ready",
    outcome=hl.outcome.value,
    holder=hl.holder.pid if hl.holder else None,
    main=main,
    probing=probe is not None and probe.is_alive(),
)
if os.environ.get("HL_SNIPPET_WAIT_PROBE") and probe is not None:
    probe.join(30)
    from highlander._host.log import flush

    flush()  # os._exit skips atexit, which would write the queued log lines
    report(event="probed")
os._exit(0)
"""

#: Modules whose import belongs to the serving side or the signed probe, never the claim.
EVENT_LOOP = {"asyncio", "anyio", "sniffio"}
PROTOCOL = {"highlander._core.messages", "highlander._core.connection", "highlander._core.codec"}
#: What a newcomer loads only when an attempt failed (a kill, a wait, an unreachable holder).
SETBACK_ONLY = {
    "signal",
    "highlander._core.patience",
    "highlander._core.policy",
    "highlander._host.termination",
    "highlander._shell.observe",
    "highlander._shell.retrying",
    "highlander._shell.setbacks",
    "highlander._shell.unreachable",
    "highlander._shell.watch",
}
#: What only share mode loads.
SHARE_ONLY = {"highlander._shell.attaching"}
SERVING = EVENT_LOOP | PROTOCOL | {"cryptography", "structlog", "highlander._shell.incumbent"}


def _start(kids: Children, mode: str, hello: float = 2.0, *, wait_probe: bool = False) -> Child:
    env = {**kids.env(), "HL_SNIPPET_MODE": mode, "HL_SNIPPET_HELLO": str(hello)}
    if wait_probe:
        env["HL_SNIPPET_WAIT_PROBE"] = "1"
    return kids.spawn([sys.executable, "-c", SNIPPET], env)


def _imported(report: dict[str, Any], modules: set[str]) -> set[str]:
    return {name for name in report["main"] if name.split(".")[0] in modules or name in modules}


def test_free_claim_imports_no_event_loop_protocol_or_crypto(kids: Children) -> None:
    child = _start(kids, "auto")
    report = child.wait_for("ready")
    assert report["outcome"] == "claimed_free"
    assert "highlander._host.claim" in report["main"]  # the spy saw the claim itself
    assert _imported(report, SERVING) == set()


def _succeed_once(kids: Children) -> dict[str, Any]:
    holder = kids.start()
    holder.wait_for("ready")
    report = _start(kids, "auto").wait_for("ready")
    assert report["outcome"] == "succeeded"
    assert holder.finish()[0] == 0
    return report


def test_sync_succession_runs_without_an_event_loop(kids: Children) -> None:
    report = _succeed_once(kids)
    # The conversation itself needs the protocol and the built-in SHA-256's HMAC, but no
    # event loop, nor OpenSSL (highlander._core.sha),
    assert "highlander._core.connection" in report["main"]
    assert "highlander._core.sha" in report["main"]
    assert _imported(report, EVENT_LOOP | {"structlog", "_hashlib"}) == set()
    # nor what only a setback needs: waiting out, ending or judging a holder,
    # the policy that decides which; nor share mode's side.
    assert _imported(report, SETBACK_ONLY | SHARE_ONLY) == set()


def test_a_succession_derives_its_key_without_cryptography_or_openssl(kids: Children) -> None:
    # Each conversation derives the key (HKDF by the interpreter's own SHA-256), on both
    # sides and every time: nothing of it is written to the runtime directory.
    for _ in range(2):
        report = _succeed_once(kids)
        assert "highlander._core.connection" in report["main"]
        # Neither cryptography, nor OpenSSL and the standard library's layers over it.
        assert _imported(report, {"cryptography", "hmac", "hashlib", "_hashlib"}) == set()
        assert [name for name in os.listdir(kids.runtime) if name.endswith(".key")] == ["names.key"]


@pytest.mark.parametrize("mode", ["observe", "warn"])
def test_duplicate_verdict_needs_no_crypto_and_does_not_wait_for_the_holder(
    kids: Children, mode: str
) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)  # it cannot answer anything now
    wait_stopped(holder.pid)
    # A 30 s hello deadline: had the verdict waited for the probe, it could
    # not arrive while the probe is still running.
    report = _start(kids, mode, hello=30.0).wait_for("ready")
    assert report["outcome"] == "duplicate"
    assert report["holder"] == holder.pid  # checked against the kernel, stopped or not
    assert report["probing"] is True
    assert _imported(report, SERVING) == set()


def test_warn_reports_a_silent_holder_from_the_background_probe(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)
    child = _start(kids, "warn", hello=0.3, wait_probe=True)
    assert child.wait_for("ready")["holder"] == holder.pid
    child.wait_for("probed")
    status, out, err = child.finish()
    assert (status, out) == (0, b"")
    assert "is not answering" in err.decode()
    mine = [e for e in _events(kids) if e["pid"] == child.pid]
    assert [e["event"] for e in mine] == ["detected", "duplicate", "timeout", "hung"]
    assert mine[-1]["peer_pid"] == holder.pid


def test_duplicate_with_an_unverifiable_record_names_no_holder(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    (state,) = kids.runtime.glob("*.state")
    record = json.loads(state.read_text())
    state.write_text(json.dumps({**record, "start_time": record["start_time"] + 1}))
    report = _start(kids, "observe").wait_for("ready")
    assert report["outcome"] == "duplicate"
    assert report["holder"] is None  # a record the kernel contradicts is not believed


def _events(kids: Children) -> list[dict[str, Any]]:
    (log,) = kids.runtime.glob("*.events.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()]


#: One process holds, stops its own server, then claims again: the second claim
#: meets a silent holder whose record names this very process.
SILENT_SELF = """
import json, os, threading
from highlander import ConfigurationError, Highlander, Timeouts

def report(**fields):
    os.write(int(os.environ["HL_READY_FD"]), (json.dumps(fields) + "\\n").encode())

first = Highlander(app="child", timeouts=Timeouts(hello=0.3)).acquire()
for _ in range(500):  # the serving thread builds its Incumbent in the background
    if first._incumbent is not None:
        break
    threading.Event().wait(0.01)
first._incumbent.stop()
first._incumbent.ended.wait(10)
try:
    Highlander(app="child", timeouts=Timeouts(hello=0.3)).acquire()
    report(event="ready", outcome="claimed twice")
except ConfigurationError as exc:
    report(event="ready", outcome="refused", error=str(exc), holder=first.is_holder)
"""


def test_second_claim_in_a_process_never_signals_the_process_itself(kids: Children) -> None:
    child = kids.spawn([sys.executable, "-c", SILENT_SELF], kids.env())
    report = child.wait_for("ready")
    assert report["outcome"] == "refused", report
    assert "already holds" in report["error"]
    assert report["holder"] is True
    status, out, _ = child.finish()
    assert (status, out) == (0, b"")  # not SIGTERMed by its own newcomer


#: A sync holder that reports, from its save hook and its on_deposed, which
#: event-loop modules its process has loaded.
LOOPLESS_HOLDER = """
import json, os, sys
from highlander import Highlander

def report(**fields):
    os.write(int(os.environ["HL_READY_FD"]), (json.dumps(fields) + "\\n").encode())

def loops():
    return sorted(m for m in sys.modules if m.split(".")[0] in {"asyncio", "anyio", "sniffio"})

def save(progress):
    progress.advance("one step")
    report(event="saving", loops=loops())
    return {"from": os.getpid()}

def deposed():
    report(event="deposed", loops=loops())
    os._exit(0)

Highlander(app="child", on_save=save, on_deposed=deposed).acquire()
report(event="ready")
threading = __import__("threading")
threading.Event().wait(60)
"""


def test_a_sync_holder_serves_a_succession_without_an_event_loop(kids: Children) -> None:
    holder = kids.spawn([sys.executable, "-c", LOOPLESS_HOLDER], kids.env())
    holder.wait_for("ready")
    newcomer = kids.start()
    assert newcomer.wait_for("ready")["outcome"] == "succeeded"
    assert holder.wait_for("saving")["loops"] == []
    assert holder.wait_for("deposed")["loops"] == []
    assert holder.finish()[0] == 0


#: A holder that reports what its process has loaded once its server is serving.
SERVING_HOLDER = """
import json, os, sys, threading
from highlander import Highlander

hl = Highlander(app="child").acquire()
for _ in range(500):  # the serving thread builds its Incumbent in the background
    if hl._incumbent is not None:
        break
    threading.Event().wait(0.01)
loaded = sorted(m for m in ("typing", "dataclasses", "inspect") if m in sys.modules)
report = {"event": "ready", "loaded": loaded, "serving": hl._incumbent is not None}
os.write(int(os.environ["HL_READY_FD"]), (json.dumps(report) + "\\n").encode())
hl.release()
"""


def test_a_serving_holder_loads_no_typing(kids: Children) -> None:
    # typing is 4 ms of a holder's CPU (docs/performance.md), spent while an etcd
    # newcomer's holder saves: the serving side names its types for checkers only.
    child = kids.spawn([sys.executable, "-c", SERVING_HOLDER], kids.env())
    report = child.wait_for("ready")
    assert report["serving"] is True
    assert report["loaded"] == []
    assert child.finish()[0] == 0
