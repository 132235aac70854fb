"""#13 item 16: ``highlander token``'s snippets follow the rollout advice, and ide.md shows them.

Every client starts in ``observe`` (docs/rollout.md, docs/ide.md); the
interpreter is a placeholder that says what goes there, never a bare
``python3`` (the system one has neither the server's dependencies nor
Highlander).  docs/ide.md's JSON is exactly what the command prints.
"""

from __future__ import annotations

import json
import re

from tests.cli.test_cli import cli
from tests.support.paths import DOCS
from tests.support.proctools import Children

IDE_MD = DOCS / "ide.md"
#: The example token docs/ide.md shows (not a secret: the page says to generate one).
IDE_EXAMPLE_TOKEN = "MxWmgkK5HxBpjt7J5iNqpoZz8MrDlYswKFAwck0p1dw"


def _servers(text: str) -> dict[str, dict[str, object]]:
    config = json.loads(text)
    servers: dict[str, dict[str, object]] = config.get("mcpServers") or config["servers"]
    return servers


def test_every_snippet_starts_in_observe_with_a_placeholder_interpreter(kids: Children) -> None:
    done = cli(kids, "token", "--json", "--app", "notes")
    assert done.returncode == 0, done.stderr
    for where, text in json.loads(done.stdout)["snippets"].items():
        server = _servers(text)["notes"]
        env = server["env"]
        assert isinstance(env, dict)
        assert env["HIGHLANDER_MODE"] == "observe", where
        command = server["command"]
        assert isinstance(command, str)
        assert command != "python3", where
        assert command.startswith("/path/to/") and command.endswith("/bin/python"), where


def test_the_text_output_says_what_to_fill_in_and_how_to_roll_out(kids: Children) -> None:
    done = cli(kids, "token", "--app", "notes")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", lines[0]), "the token alone on the first line"
    head = "\n".join(lines[1:6])
    assert "/path/to/your-server/.venv/bin/python" in head
    assert "observe, then warn, then auto" in head


def test_ide_md_shows_exactly_what_token_prints(kids: Children) -> None:
    shown = re.findall(r"```json\n(.*?)```", IDE_MD.read_text(encoding="utf-8"), re.S)
    done = cli(kids, "token", "--json", "--app", "notes")
    printed = json.loads(done.stdout)
    expected = [
        text.replace(printed["token"], IDE_EXAMPLE_TOKEN) for text in printed["snippets"].values()
    ]
    assert [json.loads(text) for text in shown] == [json.loads(text) for text in expected]
