"""The backend seam (#14): where holders meet is reached through five operations only.

The newcomer, the incumbent and the public handle decide; a backend
(:mod:`highlander._shell.backend`) claims, names the holder, opens the
conversation, fences and watches.  Two checks: no module above the seam
calls the local backend's machinery directly, and a real succession and a
real fence between processes run through the seam (a recording backend
that delegates every call to the local one: nothing is stubbed).
"""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest

from highlander import Highlander, Timeouts
from highlander._host import log as _log
from highlander._shell.backend import LOCAL, LocalBackend
from tests.support.paths import REPO
from tests.support.proctools import TOKEN, Children

PACKAGE = REPO / "highlander"
#: Modules above the seam, and the local machinery they must reach only through it.
ABOVE = ["_highlander.py", "_ending.py", "_shell/newcomer.py", "_shell/incumbent.py"]
LOCAL_ONLY = {"claim_free", "connect", "terminate", "keep_watch", "in_the_way", "read_record"}


def _imported_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names |= {alias.name for alias in node.names}
    return names


@pytest.mark.parametrize("module", ABOVE)
def test_modules_above_the_seam_do_not_reach_past_it(module: str) -> None:
    leaked = _imported_names(PACKAGE / module) & LOCAL_ONLY
    assert not leaked, f"{module} imports {sorted(leaked)}: call them through the Backend"


def test_only_the_backend_uses_the_local_machinery_among_its_callers() -> None:
    # The names above are the local backend's: it imports every one of them.
    assert _imported_names(PACKAGE / "_shell/backend.py") >= LOCAL_ONLY


class Recording(LocalBackend):
    """The local backend, with a list of which operations were used."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        if name in {"claim", "holder", "look", "open", "fence", "watch"}:
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def _newcomer(kids: Children, backend: Recording, **options: Any) -> Highlander:
    handle = Highlander(
        app="child",
        project=str(kids.project),
        runtime_dir=str(kids.runtime),
        token=TOKEN,
        exit_when_orphaned=False,
        **options,
    )
    handle._backend = backend
    return handle


@pytest.mark.timeout(60)
def test_a_succession_runs_through_the_seam(kids: Children) -> None:
    holder = kids.start(save="normal", steps=2, hold=600)
    holder.wait_for("ready")
    backend = Recording()
    handle = _newcomer(kids, backend).acquire(timeout=30)
    try:
        assert handle.is_holder and handle.handoff is not None
        assert holder.finish()[0] == 0  # the incumbent handed over and left
        assert backend.calls[0] == "claim"  # held: the claim fails ...
        assert backend.calls.index("open") > 0  # ... and the newcomer talks to the holder
        for _ in range(500):  # the serving thread starts its watch soon after the claim
            if "watch" in backend.calls:
                break
            time.sleep(0.01)
        assert "watch" in backend.calls
        assert "fence" not in backend.calls
    finally:
        handle.release()
        _log.flush()


@pytest.mark.timeout(60)
def test_a_hung_holder_is_fenced_through_the_seam(kids: Children) -> None:
    timeouts = {"hello": 0.5, "stall": 0.5, "ceiling": 1.0, "exit_grace": 1.0, "term_grace": 0.5}
    holder = kids.start(save="stall", steps=1, hold=600, timeouts=timeouts)
    holder.wait_for("ready")
    backend = Recording()
    handle = _newcomer(kids, backend, timeouts=Timeouts(**timeouts)).acquire(timeout=30)
    try:
        assert handle.is_holder
        assert holder.proc.wait(timeout=30) != 0  # ended by the verified kill
        assert "fence" in backend.calls and "look" in backend.calls
        assert backend.calls.index("open") < backend.calls.index("fence")
    finally:
        handle.release()
        _log.flush()


def test_the_default_backend_is_local() -> None:
    assert isinstance(LOCAL, LocalBackend) and LOCAL.name == "local"
