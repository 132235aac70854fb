"""Running the core's fast tests against one mutant at a time, in forked children.

The parent imports pytest, hypothesis and the other heavy libraries once and
never imports ``highlander``; every run forks a child that puts the mutated
module in front of the import system (:class:`_MutantFinder`), so the tests
import it as if it were the file, and runs pytest in-process.  A child that
runs past its time limit is killed (an endless loop is a detected mutant).

Only the tests that ran the mutated function in an unmutated run (the
coverage map of :func:`coverage_map`) are run against a mutant, first
failure stops the run (``-x``).  A mutant in code that runs at import (a
table, a constant, a class body, a default) gets every test.  Hypothesis is
derandomized and keeps no database, so a mutant's verdict is the same on
every run and machine.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

import hypothesis
import pytest

from scripts.mutate.ops import Mutant, mutated_code

#: The fast tests of the pure core, measured: together about 8 s unmutated.
#: ``file::name`` runs only that test of a file that also has slow ones.
TESTS: tuple[str, ...] = (
    "tests/core/test_canonical_gaps.py",
    "tests/core/test_codec.py",
    "tests/core/test_connection.py",
    "tests/core/test_core_gaps.py",
    "tests/core/test_defaults_doc.py",
    "tests/core/test_etcd_commit.py",
    "tests/core/test_etcd_model_check.py",
    "tests/core/test_fuzz_core.py",
    "tests/core/test_lease_clock.py",
    "tests/core/test_messages.py",
    "tests/core/test_model_check.py",
    "tests/core/test_patience_gaps.py",
    "tests/core/test_policy.py",
    "tests/core/test_policy_gaps.py",
    "tests/core/test_protocol_doc.py",
    "tests/core/test_purity.py",
    "tests/core/test_sealing.py",
    "tests/core/test_signing.py",
    "tests/core/test_state.py",
    "tests/core/test_values_gaps.py",
    "tests/processes/test_starved_holder.py::test_a_stuck_saver_is_not_taken_for_a_starved_one",
    "tests/processes/test_starved_holder.py::test_a_silent_holder_is_spared_by_cpu_used_and_never_past_the_wall_cap",
)
_PYTEST_ARGS = (
    *("-x", "-q", "--no-header", "-p", "no:cacheprovider"),
    # Only pass or fail counts here: rewriting the tests' asserts for better messages
    # took half of a run that ends at its first test.
    "--assert=plain",
    # hypothesis is imported before pytest starts (once, in the parent): not an error here.
    *("-W", "ignore::pytest.PytestAssertRewriteWarning"),
)


def test_files(root: Path) -> list[str]:
    """The test files of :data:`TESTS` that exist (a new file may not be written yet)."""
    files = sorted({entry.split("::")[0] for entry in TESTS})
    return [name for name in files if (root / name).is_file()]


def _wanted(nodeid: str) -> bool:
    for entry in TESTS:
        if "::" not in entry:
            if nodeid.startswith(entry + "::"):
                return True
        elif nodeid == entry or nodeid.startswith(entry + "["):
            return True
    return False


class _Selector:
    """pytest plugin: run only the tests named, in the order given (all of TESTS if None)."""

    def __init__(self, order: Sequence[str] | None) -> None:
        self.rank = None if order is None else {nodeid: i for i, nodeid in enumerate(order)}

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        rank = self.rank
        keep = [i for i in items if _wanted(i.nodeid) and (rank is None or i.nodeid in rank)]
        if rank is not None:
            keep.sort(key=lambda item: rank[item.nodeid])
        dropped = [item for item in items if item not in keep]
        items[:] = keep
        if dropped:
            config.hook.pytest_deselected(items=dropped)


#: The coverage map's bucket for lines run outside any test: imports, collection.
IMPORT = "<import>"


class _Tracer:
    """pytest plugin: which lines of the core files each test ran (setup to teardown).

    Lines run outside a test (importing the modules, collecting the tests)
    go to :data:`IMPORT`: a function run then can change what any test sees.
    """

    def __init__(self, files: set[str]) -> None:
        self.files = files
        self.lines: dict[str, set[tuple[str, int]]] = {IMPORT: set()}
        self.seconds: dict[str, float] = {}
        self.failed: list[str] = []
        self._current = self.lines[IMPORT]

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self._current.add((frame.f_code.co_filename, frame.f_lineno))
        return self._local

    def trace(self, frame: FrameType, event: str, arg: object) -> Any:
        """The global trace function: trace the core's frames, nothing else."""
        code: CodeType = frame.f_code
        if code.co_filename in self.files:
            self._current.add((code.co_filename, frame.f_lineno))
            return self._local
        return None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: Any) -> Iterator[None]:
        self._current = self.lines[item.nodeid] = set()
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[item.nodeid] = time.perf_counter() - started
            self._current = self.lines[IMPORT]

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self.failed.append(report.nodeid)


