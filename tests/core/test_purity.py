"""The protocol core is pure: no I/O, clock, randomness or shell module imported anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import highlander

#: The core floor: every module in this folder (tests/core/test_floors.py keeps the floors).
CORE_DIR = Path(highlander.__file__).parent / "_core"
CORE = frozenset(path.stem for path in CORE_DIR.glob("*.py"))
FORBIDDEN = frozenset(
    {
        "socket",
        "os",
        "time",
        "anyio",
        "threading",
        "subprocess",
        "asyncio",
        "selectors",
        "signal",
        "random",
        "secrets",
    }
)


def _imported_modules(node: ast.AST, module: str) -> list[str]:
    """Absolute dotted names an import node brings in (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parent = module.split(".")[: -node.level]
            base = ".".join([*parent, node.module] if node.module else parent)
        else:
            base = node.module or ""
        # `from pkg import name` may import the submodule pkg.name.
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def import_violations(source: str, module: str = "highlander._core.example") -> list[str]:
    """Return a description of every forbidden import in ``source``, at any depth."""
    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt | ast.expr):
            continue
        names = _imported_modules(node, module)
        if isinstance(node, ast.ImportFrom):
            base, submodules = names[0], names[1:]
            if base == "highlander":
                # `from highlander import X` is fine only if X is the core itself.
                bad = [n for n in submodules if n.split(".")[1] != "_core"]
                names = bad or submodules
            elif not base:
                problems.append(f"line {node.lineno}: relative import beyond the package")
            else:
                names = [base]
        for name in names:
            top = name.split(".")[0]
            if top in FORBIDDEN:
                problems.append(f"line {node.lineno}: imports {name}")
            elif top == "highlander":
                parts = name.split(".")
                if len(parts) < 2 or parts[1] != "_core":
                    problems.append(f"line {node.lineno}: imports non-core {name}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            problems.append(f"line {node.lineno}: calls __import__")
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
            n.split(".")[0] == "importlib" for n in names
        ):
            problems.append(f"line {node.lineno}: imports importlib")
    return problems


def test_the_core_holds_the_protocol_and_the_policy() -> None:
    assert {"messages", "codec", "signing", "state", "connection", "policy"} <= CORE


@pytest.mark.parametrize("name", sorted(CORE))
def test_core_module_is_pure(name: str) -> None:
    source = (CORE_DIR / f"{name}.py").read_text(encoding="utf-8")
    assert import_violations(source, f"highlander._core.{name}") == []


#: Pure modules outside the core: the etcd floor's request bodies, backend URLs and HTTP bytes.
PURE_ELSEWHERE = ("_etcd.api", "_etcd.endpoints", "_etcd.http11")


@pytest.mark.parametrize("dotted", PURE_ELSEWHERE)
def test_the_etcd_floors_data_modules_are_pure(dotted: str) -> None:
    path = CORE_DIR.parent.joinpath(*dotted.split(".")).with_suffix(".py")
    source = path.read_text(encoding="utf-8")
    assert import_violations(source, f"highlander.{dotted}") == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os", "line 1: imports os"),
        ("import os.path", "line 1: imports os.path"),
        ("from os import path", "line 1: imports os"),
        ("import time as clock", "line 1: imports time"),
        ("import anyio.abc", "line 1: imports anyio.abc"),
        ("def f():\n    import socket\n", "line 2: imports socket"),
        (
            "class C:\n    def m(self):\n        if True:\n            from random import choice\n",
            "line 4: imports random",
        ),
        ("try:\n    import secrets\nexcept ImportError:\n    pass\n", "line 2: imports secrets"),
        ("from highlander._host import rendezvous", "line 1: imports non-core highlander._host"),
        ("from highlander import cli", "line 1: imports non-core highlander.cli"),
        ("import highlander", "line 1: imports non-core highlander"),
        ("from highlander._host.log import log", "line 1: imports non-core highlander._host.log"),
        ("from .. import x", "line 1: imports non-core highlander.x"),
        ("from .._host import token", "line 1: imports non-core highlander._host"),
        ("from ... import x", "line 1: relative import beyond the package"),
        ("mod = __import__('os')", "line 1: calls __import__"),
        ("import importlib", "line 1: imports importlib"),
    ],
)
def test_checker_catches_violations(source: str, expected: str) -> None:
    problems = import_violations(source)
    assert any(p.startswith(expected) for p in problems), problems


@pytest.mark.parametrize(
    "source",
    [
        "import json, hmac, struct, enum, math, re",
        "from dataclasses import dataclass",
        "from collections.abc import Callable",
        "from highlander._core.codec import NEED_DATA",
        "from highlander._core import messages",
        "from highlander import _core",
        "from . import state",
        "from .errors import Reason",
        "def f():\n    from cryptography.hazmat.primitives import hashes\n",
        "ostrich = 1\nimport timeit_like_name_is_not_time",
    ],
)
def test_checker_allows_pure_imports(source: str) -> None:
    assert import_violations(source) == []
