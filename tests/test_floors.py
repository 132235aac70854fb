"""The floors of docs/architecture.md: every module is on one, and nothing imports upward.

core (pure: tests/test_purity.py checks every module of this floor) < host
(this machine, its files, the process-wide services) < shell (conversations
over sockets, through the Waiter) < top (the public handle) < cli.  An
import inside a function counts like any other (it runs, only later); an
import only for type checkers (``if TYPE_CHECKING:``) does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import highlander

PACKAGE_DIR = Path(highlander.__file__).parent
FLOORS: dict[str, frozenset[str]] = {
    "core": frozenset(
        [
            "_values",
            "_errors",
            "_canonical",
            "_messages",
            "_codec",
            "_signing",
            "_deadlines",
            "_state",
            "_connection",
            "_pair",
            "_commit",
            "_patience",
            "_policy",
        ]
    ),
    "host": frozenset(
        [
            "_identity",
            "_files",
            "_rendezvous",
            "_names_key",
            "_app_name",
            "_record",
            "_fencing",
            "_token",
            "_legacy",
            "_listener",
            "_claim",
            "_descendants",
            "_termination",
            "_settings",
            "_modes",
            "_event_log",
            "_log",
            "_threads",
            "_bounds",
            "_waiting",
        ]
    ),
    "shell": frozenset(
        [
            "_wire",
            "_client",
            "_save_request",
            "_newcomer",
            "_unreachable",
            "_handover",
            "_takeover",
            "_incumbent",
            "_admission",
            "_saving",
            "_progress",
            "_hooks",
            "_live",
            "_serving_guard",
            "_watch",
            "_observe",
            "_control",
            "_time_limit",
            "_one_claim",
        ]
    ),
    "top": frozenset(["__init__", "_highlander", "_ending", "testing"]),
    "cli": frozenset(
        [
            "cli",
            "_cli_common",
            "_cli_status",
            "_cli_stop",
            "_doctor",
            "_inspect",
            "_snippets",
            "_run",
            "_tree",
            "_tree_record",
            "_command_name",
            "_launchers",
        ]
    ),
}
LEVEL = {module: level for level, floor in enumerate(FLOORS.values()) for module in floor}
NAMES = list(FLOORS)


def _runtime_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, highlander module) of every import that runs, at any depth."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        parts = node.module.split(".")
        if parts[0] == "highlander" and len(parts) > 1:
            found.append((node.lineno, parts[1]))
    return found


def test_every_module_is_on_exactly_one_floor() -> None:
    modules = {path.stem for path in PACKAGE_DIR.glob("*.py")}
    assert modules == set(LEVEL)
    assert sum(len(floor) for floor in FLOORS.values()) == len(LEVEL)


@pytest.mark.parametrize("module", sorted(LEVEL))
def test_nothing_imports_upward(module: str) -> None:
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text(encoding="utf-8"))
    upward = [
        f"line {line}: {module} ({NAMES[LEVEL[module]]}) imports {dep} ({NAMES[LEVEL[dep]]})"
        for line, dep in _runtime_imports(tree)
        if LEVEL[dep] > LEVEL[module]
    ]
    assert upward == []


def test_the_checker_sees_lazy_imports_and_skips_type_only_ones() -> None:
    source = (
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from highlander._highlander import Highlander\n"
        "def f():\n"
        "    from highlander._newcomer import acquire\n"
    )
    assert _runtime_imports(ast.parse(source)) == [(5, "_newcomer")]
