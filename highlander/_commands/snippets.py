"""IDE configuration snippets for ``highlander token`` (and the docs).

The snippets follow docs/rollout.md: every client starts in ``observe``
(a client already on ``auto`` would replace servers whose other clients
have not opted in yet).  The command is a placeholder, because only the
user knows which interpreter has both their server's dependencies and
Highlander installed; a bare ``python3`` is usually the system one, which
has neither.
"""

from __future__ import annotations

import json
from typing import Any

#: Where the snippets leave the interpreter for the user to fill in.
PYTHON_PLACEHOLDER = "/path/to/your-server/.venv/bin/python"
#: The mode every client starts in (docs/rollout.md, stage 1).
FIRST_MODE = "observe"
#: What ``highlander token`` prints between the token and the snippets.
NOTES = (
    f"# Replace {PYTHON_PLACEHOLDER} with the python of the environment that has",
    "# your server and Highlander installed (docs/quickstart.md), and the script path.",
    f"# Every client starts with HIGHLANDER_MODE={FIRST_MODE}, then warn, then auto"
    " (docs/rollout.md).",
)


def _server(token_value: str, app: str, *, stdio_type: bool = False) -> dict[str, Any]:
    server: dict[str, Any] = {
        "command": PYTHON_PLACEHOLDER,
        "args": [f"/path/to/{app}.py"],
        "env": {"HIGHLANDER_TOKEN": token_value, "HIGHLANDER_MODE": FIRST_MODE},
    }
    return {"type": "stdio", **server} if stdio_type else server


def _vscode_server(app: str) -> dict[str, Any]:
    server = _server("${input:highlander-token}", app, stdio_type=True)
    server["env"]["HIGHLANDER_PROJECT"] = "${workspaceFolder}"  # one server per workspace
    return server


def _dump(data: Any) -> str:
    return json.dumps(data, indent=2)


def snippets(token: str, app: str) -> dict[str, str]:
    """Return the exact JSON for each client, keyed by where it goes."""
    vscode = {
        "inputs": [
            {
                "type": "promptString",
                "id": "highlander-token",
                "description": "Highlander token (highlander token prints one)",
                "password": True,
            }
        ],
        "servers": {app: _vscode_server(app)},
    }
    return {
        "Claude Desktop (claude_desktop_config.json)": _dump(
            {"mcpServers": {app: _server(token, app)}}
        ),
        "Claude Code (.mcp.json; export HIGHLANDER_TOKEN in your shell)": _dump(
            {"mcpServers": {app: _server("${HIGHLANDER_TOKEN}", app, stdio_type=True)}}
        ),
        "VS Code (.vscode/mcp.json; prompts for the token once)": _dump(vscode),
        "Cursor (~/.cursor/mcp.json)": _dump({"mcpServers": {app: _server(token, app)}}),
    }
