"""The configuration fingerprint and build of share mode (highlander._host.fingerprint)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from highlander._core.errors import ConfigurationError
from highlander._core.sharing import ShareMode
from highlander._host.fingerprint import fingerprint, relevant, share_mode, this_build

ENV = {"PATH": "/usr/bin", "HOME": "/home/a", "API_KEY": "k1"}


def test_terminal_and_highlander_variables_do_not_count() -> None:
    noisy = {
        **ENV, "TERM": "xterm", "PWD": "/x", "SHLVL": "3", "VSCODE_PID": "77",
        "SSH_AUTH_SOCK": "/tmp/s", "HIGHLANDER_MODE": "warn", "HIGHLANDER_TOKEN": "t",
        "CLAUDECODE": "1",
    }  # fmt: skip
    assert relevant(noisy) == ENV
    assert fingerprint(["py", "s.py"], "/p", noisy) == fingerprint(["py", "s.py"], "/p", ENV)


@pytest.mark.parametrize(
    ("argv", "cwd", "env"),
    [
        (["py", "s.py", "--fast"], "/p", ENV),  # another flag
        (["py", "s.py"], "/q", ENV),  # another working directory
        (["py", "s.py"], "/p", {**ENV, "API_KEY": "k2"}),  # another client's credential
        (["py", "s.py"], "/p", {**ENV, "EXTRA": ""}),  # a variable more
    ],
)
def test_anything_else_that_differs_gives_another_fingerprint(
    argv: list[str], cwd: str, env: dict[str, str]
) -> None:
    assert fingerprint(argv, cwd, env) != fingerprint(["py", "s.py"], "/p", ENV)


def test_share_mode_from_argument_then_environment() -> None:
    assert share_mode(None, {}) is ShareMode.OFF
    assert share_mode(None, {"HIGHLANDER_SHARE": " ON "}) is ShareMode.ON
    assert share_mode(True, {"HIGHLANDER_SHARE": "off"}) is ShareMode.ON
    assert share_mode("only", {}) is ShareMode.ONLY
    with pytest.raises(ConfigurationError, match="HIGHLANDER_SHARE"):
        share_mode(None, {"HIGHLANDER_SHARE": "yes"})


def test_build_from_argument_then_environment_then_the_main_file(tmp_path: Path) -> None:
    assert this_build("1.2", {"HIGHLANDER_BUILD": "9"}).version == "1.2"
    assert this_build(None, {"HIGHLANDER_BUILD": "9"}).version == "9"
    script = tmp_path / "server.py"
    show = "from highlander._host.fingerprint import this_build; print(this_build(None, {}))"
    script.write_text(show + "\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def build() -> str:
        run = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True,
            timeout=60,
        )  # fmt: skip
        return run.stdout

    before = build()
    script.write_text(show + "\n# edited\n")  # an edited server is another build
    assert "file:" in before and build() != before


def test_share_mode_and_an_etcd_backend_are_refused_together(tmp_path: Path) -> None:
    from highlander._host.settings import Settings

    env = {"HIGHLANDER_SHARE": "on", "HIGHLANDER_PROJECT_ID": "example.com/p"}
    with pytest.raises(ConfigurationError, match="unset HIGHLANDER_SHARE"):
        Settings.resolve(
            app="a", project=tmp_path, mode=None, token="t" * 32, timeouts=None,
            runtime_dir=tmp_path / "rt", env=env, backend="etcd://127.0.0.1:2379",
        )  # fmt: skip
