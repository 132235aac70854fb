"""#13 items 6, 7, 8, 10: the CLI's contracts, one test per row of docs/guide.md's table.

Exit statuses per subcommand (``status``: 0 answering, 3 none, 4 held but
not answering); exactly one JSON document on stdout for every ``--json``
call, errors included; read-only commands (``status``, ``events``,
``doctor``) create nothing and log nothing; ``events -n`` rejects negatives.
Every call is a real ``highlander`` subprocess; holders are real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.proctools import WAIT, Children, wait_stopped


def cli(kids: Children, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "highlander.cli", *args],
        env=kids.env(**env),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def one_document(done: subprocess.CompletedProcess[str]) -> Any:
    """stdout is exactly one JSON document (json.loads refuses anything after it)."""
    assert done.stdout.strip(), f"nothing on stdout (status {done.returncode}): {done.stderr}"
    return json.loads(done.stdout)


def tree(path: Path) -> list[str]:
    """Every name under ``path`` (empty if it does not exist)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# -- status: 0 answering, 3 none, 4 held but not answering ----------------------------------


def test_status_answering_is_0(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    done = cli(kids, "status", "--json")
    assert done.returncode == 0, done.stderr
    data = one_document(done)
    assert data["held"] and data["answers"] and data["pid"] == holder.pid


def test_status_without_a_holder_is_3_and_json_says_so(kids: Children, tmp_path: Path) -> None:
    empty = tmp_path / "empty-rt"
    where = ["--project", str(kids.project), "--runtime-dir", str(empty)]
    done = cli(kids, "status", "--json", *where)
    assert done.returncode == 3, done.stderr
    data = one_document(done)
    assert data["held"] is False and data["answers"] is False
    assert data["project"] == str(kids.project.resolve())
    named = cli(kids, "status", "--json", "--app", "nobody")
    assert named.returncode == 3
    assert one_document(named)["held"] is False


def test_status_of_a_holder_that_does_not_answer_is_4(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    os.kill(holder.pid, signal.SIGSTOP)
    wait_stopped(holder.pid)
    try:
        done = cli(kids, "status", "--json", "--app", "child")
        human = cli(kids, "status", "--app", "child")
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert done.returncode == 4, done
    data = one_document(done)
    assert data["held"] is True and data["answers"] is False
    assert data["problem"] and data["pid"] == holder.pid
    assert human.returncode == 4
    assert "answers     no:" in human.stdout


# -- one JSON document for every --json call, errors included -------------------------------


def test_stop_json_without_a_holder_is_one_error_document(kids: Children) -> None:
    done = cli(kids, "stop", "--json", "--app", "child")
    assert done.returncode == 3
    data = one_document(done)
    assert "no holder" in data["error"] and data["exit"] == 3
    assert done.stderr.startswith("highlander: no holder")


def test_stop_json_when_the_save_fails_is_one_error_document(kids: Children) -> None:
    holder = kids.start(save="raise", steps=1)
    holder.wait_for("ready")
    done = cli(kids, "stop", "--json", "--app", "child")
    assert done.returncode == 1
    data = one_document(done)
    assert "ValueError: disk on fire" in data["error"] and data["exit"] == 1
    assert holder.proc.poll() is None


def test_status_json_with_an_ambiguous_app_is_one_error_document(kids: Children) -> None:
    for app in ("one", "two"):
        kids.start(app=app).wait_for("ready")
    done = cli(kids, "status", "--json")
    assert done.returncode == 1
    data = one_document(done)
    assert "pass --app" in data["error"] and "one, two" in data["error"]


def test_status_json_with_an_unsafe_runtime_dir_is_one_error_document(
    kids: Children, tmp_path: Path
) -> None:
    unsafe = tmp_path / "open-rt"
    unsafe.mkdir()
    unsafe.chmod(0o755)
    done = cli(kids, "status", "--json", "--app", "x", "--runtime-dir", str(unsafe))
    assert done.returncode == 1
    assert f"chmod 700 {unsafe}" in one_document(done)["error"]


@pytest.mark.parametrize("command", ["status", "stop", "events"])
def test_a_usage_error_with_json_is_one_error_document(kids: Children, command: str) -> None:
    done = cli(kids, command, "--json", "--no-such-option")
    assert done.returncode == 2
    data = one_document(done)
    assert data["exit"] == 2 and "--no-such-option" in data["error"]
    assert "usage:" in done.stderr


def test_events_json_is_one_document(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    done = cli(kids, "events", "--json", "--app", "child")
    assert done.returncode == 0
    events = one_document(done)
    assert isinstance(events, list) and events[0]["event"] == "claimed"


def test_doctor_and_token_json_are_one_document(kids: Children) -> None:
    doctor, token = cli(kids, "doctor", "--json"), cli(kids, "token", "--json")
    assert (doctor.returncode, token.returncode) == (0, 0)
    assert isinstance(one_document(doctor), list)
    assert "token" in one_document(token)


# -- rows added with stop --force and run's refused --json ----------------------------------
# (stop 1 and stop --force 0/1: tests/cli/test_cli_stop.py; doctor 1: tests/cli/test_cli_options.py)


def test_stop_json_when_it_worked_names_the_pid_and_the_handoff(kids: Children) -> None:
    holder = kids.start(steps=1)
    holder.wait_for("ready")
    done = cli(kids, "stop", "--json", "--app", "child")
    assert done.returncode == 0, done.stderr
    data = one_document(done)
    assert data == {"stopped": holder.pid, "handoff": data["handoff"], "forced": False}
    assert data["handoff"]["from"] == holder.pid
    assert holder.finish()[0] == 0


def test_run_exits_1_when_it_cannot_claim_and_2_for_usage(kids: Children, tmp_path: Path) -> None:
    unsafe = tmp_path / "open-rt"
    unsafe.mkdir()
    unsafe.chmod(0o755)
    refused = cli(kids, "run", "--runtime-dir", str(unsafe), "--", "true")
    assert refused.returncode == 1 and f"chmod 700 {unsafe}" in refused.stderr, refused
    assert refused.stdout == "", "run prints nothing of its own on stdout"
    bare = cli(kids, "run")
    assert bare.returncode == 2 and "run needs a command" in bare.stderr
    asked_json = cli(kids, "run", "--json", "--", "true")
    assert asked_json.returncode == 2
    assert one_document(asked_json)["exit"] == 2


# -- read-only commands create nothing and log nothing --------------------------------------


def test_read_only_commands_create_no_runtime_dir(kids: Children, tmp_path: Path) -> None:
    absent = tmp_path / "never-made"
    for args in (["status"], ["status", "--app", "x"], ["events", "--app", "x"], ["doctor"]):
        done = cli(kids, *args, "--runtime-dir", str(absent))
        assert done.returncode in (0, 3), (args, done)
        assert not absent.exists(), f"{args} created {absent}"


def test_read_only_commands_create_no_names_key(kids: Children, tmp_path: Path) -> None:
    empty = tmp_path / "empty-rt"
    empty.mkdir(mode=0o700)
    for args in (["status", "--app", "x"], ["events", "--app", "x"], ["doctor"]):
        done = cli(kids, *args, "--runtime-dir", str(empty))
        assert done.returncode in (0, 3), (args, done)
        assert tree(empty) == [], f"{args} created {tree(empty)}"


def test_status_leaves_no_trace_in_the_holders_event_log(kids: Children) -> None:
    holder = kids.start()
    holder.wait_for("ready")
    before = kids.events()
    files = tree(kids.runtime)
    for _ in range(3):
        assert cli(kids, "status", "--app", "child").returncode == 0
    assert cli(kids, "events", "--app", "child").returncode == 0
    assert cli(kids, "doctor").returncode == 0
    assert kids.events() == before, "a status call was logged"
    assert tree(kids.runtime) == files


# -- events -n ------------------------------------------------------------------------------


def test_events_n_rejects_negatives_and_0_means_all(kids: Children) -> None:
    first = kids.start(steps=1, step_delay=0)
    first.wait_for("ready")
    kids.start(steps=1, step_delay=0).wait_for("ready")
    every = one_document(cli(kids, "events", "--json", "-n", "0", "--app", "child"))
    assert len(every) > 3
    assert sorted(every, key=lambda e: e["ts"]) == kids.events(), "-n 0 shows every event"
    last = one_document(cli(kids, "events", "--json", "-n", "1", "--app", "child"))
    assert last == every[-1:]
    negative = cli(kids, "events", "-n", "-1", "--app", "child")
    assert negative.returncode == 2
    assert "negative" in negative.stderr and negative.stdout == ""
    helped = cli(kids, "events", "--help")
    assert "0: all" in helped.stdout