class _MutantFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the mutated code for one module name; every other import goes on as usual."""

    def __init__(self, name: str, code: CodeType, path: Path) -> None:
        self.name, self.code, self.path = name, code, path

    def find_spec(self, fullname: str, path: object, target: object = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=str(self.path))

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = str(self.path)
        exec(self.code, module.__dict__)  # running the mutant is the point


def _child_setup(quiet: bool) -> None:
    os.setpgid(0, 0)
    if quiet:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    # The same examples on every run, and none carried from one run to the next.
    hypothesis.settings.register_profile(
        "mutate", derandomize=True, database=None, print_blob=False
    )
    hypothesis.settings.load_profile("mutate")


def _pytest(root: Path, plugins: Sequence[object], files: Sequence[str]) -> int:
    os.chdir(root)
    # A temporary directory of the child's own: pytest's default one is shared, and
    # pruning its old numbered directories at the end took a third of a short run.
    temp = Path(tempfile.gettempdir()) / f"highlander-mutate-{os.getpid()}"
    try:
        return int(
            pytest.main([*_PYTEST_ARGS, f"--basetemp={temp}", *files], plugins=list(plugins))
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@dataclass
class Baseline:
    """The unmutated run: every test's core lines and time, and the lines run at collection."""

    tests: dict[str, set[tuple[str, int]]]
    imported: set[tuple[str, int]]
    #: Each test's time in the traced run: a mutant's tests run quickest first.
    times: dict[str, float]
    #: The whole unmutated run, untraced, in the order mutants' tests run (:func:`check_order`).
    seconds: float = 0.0


def coverage_map(root: Path, core_files: Sequence[Path], files: Sequence[str]) -> Baseline:
    """Run the tests unmutated, tracing the core files; raise if any test fails."""
    names = {str((root / path).resolve()) for path in core_files}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 3
            try:
                _child_setup(quiet=os.environ.get("MUTATE_DEBUG") is None)
                tracer = _Tracer(names)
                sys.settrace(tracer.trace)  # before pytest imports conftest and the core
                status = _pytest(root, [_Selector(None), tracer], files)
                sys.settrace(None)
                data = {
                    "failed": tracer.failed,
                    "tests": {k: sorted(v) for k, v in tracer.lines.items()},
                    "times": tracer.seconds,
                }
                Path(out.name).write_text(json.dumps(data), encoding="utf-8")
            finally:
                os._exit(status)
        _, status = os.waitpid(pid, 0)
        text = Path(out.name).read_text(encoding="utf-8")
    if not text or os.waitstatus_to_exitcode(status) != 0:
        failed = json.loads(text)["failed"] if text else "(no report)"
        raise SystemExit(f"the unmutated tests do not pass: {failed}")
    data = json.loads(text)
    tests = {k: {(f, n) for f, n in v} for k, v in data["tests"].items()}
    imported = tests.pop(IMPORT)
    return Baseline(tests=tests, imported=imported, times=data["times"])


def check_order(baseline: Baseline, root: Path) -> None:
    """Run every test unmutated in the order mutants run them; raise if one fails.

    A test that passes only after another (an order dependency) would kill
    every mutant it is run for: its verdicts would be false.  Also times the
    run, for the time limit of a mutant's.
    """
    started = time.monotonic()
    pid = start(None, sorted(baseline.times, key=baseline.times.__getitem__), root)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit("the tests fail unmutated when run quickest first: an order dependency")
    baseline.seconds = time.monotonic() - started


def selected(mutant: Mutant, baseline: Baseline, root: Path) -> tuple[str, ...]:
    """The tests that can see ``mutant``, in the order to run them.

    All of them for code run at import; else those that ran the mutant's
    function.  Those that ran its very line go first, quickest first: with
    ``-x`` a killed mutant's run ends at its first failing test.
    """
    name = str((root / mutant.path).resolve())
    first, last = mutant.span
    if mutant.import_time or any(f == name and first <= n <= last for f, n in baseline.imported):
        chosen = list(baseline.tests)
    else:
        chosen = [
            test
            for test, lines in baseline.tests.items()
            if any(f == name and first <= n <= last for f, n in lines)
        ]
    line = (name, mutant.line)
    return tuple(
        sorted(chosen, key=lambda t: (line not in baseline.tests[t], baseline.times[t], t))
    )


def start(mutant: Mutant | None, tests: Sequence[str], root: Path, quiet: bool = True) -> int:
    """Fork a child that runs ``tests`` (in this order) against ``mutant``; return its pid."""
    finder = None
    if mutant is not None:
        finder = _MutantFinder(mutant.module, mutated_code(mutant, root), root / mutant.path)
    files = sorted({t.split("::")[0] for t in tests})
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 3
        try:
            _child_setup(quiet)
            if finder is not None:
                sys.meta_path.insert(0, finder)
            status = _pytest(root, [_Selector(tests)], files)
        finally:
            os._exit(status)
    return pid


def stop(pid: int) -> None:
    """Kill a child that ran out of time, and whatever it started (its own group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
