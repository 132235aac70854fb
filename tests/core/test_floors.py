"""The floors of docs/architecture.md: one folder each, and nothing imports upward.

``highlander/_core`` (pure: tests/core/test_purity.py checks every module in it)
< ``_host`` (this machine, its files, the process-wide services) <
``_etcd`` (talking to an etcd cluster) <
``_shell`` (conversations over sockets, through the Waiter) < the public
handle (the modules directly in ``highlander/``) < the command line
(``cli.py`` and ``_commands``).  An import inside a function counts like
any other (it runs, only later); an import only for type checkers
(``if TYPE_CHECKING:``) does not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import highlander

PACKAGE_DIR = Path(highlander.__file__).parent
#: The floors, lowest first: the folder of each, or the modules directly in highlander/.
FLOORS = ("_core", "_host", "_etcd", "_shell", "top", "_commands")
#: Modules directly in highlander/ that are not on the "top" floor.
TOP_LEVEL_EXCEPTIONS = {"cli": "_commands", "_resume": "_core", "_relay": "_host"}


def floor_of(dotted: str) -> str:
    """The floor of the highlander module ``dotted`` (``highlander._core.codec``, ...)."""
    part = dotted.split(".")[1]
    return part if part in FLOORS else TOP_LEVEL_EXCEPTIONS.get(part, "top")


def modules() -> list[str]:
    """Every module of the package, dotted."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        found.append(".".join(parts))
    return found


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
        if node.module.startswith("highlander."):
            found.append((node.lineno, node.module))
    return found


def test_every_folder_is_a_floor() -> None:
    folders = {path.name for path in PACKAGE_DIR.iterdir() if (path / "__init__.py").is_file()}
    assert folders == set(FLOORS) - {"top"}


@pytest.mark.parametrize("module", [m for m in modules() if not m.endswith("__init__")])
def test_nothing_imports_upward(module: str) -> None:
    path = PACKAGE_DIR.parent / (module.replace(".", "/") + ".py")
    level = FLOORS.index(floor_of(module))
    upward = [
        f"line {line}: {module} ({floor_of(module)}) imports {dep} ({floor_of(dep)})"
        for line, dep in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
        if FLOORS.index(floor_of(dep)) > level
    ]
    assert upward == []


def test_the_checker_sees_lazy_imports_and_skips_type_only_ones() -> None:
    source = (
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from highlander._highlander import Highlander\n"
        "def f():\n"
        "    from highlander._shell.newcomer import acquire\n"
    )
    assert _runtime_imports(ast.parse(source)) == [(5, "highlander._shell.newcomer")]
    assert floor_of("highlander.cli") == "_commands"
    assert floor_of("highlander._highlander") == "top"
