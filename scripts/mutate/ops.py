"""The mutation operators of `make mutate`: small AST edits to one core module.

A mutant is one edit to one node.  Mutants are found by walking the module's
AST in a fixed order (:func:`ast.walk`, breadth first), so a mutant is
identified by the node's number in that walk plus the edit; applying it
re-parses the source, edits that node and compiles the tree with the real
file name (tracebacks point at the real lines).

The operators (chosen to cover what mutmut does on function bodies and what
it skips: tables, constants, class bodies, defaults):

* ``binop``: ``+`` <-> ``-``, ``*`` <-> ``/``, ``//``, ``%`` and ``**`` -> ``/``
  or ``*``, ``<<`` <-> ``>>``, ``&`` <-> ``|``, ``^`` -> ``&`` (also in ``+=``);
* ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <->
  ``is not``, ``in`` <-> ``not in`` (each operator of a chain on its own);
* ``boolop``: ``and`` <-> ``or``; ``unary``: drop ``not`` or a unary minus;
* ``number``: ``n`` -> ``n + 1``; ``bool``: ``True`` <-> ``False``;
* ``string``: a string or bytes literal -> empty (an empty one -> ``"XX"``);
  ``fstring``: drop one literal part of an f-string (a hint, a unit);
* ``return``: ``return x`` -> ``return None``;
* ``raise`` and ``call``: a ``raise`` or a call statement -> ``pass``;
* ``element``: drop one element of a list, tuple, set or dict display (a
  table row, a member of a frozenset, an exception in an ``except`` tuple).

Not mutated, by design: docstrings, annotations (strings at run time under
``from __future__ import annotations``), imports, and ``assert`` statements
and ``raise AssertionError(...)`` (internal invariants: lines that never run
unless the code itself is broken).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType

Builder = Callable[[ast.AST], ast.AST]

_BINOPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
}
_COMPARES: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_WORDS = re.compile(r"[A-Za-z_]+")
#: Longest text of a node shown in a mutant's description.
_SHOWN = 70


@dataclass(frozen=True)
class Mutant:
    """One edit to one core module, and where it is."""

    module: str  # dotted name, e.g. highlander._core.codec
    path: Path
    node: int  # the node's number in ast.walk order
    variant: int  # which of the node's edits
    line: int
    scope: str  # qualified name of the enclosing def/class, or <module>
    operator: str
    before: str
    after: str
    #: Whether the edit runs when the module is imported (not inside a def's body).
    import_time: bool
    #: The outermost enclosing function's lines: tests that ran none of them cannot see it.
    span: tuple[int, int]
    occurrence: int = 1

    @property
    def key(self) -> str:
        """A description that stays the same when unrelated lines move (equivalence lists)."""
        base = f"{short(self.module)}:{self.scope}: {self.before} -> {self.after}"
        return base if self.occurrence == 1 else f"{base} #{self.occurrence}"

    @property
    def where(self) -> str:
        """``file:line`` relative to the project root."""
        return f"{self.path.as_posix()}:{self.line}"


def short(module: str) -> str:
    """A module's name in reports and keys: ``highlander._core.codec`` is ``codec``.

    Keys written before the core moved into its own folder (``highlander._codec``)
    stay valid (issue #14)."""
    return module.rsplit(".", 1)[-1].lstrip("_")


def _shown(node: ast.AST) -> str:
    text = ast.unparse(node).replace("\n", "; ")
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _docstring_nodes(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.update((id(first), id(value)))
    return found


def _skipped_subtrees(tree: ast.AST) -> set[int]:
    """Nodes never mutated: annotations, imports, asserts (and everything under them)."""
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, ast.Import | ast.ImportFrom | ast.Assert) or _is_unreachable(node):
            roots.append(node)
        elif isinstance(node, ast.JoinedStr):
            # An f-string's literal parts are mutated by fstring, not as strings of their own.
            roots.extend(v for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            roots.append(node.format_spec)
    skipped: set[int] = set()
    for root in roots:
        skipped.update(id(n) for n in ast.walk(root))
    return skipped


def _is_unreachable(node: ast.AST) -> bool:
    """``raise AssertionError(...)``: a line the code says never runs, an assert by other means."""
    if not isinstance(node, ast.Raise) or node.exc is None:
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "AssertionError"


def _with_op(node: ast.AST, op: type[ast.AST]) -> ast.AST:
    new = copy.copy(node)
    new.op = op()  # type: ignore[attr-defined]
    return new


def _compare_with(index: int, op: type[ast.cmpop]) -> Builder:
    def build(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.Compare)
        ops = list(node.ops)
        ops[index] = op()
        return ast.Compare(left=node.left, ops=ops, comparators=node.comparators)

    return build


def _constant(value: str | bytes | bool | int | float) -> Builder:
    return lambda node: ast.Constant(value=value)


def _without_element(index: int) -> Builder:
    def build(node: ast.AST) -> ast.AST:
        new = copy.copy(node)
        if isinstance(node, ast.Dict):
            assert isinstance(new, ast.Dict)
            new.keys = node.keys[:index] + node.keys[index + 1 :]
            new.values = node.values[:index] + node.values[index + 1 :]
        else:
            assert isinstance(node, ast.List | ast.Tuple | ast.Set)
            new.elts = node.elts[:index] + node.elts[index + 1 :]  # type: ignore[attr-defined]
        return new

    return build


def _fstring_without(index: int) -> Builder:
    def build(node: ast.AST) -> ast.AST:
        assert isinstance(node, ast.JoinedStr)
        return ast.JoinedStr(values=node.values[:index] + node.values[index + 1 :])

    return build


def edits(node: ast.AST) -> Iterator[tuple[str, Builder]]:
    """Every ``(operator, builder)`` that mutates ``node``; the builder returns the new node."""
    if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BINOPS:
        yield "binop", lambda n: _with_op(n, _BINOPS[type(n.op)])  # type: ignore[attr-defined]
    elif isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            yield "compare", _compare_with(index, _COMPARES[type(op)])
    elif isinstance(node, ast.BoolOp):
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield "boolop", lambda n: _with_op(n, other)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        yield "unary", lambda n: n.operand  # type: ignore[attr-defined]
    elif isinstance(node, ast.Constant):
        yield from _constant_edits(node.value)
    else:
        yield from _statement_edits(node)
        yield from _display_edits(node)


def _statement_edits(node: ast.AST) -> Iterator[tuple[str, Builder]]:
    if isinstance(node, ast.JoinedStr):
        for index, part in enumerate(node.values):
            # Words, not separators (", got ", " of "): what a message says.
            if isinstance(part, ast.Constant) and len(_WORDS.findall(str(part.value))) >= 2:
                yield "fstring", _fstring_without(index)
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield "return", lambda n: ast.Return(value=ast.Constant(value=None))
    elif isinstance(node, ast.Raise):
        yield "raise", lambda n: ast.Pass()
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "call", lambda n: ast.Pass()


def _display_edits(node: ast.AST) -> Iterator[tuple[str, Builder]]:
    if isinstance(node, ast.Dict):
        count = len(node.keys)
    elif isinstance(node, ast.Set | ast.List | ast.Tuple) and len(node.elts) >= 2:
        count = len(node.elts)
    else:
        return
    # Only a display that is read: not the target of an assignment.
    if isinstance(getattr(node, "ctx", ast.Load()), ast.Load):
        for index in range(count):
            yield "element", _without_element(index)


def _constant_edits(value: object) -> Iterator[tuple[str, Builder]]:
    if isinstance(value, bool):
        yield "bool", _constant(not value)
    elif isinstance(value, int):
        yield "number", _constant(value + 1)
    elif isinstance(value, float):
        yield "number", _constant(value + 1.0)
    elif isinstance(value, str):
        yield "string", _constant("" if value else "XX")
    elif isinstance(value, bytes):
        yield "string", _constant(b"" if value else b"XX")


class _Scopes(ast.NodeVisitor):
    """For every node: the qualified name around it and the function it runs in."""

    def __init__(self) -> None:
        self.scope: dict[int, str] = {}
        self.function: dict[int, tuple[int, int] | None] = {}
        self.runtime: dict[int, bool] = {}
        self._names: list[str] = []
        self._outer: tuple[int, int] | None = None
        self._in_body = False

    def _mark(self, node: ast.AST) -> None:
        self.scope[id(node)] = ".".join(self._names) or "<module>"
        self.function[id(node)] = self._outer
        self.runtime[id(node)] = self._in_body

    def generic_visit(self, node: ast.AST) -> None:
        self._mark(node)
        super().generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._mark(node)
        for child in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(child)
        self._names.append(node.name)
        for child in node.body:
            self.visit(child)
        self._names.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._mark(node)
        # Decorators and defaults run when the def does, in the enclosing scope.
        for child in [*node.decorator_list, node.args]:
            self.visit(child)
        saved = (self._outer, self._in_body)
        if self._outer is None:
            self._outer = (node.lineno, node.end_lineno or node.lineno)
        self._in_body = True
        self._names.append(node.name)
        for child in node.body:
            self.visit(child)
        self._names.pop()
        self._outer, self._in_body = saved

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - the visitor's naming

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._mark(node)
        self.visit(node.args)
        saved = self._in_body
        # A lambda's body runs when it is called; at module level that is after import.
        self._in_body = True
        self.visit(node.body)
        self._in_body = saved


def find_mutants(path: Path, module: str, root: Path) -> list[Mutant]:
    """Every mutant of the module in ``path`` (``root``: where relative paths start)."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    skipped = _skipped_subtrees(tree) | _docstring_nodes(tree)
    # A table's key tuple has a fixed arity: one element fewer matches nothing, the same
    # as dropping the row, which is a mutant of its own.
    keys = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys}
    scopes = _Scopes()
    scopes.visit(tree)
    mutants: list[Mutant] = []
    seen: dict[str, int] = {}
    relative = path.resolve().relative_to(root.resolve())
    for number, node in enumerate(ast.walk(tree)):
        if id(node) in skipped:
            continue
        for variant, (operator, build) in enumerate(edits(node)):
            if operator == "element" and id(node) in keys:
                continue
            after = build(copy.deepcopy(node))
            before_text, after_text = _describe(node, after, operator)
            outer = scopes.function.get(id(node))
            line = getattr(node, "lineno", 0)
            mutant = Mutant(
                module=module,
                path=relative,
                node=number,
                variant=variant,
                line=line,
                scope=scopes.scope.get(id(node), "<module>"),
                operator=operator,
                before=before_text,
                after=after_text,
                import_time=not scopes.runtime.get(id(node), False),
                span=outer if outer is not None else (line, line),
            )
            seen[mutant.key] = count = seen.get(mutant.key, 0) + 1
            mutants.append(dataclasses.replace(mutant, occurrence=count))
    return mutants


def _describe(before: ast.AST, after: ast.AST, operator: str) -> tuple[str, str]:
    if operator == "fstring":
        assert isinstance(before, ast.JoinedStr) and isinstance(after, ast.JoinedStr)
        kept = [ast.dump(v) for v in after.values]
        index = next(
            (i for i, v in enumerate(before.values) if i >= len(kept) or ast.dump(v) != kept[i]),
            len(kept),
        )
        part = before.values[index]
        assert isinstance(part, ast.Constant)
        return f"f-string part {str(part.value)!r}"[:_SHOWN], "(dropped)"
    return _shown(before), _shown(after)


def mutated_code(mutant: Mutant, root: Path) -> CodeType:
    """Compile the module with ``mutant`` applied; return the code object."""
    path = root / mutant.path
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    target = list(ast.walk(tree))[mutant.node]
    operator, build = list(edits(target))[mutant.variant]
    assert operator == mutant.operator, (mutant, operator)
    replacement = build(target)
    _replace(tree, target, replacement)
    ast.fix_missing_locations(ast.copy_location(replacement, target))
    return compile(tree, str(path.resolve()), "exec", dont_inherit=True)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if item is old:
                        value[index] = new
                        return
    raise LookupError("node not found in its tree")
