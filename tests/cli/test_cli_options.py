"""#13 items 9 and 11: every subcommand's help describes it; every option it accepts does
something, or is refused with the reason; ``doctor`` names a missing project as such.

Each option a subcommand's ``--help`` lists has a probe below that shows its
effect (a real ``highlander`` subprocess, real holders where one is needed);
the options that would mean nothing there (``token --project``,
``token --runtime-dir``, ``run --json``) are usage errors that say why.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.proctools import WAIT, Children, readable

COMMANDS = ("status", "stop", "events", "doctor", "token", "run")


def cli(kids: Children, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args],
        env=kids.env(**env),
        cwd=kids.project,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def helped(kids: Children, command: str) -> str:
    done = cli(kids, command, "--help")
    assert done.returncode == 0, done.stderr
    return done.stdout


def options_listed(text: str) -> set[str]:
    """The options an argparse help lists under "options:", but --help itself."""
    listed = re.findall(r"^  (--?[\w-]+)", text.split("options:", 1)[1], re.MULTILINE)
    return {name for name in listed if name not in ("-h", "--help")}


def test_the_command_list_is_complete(kids: Children) -> None:
    top = cli(kids, "--help").stdout
    listed = re.findall(r"^    (\w+) ", top.split("COMMAND\n", 1)[1], re.MULTILINE)
    assert listed == list(COMMANDS), top


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_help_has_a_description(kids: Children, command: str) -> None:
    text = helped(kids, command)
    # argparse: the usage block, a blank line, then the description paragraph.
    after_usage = text.split("\n\n", 2)[1]
    assert not after_usage.startswith(("options:", "positional arguments:")), text
    assert len(after_usage.split()) >= 8, f"no description for {command}: {text}"


@pytest.mark.parametrize("command", ["status", "stop", "events", "doctor", "run"])
def test_project_help_names_what_the_project_defaults_to(kids: Children, command: str) -> None:
    text = " ".join(helped(kids, command).split())
    described = re.search(r"--project PROJECT (.*?) --", text)
    assert described, text
    order = ["HIGHLANDER_PROJECT", "CLAUDE_PROJECT_DIR", "working directory"]
    positions = [described[1].find(word) for word in order]
    assert -1 not in positions and positions == sorted(positions), described[1]


def test_the_project_resolves_in_the_order_the_help_gives(kids: Children, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    both = cli(
        kids, "status", "--json", "--app", "x", HIGHLANDER_PROJECT=str(first),
        CLAUDE_PROJECT_DIR=str(second),
    )  # fmt: skip
    assert json.loads(both.stdout)["project"] == str(first.resolve())
    claude = cli(
        kids, "status", "--json", "--app", "x", HIGHLANDER_PROJECT="",
        CLAUDE_PROJECT_DIR=str(second),
    )  # fmt: skip
    assert json.loads(claude.stdout)["project"] == str(second.resolve())
    neither = cli(
        kids, "status", "--json", "--app", "x", HIGHLANDER_PROJECT="", CLAUDE_PROJECT_DIR=""
    )
    assert json.loads(neither.stdout)["project"] == str(kids.project.resolve())


def test_run_app_help_says_what_the_app_is_named_after(kids: Children, tmp_path: Path) -> None:
    text = " ".join(helped(kids, "run").split())
    described = re.search(r"--app APP (.*?) --", text)
    assert described, text
    assert "package or script" in described[1] and "hash" in described[1], described[1]
    script = tmp_path / "srv.py"
    script.write_text("pass\n")
    assert cli(kids, "run", "--", sys.executable, str(script)).returncode == 0
    assert json.loads(cli(kids, "status", "--json").stdout)["app"] == "srv"


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["token", "--project", "."], "--project"),
        (["token", "--runtime-dir", "/tmp"], "--runtime-dir"),
        (["run", "--json", "--", "true"], "--json"),
    ],
)
def test_an_option_that_would_do_nothing_is_refused(
    kids: Children, argv: list[str], option: str
) -> None:
    done = cli(kids, *argv)
    assert done.returncode == 2, done
    assert f"error: {option}: " in done.stderr and "drop" in done.stderr, done.stderr
    with_json = cli(kids, argv[0], "--json", *argv[1:]) if argv[0] == "token" else done
    assert with_json.returncode == 2
    assert json.loads(with_json.stdout)["exit"] == 2


# -- every option accepted does something --------------------------------------------------


def open_runtime_dir(tmp_path: Path) -> str:
    """A runtime directory others may enter: refused, with the chmod that fixes it."""
    where = tmp_path / "open-rt"
    where.mkdir()
    where.chmod(0o755)
    return str(where)


def refuses_missing_project(kids: Children, tmp_path: Path, command: str) -> None:
    missing = str(tmp_path / "no-such-project")
    done = cli(kids, command, "--project", missing, *(["--", "true"] if command == "run" else []))
    assert done.returncode == 1, done
    assert f"{missing!r}" in done.stderr or f"{missing} (from project=)" in done.stdout, done


def refuses_open_runtime_dir(kids: Children, tmp_path: Path, command: str) -> None:
    where = open_runtime_dir(tmp_path)
    extra = ["--", "true"] if command == "run" else ["--app", "x"]
    done = cli(kids, command, "--runtime-dir", where, *extra)
    assert done.returncode == 1, done
    assert f"chmod 700 {where}" in done.stdout + done.stderr, done


def prints_json(kids: Children, _tmp: Path, command: str) -> None:
    extra = [] if command in ("doctor", "token") else ["--app", "x"]
    assert json.loads(cli(kids, command, "--json", *extra).stdout) is not None
    plain = cli(kids, command, *extra).stdout
    with pytest.raises(ValueError):
        json.loads(plain)


def status_app(kids: Children, _tmp: Path, _command: str) -> None:
    assert json.loads(cli(kids, "status", "--json", "--app", "zed").stdout)["app"] == "zed"


def stop_app(kids: Children, _tmp: Path, _command: str) -> None:
    assert "no holder for zed" in cli(kids, "stop", "--app", "zed").stderr


def events_app(kids: Children, _tmp: Path, _command: str) -> None:
    kids.start().wait_for("ready")
    assert json.loads(cli(kids, "events", "--json", "--app", "child").stdout)
    assert json.loads(cli(kids, "events", "--json", "--app", "zed").stdout) == []


def doctor_app(kids: Children, _tmp: Path, _command: str) -> None:
    def socket(app: str) -> str:
        findings = json.loads(cli(kids, "doctor", "--json", "--app", app).stdout)
        return str(next(f["detail"] for f in findings if f["check"] == "socket path"))

    assert socket("one") != socket("two")


def token_app(kids: Children, _tmp: Path, _command: str) -> None:
    snippets = json.loads(cli(kids, "token", "--json", "--app", "zed").stdout)["snippets"]
    assert all('"zed"' in text for text in snippets.values())


def run_app(kids: Children, _tmp: Path, _command: str) -> None:
    assert cli(kids, "run", "--app", "zed", "--", "true").returncode == 0
    assert list(kids.runtime.glob("zed-*.state"))


def run_runtime_dir(kids: Children, tmp_path: Path, command: str) -> None:
    refuses_open_runtime_dir(kids, tmp_path, command)
    elsewhere = tmp_path / "elsewhere"
    assert cli(kids, "run", "--runtime-dir", str(elsewhere), "--", "true").returncode == 0
    assert list(elsewhere.glob("*.state"))


def stop_force(kids: Children, _tmp: Path, _command: str) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    assert cli(kids, "stop", "--force", "--app", "child").returncode == 0
    assert holder.finish()[0] in (-signal.SIGTERM, -signal.SIGKILL)


def events_n(kids: Children, _tmp: Path, _command: str) -> None:
    kids.start().wait_for("ready")
    assert len(json.loads(cli(kids, "events", "--json", "-n", "1", "--app", "child").stdout)) == 1


def events_follow(kids: Children, _tmp: Path, _command: str) -> None:
    first = kids.start()
    first.wait_for("ready")
    argv = [sys.executable, "-m", "highlander.cli", "events", "--follow", "--json", "-n", "1"]
    follower = kids.spawn([*argv, "--app", "child"], kids.env())
    assert follower.proc.stdout is not None
    fd, seen, buffer = follower.proc.stdout.fileno(), [], b""

    def read_until(done: Callable[[list[dict[str, Any]]], bool]) -> None:
        nonlocal buffer
        while not done(seen):
            assert readable([fd], WAIT), seen
            *lines, buffer = (buffer + os.read(fd, 65536)).split(b"\n")
            seen.extend(json.loads(line) for line in lines)

    read_until(lambda shown: len(shown) == 1)  # -n 1: the last event so far
    kids.start().wait_for("ready")  # a succession: it follows what happens next
    read_until(lambda shown: any(e["event"] == "relinquished" for e in shown))


WINDS_DOWN_ON_USR1 = """
import os, signal, sys
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(42))
os.write(1, b"ready\\n")
signal.pause()
"""


def run_on_save_signal(kids: Children, _tmp: Path, _command: str) -> None:
    argv = [sys.executable, "-m", "highlander.cli", "run", "--app", "w"]
    cmd = ["--", sys.executable, "-c", WINDS_DOWN_ON_USR1]
    first = kids.spawn([*argv, "--on-save-signal", "USR1", *cmd], kids.env())
    assert first.proc.stdout is not None
    assert readable([first.proc.stdout.fileno()], WAIT)
    assert os.read(first.proc.stdout.fileno(), 100) == b"ready\n"
    assert cli(kids, "run", "--app", "w", "--", "true").returncode == 0
    assert first.finish()[0] == 0  # deposed: the wrapper exits 0 (docs/mcp.md)
    (exited,) = [e for e in kids.events("command_exited") if e["pid"] == first.pid]
    assert exited["exit_status"] == 42, "the wrapped command got SIGUSR1 and wound down"


IGNORES_SIGTERM = """
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.write(1, b"ready\\n")
signal.pause()
"""


def run_wind_down(kids: Children, _tmp: Path, _command: str) -> None:
    argv = [sys.executable, "-m", "highlander.cli", "run", "--app", "w", "--wind-down", "0.5"]
    first = kids.spawn([*argv, "--", sys.executable, "-c", IGNORES_SIGTERM], kids.env())
    assert first.proc.stdout is not None
    assert readable([first.proc.stdout.fileno()], WAIT)
    assert os.read(first.proc.stdout.fileno(), 100) == b"ready\n"
    assert cli(kids, "run", "--app", "w", "--", "true").returncode == 0
    assert first.finish()[0] == 0
    # The command ignored the save signal: SIGKILLed at the --wind-down limit.
    assert [e for e in kids.events("tree_killed") if e["pid"] == first.pid]


def refuses_unknown_backend(kids: Children, _tmp: Path, command: str) -> None:
    # Without a cluster: what --backend takes, and that `local` is this machine.
    done = cli(kids, command, "--app", "child", "--backend", "zookeeper://h1")
    assert done.returncode == 1 and "etcd://host:2379" in done.stderr
    assert cli(kids, command, "--app", "child", "--backend", "local").returncode == 3


Probe = Callable[[Children, Path, str], None]
#: Every option each subcommand lists, and the probe that shows what it does.
PROBES: dict[str, dict[str, Probe]] = {
    "status": {
        "--project": refuses_missing_project,
        "--app": status_app,
        "--runtime-dir": refuses_open_runtime_dir,
        "--json": prints_json,
        "--backend": refuses_unknown_backend,
    },
    "stop": {
        "--project": refuses_missing_project,
        "--app": stop_app,
        "--runtime-dir": refuses_open_runtime_dir,
        "--json": prints_json,
        "--force": stop_force,
        "--backend": refuses_unknown_backend,
    },
    "events": {
        "--project": refuses_missing_project,
        "--app": events_app,
        "--runtime-dir": refuses_open_runtime_dir,
        "--json": prints_json,
        "-n": events_n,
        "--follow": events_follow,
    },
    "doctor": {
        "--project": refuses_missing_project,
        "--app": doctor_app,
        "--runtime-dir": refuses_open_runtime_dir,
        "--json": prints_json,
    },
    "token": {"--app": token_app, "--json": prints_json},
    "run": {
        "--project": refuses_missing_project,
        "--app": run_app,
        "--runtime-dir": run_runtime_dir,
        "--on-save-signal": run_on_save_signal,
        "--wind-down": run_wind_down,
    },
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_listed_has_a_probe(kids: Children, command: str) -> None:
    assert options_listed(helped(kids, command)) == set(PROBES[command])


@pytest.mark.parametrize(
    ("command", "option"), [(c, o) for c, probes in PROBES.items() for o in probes]
)
def test_every_option_accepted_does_something(
    kids: Children, tmp_path: Path, command: str, option: str
) -> None:
    PROBES[command][option](kids, tmp_path, command)


# -- doctor: a missing project is a project problem ----------------------------------------


@pytest.mark.parametrize(
    ("how", "fix"),
    [
        ("--project", "--project DIR"),
        ("HIGHLANDER_PROJECT", "set HIGHLANDER_PROJECT"),
        ("CLAUDE_PROJECT_DIR", "set CLAUDE_PROJECT_DIR"),
    ],
)
def test_doctor_names_a_missing_project_and_its_fix(
    kids: Children, tmp_path: Path, how: str, fix: str
) -> None:
    missing = str(tmp_path / "no-such-project")
    if how == "--project":
        done = cli(kids, "doctor", "--json", "--project", missing)
    else:
        done = cli(kids, "doctor", "--json", **{"HIGHLANDER_PROJECT": "", how: missing})
    assert done.returncode == 1
    findings = json.loads(done.stdout)
    failed = [f for f in findings if f["verdict"] == "FAIL"]
    assert [f["check"] for f in failed] == ["project"], failed
    assert missing in failed[0]["detail"] and fix in failed[0]["fix"], failed
    assert "HIGHLANDER_RUNTIME_DIR" not in json.dumps(failed)


def test_doctor_names_a_deleted_working_directory(kids: Children, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    script = f'cd "{gone}" && rmdir "{gone}" && exec "$0" -m highlander.cli doctor --json'
    env = kids.env(HIGHLANDER_PROJECT="")
    done = subprocess.run(
        ["sh", "-c", script, sys.executable],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    (failed,) = [f for f in json.loads(done.stdout) if f["verdict"] == "FAIL"]
    assert failed["check"] == "project" and "cd into" in failed["fix"], failed


def test_doctor_reports_the_project_it_checked(kids: Children) -> None:
    done = cli(kids, "doctor", "--json")
    assert done.returncode == 0, done.stdout
    (project,) = [f for f in json.loads(done.stdout) if f["check"] == "project"]
    assert project["verdict"] == "OK"
    assert project["detail"] == f"{kids.project.resolve()} (from HIGHLANDER_PROJECT)"
