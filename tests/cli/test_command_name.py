"""The app name ``highlander run -- CMD`` derives from a command (docs/mcp.md has the table).

Pure: no process is started.  Names are checked through
``highlander._commands.run.default_app``, the function ``run`` calls.  ``#`` in an
expected name stands for the 8-hex-digit hash of the whole command that
marks a name which alone could stand for another command.
"""

from __future__ import annotations

import re
import shlex

import pytest

from highlander._commands.run import default_app

#: (command as typed, expected name); every launcher form the table knows.
TABLE = [
    # npm and friends: the package, without scope or version
    ("npx -y @modelcontextprotocol/server-memory", "server-memory"),
    ("npx -y @scope/server-files@1.2 /home/me/project", "server-files"),
    ("npx --yes server-files@latest", "server-files"),
    ("npx -p @scope/tools files-bin --root .", "files-bin"),
    ("npx --package=@scope/tools files-bin", "files-bin"),
    ("npx -c 'server-files --stdio'", "server-files-#"),
    ("npm exec -- @scope/server-files", "server-files"),
    ("npm x -y server-files", "server-files"),
    ("pnpm dlx @scope/server-files@2", "server-files"),
    ("pnpx @scope/server-files", "server-files"),
    ("pnpm exec server-files --stdio", "server-files"),
    ("yarn dlx @scope/server-files", "server-files"),
    ("bunx @scope/server-files", "server-files"),
    ("bun x --bun server-files", "server-files"),
    # Python launchers: the package or module
    ("uvx mcp-server-time --local-timezone=UTC", "mcp-server-time"),
    ("uvx mcp-server-fetch==0.6.2", "mcp-server-fetch"),
    ("uvx --python 3.12 'mcp-server-git[cli]>=1'", "mcp-server-git"),
    ("uvx --from git+https://github.com/acme/mcp-tools acme-search", "acme-search"),
    ("uv tool run --with httpx mcp-server-time", "mcp-server-time"),
    ("uv run --with mcp weather.py", "weather"),
    ("uv run --directory /srv/acme server.py", "server-#"),
    ("uv run -m mcp_server_time", "mcp_server_time"),
    ("uv run python -m mcp_server_time", "mcp_server_time"),
    ("pipx run mcp-server-time", "mcp-server-time"),
    ("python3 -m mcp_server_time --local-timezone UTC", "mcp_server_time"),
    ("python3.12 -u -m acme.search", "acme.search"),
    ("python -um mcp_server_time", "mcp_server_time"),
    ("/usr/bin/python3 -X dev notes.py", "notes"),
    ("python3 server.py", "server-#"),
    ("python3 -m server", "server-#"),
    ("python3 -c 'import srv; srv.main()'", "python-#"),
    # containers: the image, without registry, tag or digest
    ("docker run -i --rm -e TOKEN=x -v /a:/b --name n mcp/filesystem /projects", "filesystem"),
    ("docker run -it --rm ghcr.io/github/github-mcp-server:v1", "github-mcp-server"),
    ("docker run --env=A=1 --network host mcp/time@sha256:abcd", "time"),
    ("docker container run --rm -i mcp/fetch", "fetch"),
    ("podman run -i --rm mcp/git", "git"),
    ("docker run --unknown-flag x mcp/time", "x-#"),
    # Deno: the script, the package behind npm:/jsr:, or the URL's place
    ("deno run -A jsr:@scope/server-x@1", "server-x"),
    ("deno run --allow-net --allow-read=/tmp npm:server-files", "server-files"),
    ("deno run -A https://deno.land/x/acme_search/mod.ts", "acme_search-#"),
    ("deno run --allow-env weather.ts", "weather"),
    # Node: the script, or its directory when the script's name says nothing
    ("node /opt/servers/filesystem/dist/index.js", "filesystem-#"),
    ("node /opt/servers/memory/dist/index.js", "memory-#"),
    ("node node_modules/@scope/server-files/build/main.js", "server-files-#"),
    ("node ./index.js", "index-#"),
    ("node --require ts-node/register acme.ts", "acme"),
    ("node --max-old-space-size=4096 --enable-source-maps notes.mjs", "notes"),
    ("node -e 'require(\"./srv\")'", "node-#"),
    ("tsx watch.ts", "watch"),
    ("bun run notes.ts", "notes"),
    # env, shells and wrappers: what they run
    ("env TZ=UTC mcp-server-time", "mcp-server-time"),
    ("env -i PATH=/bin TZ=UTC node notes.js", "notes"),
    ("env -u HOME -- uvx mcp-server-time", "mcp-server-time"),
    ("sh -c 'exec npx -y @scope/server-files'", "server-files-#"),
    ("bash -lc 'uvx mcp-server-time'", "mcp-server-time-#"),
    ("bash start-notes.sh", "start-notes"),
    ("nohup setsid nice -n 5 mcp-server-time", "mcp-server-time"),
    # a program of its own: its name, or its place when the name says nothing
    ("mcp-server-time --local-timezone UTC", "mcp-server-time"),
    ("/srv/weather/bin/server", "weather-#"),
    # launchers used in a form the table does not know, or with nothing to run
    ("npm start", "npm-#"),
    ("docker compose run notes", "docker-#"),
    ("deno task start", "deno-#"),
    ("npx", "npx-#"),
    ("node", "node-#"),
]


def _matches(name: str, expected: str) -> bool:
    if not expected.endswith("-#"):
        return name == expected
    return re.fullmatch(re.escape(expected[:-1]) + "[0-9a-f]{8}", name) is not None


@pytest.mark.parametrize(("command", "expected"), TABLE, ids=[c for c, _ in TABLE])
def test_a_command_is_named_after_what_it_runs(command: str, expected: str) -> None:
    assert _matches(default_app(shlex.split(command)), expected), default_app(shlex.split(command))


def test_no_two_ambiguous_commands_of_the_table_share_a_name() -> None:
    """Where the readable part could repeat, the hash tells every command apart."""
    names = [default_app(shlex.split(command)) for command, name in TABLE if name.endswith("#")]
    assert len(names) >= 20
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("node /opt/a/server/index.js", "node /opt/b/server/index.js"),
        ("python3 server.py --port 1", "python3 server.py --port 2"),
        ("docker run mcp/time", "docker run --weird mcp/time"),
        ("npm start", "npm start --prefix ../other"),
        ("sh -c 'exec srv-a'", "bash -c 'exec srv-a'"),
    ],
)
def test_ambiguous_commands_are_told_apart_by_the_hash(one: str, other: str) -> None:
    assert default_app(shlex.split(one)) != default_app(shlex.split(other))


def test_one_command_gets_one_name_whatever_the_launchers_path() -> None:
    """Two clients that spell the launcher differently still run one app."""
    short = default_app(["node", "/opt/servers/memory/dist/index.js"])
    full = default_app(["/usr/local/bin/node", "/opt/servers/memory/dist/index.js"])
    assert short == full
    assert re.fullmatch(r"memory-[0-9a-f]{8}", short)
    assert default_app(["/usr/bin/npx", "-y", "@s/x"]) == default_app(["npx", "-y", "@s/x"])


def test_a_name_that_had_to_be_tidied_is_hashed() -> None:
    """Characters a name should not carry are replaced, and the hash keeps names apart."""
    first = default_app(["node", "my server.js"])
    second = default_app(["node", "my_server.js"])
    assert re.fullmatch(r"my_server-[0-9a-f]{8}", first)
    assert second == "my_server"
