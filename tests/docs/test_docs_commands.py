"""The docs' shell commands run as written, from a fresh clone (issue #13, "Done when").

Every ```sh block in README.md and docs/*.md carries a marker on the line
before it: ``<!-- runnable -->``, or ``<!-- not runnable: REASON -->`` for a
command that cannot run in a test (it installs, runs for minutes, or waits
for a client).  A runnable block's commands run in a fresh clone of this
checkout's HEAD (so uncommitted files cannot help), one shell per file, in
order, with stdin at end of file and an isolated HOME, runtime directory and
token.  Each must exit 0, or the status its own comment gives
(``# exits 3: ...``).  A ```text block right after a runnable block is what
the block prints on stdout, whole: ``...`` alone on a line stands for any
lines, inside a line for any text; a block without one must print nothing.

The shell finds ``.venv`` as the docs say: the clone's ``.venv`` is this
environment (a symlink; nothing is installed again), it is not on ``PATH``
to begin with, and docs/quickstart.md's ``. .venv/bin/activate`` puts it
there.  The other pages assume the reader did that, so their shell starts
with that line.  ``PYTHONPATH`` points at the clone, so the code that runs is
the clone's, not whatever the environment was installed from.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import REPO as ROOT

PAGES = [Path("README.md"), *sorted(p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md"))]
SHELLS = ("sh", "bash", "shell", "zsh")
MARKER = re.compile(r"<!-- (?:(runnable)|not runnable: (\S.*?)) -->")
EXITS = re.compile(r"#.*\bexits (\d+)\b")
#: Hang guard for one page's shell (not a performance assertion).
SESSION_WAIT = 60.0
#: Separates one command's stdout from the next; no command prints it.
SEPARATOR = "\x1ehighlander-docs-status"
ACTIVATE = ". .venv/bin/activate"


@dataclass
class Block:
    """One fenced shell block: where it is, its marker, its commands and expected stdout."""

    page: Path
    line: int
    runnable: bool
    reason: str | None
    commands: list[str] = field(default_factory=list)
    stdout: str | None = None


def _commands(lines: list[str]) -> list[str]:
    """Shell commands, a backslash-continued line joined to the next; comment lines dropped."""
    commands: list[str] = []
    pending = ""
    for raw in lines:
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.endswith("\\"):
            pending += raw[:-1]
            continue
        commands.append(pending + raw)
        pending = ""
    return commands


def blocks(page: Path) -> list[Block]:
    """Every shell block of ``page`` (relative to the repository), in order."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = re.fullmatch(r"```(\S*).*", lines[i])
        if not fence:
            i += 1
            continue
        end = lines.index("```", i + 1)
        body = lines[i + 1 : end]
        if fence.group(1) in SHELLS:
            mark = MARKER.fullmatch(lines[i - 1]) if i else None
            block = Block(
                page, i + 1, bool(mark and mark.group(1)), mark.group(2) if mark else None
            )
            block.commands = _commands(body)
            found.append(block)
        elif (
            fence.group(1) == "text"
            and found
            and found[-1].runnable
            and _follows(lines, found[-1].line, i)
        ):
            found[-1].stdout = "\n".join(body) + "\n"
        i = end + 1
    return found


def _follows(lines: list[str], block_line: int, text_line: int) -> bool:
    """Whether only blank lines separate the shell block at ``block_line`` from ``text_line``."""
    close = lines.index("```", block_line)
    return all(not line.strip() for line in lines[close + 1 : text_line])


def _pattern(expected: str) -> re.Pattern[str]:
    parts = []
    for line in expected.splitlines():
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts), re.S)


def matches(expected: str | None, actual: str) -> bool:
    """Whether ``actual`` is what the docs say it is (nothing, if they show no output)."""
    if expected is None:
        return actual == ""
    return _pattern(expected).fullmatch(actual) is not None


def _script(prelude: list[str], runnable: list[Block]) -> str:
    lines = [*prelude]
    for b, block in enumerate(runnable):
        for c, command in enumerate(block.commands):
            lines += [command, f"printf '\\n{SEPARATOR} %d %d %d\\n' {b} {c} $?"]
    return "\n".join(lines) + "\n"


@dataclass
class Session:
    """What one page's shell printed: per command, its status and stdout."""

    statuses: dict[tuple[int, int], int]
    stdout: dict[tuple[int, int], str]
    stderr: str


def run_session(
    clone: Path, env: dict[str, str], prelude: list[str], runnable: list[Block]
) -> Session:
    """Run the page's runnable commands in one bash in ``clone``; end its group by pid."""
    proc = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-c", _script(prelude, runnable)],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group: whatever a command leaves behind ends with it
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=SESSION_WAIT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    statuses: dict[tuple[int, int], int] = {}
    stdout: dict[tuple[int, int], str] = {}
    chunk_start = 0
    for found in re.finditer(rf"\n{SEPARATOR} (\d+) (\d+) (\d+)\n", out):
        key = (int(found.group(1)), int(found.group(2)))
        statuses[key] = int(found.group(3))
        stdout[key] = out[chunk_start : found.start()] + "\n"
        chunk_start = found.end()
    for key, text in stdout.items():  # the separator's own leading newline, not the command's
        stdout[key] = text[:-1]
    return Session(statuses, stdout, err)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of this checkout's HEAD, with ``.venv`` pointing at this environment."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    where = tmp_path_factory.mktemp("docs") / "highlander"
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(where)], check=True)
    subprocess.run(["git", "-C", str(where), "checkout", "--quiet", head], check=True)
    (where / ".venv").symlink_to(sys.prefix)
    with open(where / ".git" / "info" / "exclude", "a", encoding="utf-8") as exclude:
        exclude.write("/.venv\n")  # a symlink: the repository's `.venv/` pattern is for a directory
    return where


def shell_env(clone: Path, home: Path) -> dict[str, str]:
    """A user's shell: no Highlander settings, no virtual environment on PATH, a HOME of its own."""
    venv_bins = {
        str(Path(sys.prefix) / "bin"),
        str(Path(os.environ.get("VIRTUAL_ENV", "/-")) / "bin"),
    }
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in venv_bins]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HIGHLANDER_", "CLAUDE_")) and k not in ("VIRTUAL_ENV", "PYTHONHOME")
    }
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        PATH=os.pathsep.join(path),
        HOME=str(home),
        HIGHLANDER_RUNTIME_DIR=str(home / "rt"),
        HIGHLANDER_TOKEN="docs-test-token-0123456789abcdefghij",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONPATH=str(clone),
    )
    return env


def test_every_shell_block_is_marked_runnable_or_says_why_not() -> None:
    unmarked = [
        f"{block.page}:{block.line}"
        for page in PAGES
        for block in blocks(page)
        if not block.runnable and not block.reason
    ]
    assert not unmarked, (
        "mark each shell block with <!-- runnable --> or <!-- not runnable: REASON --> "
        f"on the line before it: {unmarked}"
    )


RUNNABLE_PAGES = [page for page in PAGES if any(block.runnable for block in blocks(page))]


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=str)
def test_the_runnable_commands_run_as_written(clone: Path, tmp_path: Path, page: Path) -> None:
    runnable = [block for block in blocks(page) if block.runnable]
    env = shell_env(clone, tmp_path / "home")
    prelude = [] if page == Path("docs/quickstart.md") else [ACTIVATE]
    session = run_session(clone, env, prelude, runnable)
    for b, block in enumerate(runnable):
        printed = ""
        for c, command in enumerate(block.commands):
            where = f"{page}:{block.line}: {command!r}"
            assert (b, c) in session.statuses, f"{where} did not finish: {session.stderr}"
            wanted = EXITS.search(command)
            expected = int(wanted.group(1)) if wanted else 0
            assert session.statuses[b, c] == expected, f"{where}: {session.stderr}"
            printed += session.stdout[b, c]
        assert matches(block.stdout, printed), f"{page}:{block.line} printed {printed!r}"
    left = subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert left == "", f"the commands of {page} left files git does not ignore: {left}"


def test_quickstart_reaches_the_cli_from_a_shell_without_the_venv(
    clone: Path, tmp_path: Path
) -> None:
    """#13 item 13: after `make test` a bare `highlander` is not found until the docs say how."""
    env = shell_env(clone, tmp_path / "home")
    bare = subprocess.run(
        ["bash", "-c", "command -v highlander"],
        cwd=clone,
        env=env,
        capture_output=True,
        check=False,
    )
    assert bare.returncode != 0, "the test's shell must start without the CLI, as a user's does"
    quickstart = [block for block in blocks(Path("docs/quickstart.md")) if block.runnable]
    commands = [command for block in quickstart for command in block.commands]
    assert ACTIVATE in commands[0], "quickstart puts the CLI on PATH before its first use"
    assert any(command.startswith("highlander ") for command in commands)
    # #13 item 14: the wrapped example runs with the interpreter that has `mcp`.
    assert any(
        command.startswith("highlander run --app notes -- .venv/bin/python examples/")
        for command in commands
    )


def test_the_examples_snapshot_is_ignored_by_git() -> None:
    """#13 item 14: the notes server's snapshot in the repository's root is not left untracked."""
    for name in (".notes-snapshot.json", ".notes-snapshot.json.4242.tmp"):
        ignored = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", name], check=False
        )
        assert ignored.returncode == 0, name


def test_the_output_rules() -> None:
    assert matches(None, "")
    assert not matches(None, "x\n")
    assert matches("a\n...\nz\n", "a\nb\nc\nz\n")
    assert matches("a\n...\nz\n", "a\nz\n")
    assert matches("no holder for x in ...\n", "no holder for x in /tmp/p\n")
    assert not matches("no holder for x in ...\n", "no holder for x in /tmp/p\nmore\n")
