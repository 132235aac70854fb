"""The launchers ``highlander run`` looks through to name a command: data only.

Each :class:`Form` says which options of one launcher take a value, which
are plain flags, which change what is named, and what its operand is.  An
option a form does not list makes the name ambiguous (it is then hashed),
so a missing entry costs readability, never identity.  docs/mcp.md shows
the names this gives; tests/cli/test_command_name.py checks every form.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from highlander._core.values import Value


class Operand(enum.Enum):
    """What a launcher's first operand is."""

    PACKAGE = "package"  # an npm or PyPI package spec
    IMAGE = "image"  # a container image reference
    SCRIPT = "script"  # a file, URL or ``npm:``/``jsr:`` specifier
    COMMAND = "command"  # the start of another command, read in turn


class Special(enum.Enum):
    """Options that change what is named."""

    MODULE = "module"  # its value is a Python module: that is the name
    MODULE_FLAG = "module_flag"  # the operand is a Python module
    CODE = "code"  # its value is inline code: nothing to name, hash it
    SHELL = "shell"  # its value is a shell command: read it, hash it
    BIN = "bin"  # its value is the package; the operand names the command run


class Form(Value):
    """How one launcher is read: its options (with or without a value) and its operand."""

    operand: Operand
    valued: frozenset[str] = frozenset()
    flags: frozenset[str] = frozenset()
    #: Options with these prefixes are flags (``--allow-net``, ``--experimental-x``).
    prefixes: tuple[str, ...] = ()
    special: Mapping[str, Special] = {}
    #: ``VAR=value`` words before the operand are skipped (``env``).
    assignments: bool = False


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_NPX = Form(
    Operand.PACKAGE,
    valued=_words("--registry --cache --userconfig --prefix -w --workspace"),
    flags=_words("-y --yes --no -q --quiet -s --silent --no-install --ignore-existing"),
    special={
        "-p": Special.BIN,
        "--package": Special.BIN,
        "-c": Special.SHELL,
        "--call": Special.SHELL,
    },
)
_DLX = Form(
    Operand.PACKAGE,
    valued=_words("--reporter --allow-build"),
    flags=_words("-s --silent -q --quiet --bun --no-install"),
    special={"-p": Special.BIN, "--package": Special.BIN},
)
_UV_VALUED = _words(
    "--with -w --with-editable --with-requirements --python -p --index --default-index"
    " --index-url -i --extra-index-url --find-links -f --directory --project --env-file"
    " --cache-dir --config-file --constraints -c --overrides --build-constraints -b"
    " --upgrade-package -P --reinstall-package --refresh-package --index-strategy"
    " --keyring-provider --resolution --prerelease --exclude-newer --link-mode --color"
    " --allow-insecure-host --python-platform --extra --group --only-group --no-group"
    " --package --config-setting -C --no-binary-package --no-build-package"
)
_UV_FLAGS = _words(
    "-q --quiet -v --verbose -n --no-cache --offline --isolated -U --upgrade --reinstall"
    " --refresh --no-config --native-tls --preview --no-progress --managed-python"
    " --no-managed-python --no-python-downloads --compile-bytecode --no-build-isolation"
    " --no-sources --no-build --no-binary --no-index --no-project --frozen --locked --no-sync"
    " --active --no-active --all-extras --no-dev --dev --only-dev --exact --inexact"
    " --no-env-file --all-packages --no-editable --all-groups --no-default-groups"
    " --gui-script -s --script"
)
_UVX = Form(Operand.PACKAGE, _UV_VALUED, _UV_FLAGS, special={"--from": Special.BIN})
_UV_RUN = Form(
    Operand.COMMAND,
    _UV_VALUED,
    _UV_FLAGS,
    special={"-m": Special.MODULE_FLAG, "--module": Special.MODULE_FLAG},
)
_DOCKER = Form(
    Operand.IMAGE,
    valued=_words(
        "-e --env --env-file -v --volume --mount --name -p --publish -w --workdir -u --user"
        " --network --net --network-alias --entrypoint -l --label --label-file --platform"
        " --add-host --cpus -c --cpu-shares --cpuset-cpus -m --memory --memory-swap -h"
        " --hostname --device --cap-add --cap-drop --security-opt --tmpfs --ulimit --pull"
        " --restart --log-driver --log-opt --gpus --ipc --pid --uts --userns --shm-size"
        " --stop-signal --stop-timeout --dns --dns-search --dns-option --cidfile --group-add"
        " --runtime --health-cmd --health-interval --volumes-from --link --expose --cgroupns"
        " --cgroup-parent --domainname --mac-address --ip --ip6 --attach -a --detach-keys"
        " --annotation --sysctl --storage-opt --isolation --pids-limit --memory-reservation"
    ),
    flags=_words(
        "--rm -i --interactive -t --tty -d --detach --init --privileged --read-only -P"
        " --publish-all --sig-proxy --no-healthcheck -q --quiet --oom-kill-disable"
        " --disable-content-trust --use-api-socket"
    ),
)
_DENO = Form(
    Operand.SCRIPT,
    valued=_words("-c --config --import-map --lock --cert --location --seed --ext"),
    flags=_words(
        "-A --allow-all -q --quiet -r --reload --no-check --check --no-prompt --watch"
        " --no-remote --no-npm --no-lock --no-config --cached-only --unstable --env"
        " --env-file --inspect --inspect-brk --inspect-wait -R -W -N -E -S -I -P"
    ),
    prefixes=("--allow-", "--deny-", "--unstable-", "--v8-flags", "--node-modules-dir"),
)
_NODE = Form(
    Operand.SCRIPT,
    valued=_words(
        "-r --require --import --loader --experimental-loader --env-file -C --conditions"
        " --title --input-type --stack-size --watch-path"
    ),
    flags=_words(
        "--inspect --inspect-brk --enable-source-maps --watch --expose-gc --preserve-symlinks"
        " --abort-on-uncaught-exception --harmony --pending-deprecation"
    ),
    prefixes=("--experimental-", "--no-", "--max-", "--trace-", "--inspect", "--unhandled-"),
    special={
        "-e": Special.CODE,
        "--eval": Special.CODE,
        "-p": Special.CODE,
        "--print": Special.CODE,
    },
)
_PYTHON_FORM = Form(
    Operand.SCRIPT,
    valued=_words("-X -W --check-hash-based-pycs"),
    flags=_words("-b -B -d -E -h -i -I -O -P -q -s -S -u -v -x -R"),
    special={"-m": Special.MODULE, "-c": Special.CODE},
)
_SHELL = Form(
    Operand.SCRIPT,
    valued=_words("-o +o"),
    flags=_words("-e -x -u -l --login -i --norc --noprofile -f -v"),
    special={"-c": Special.SHELL},
)
_ENV = Form(
    Operand.COMMAND,
    valued=_words("-u --unset -C --chdir"),
    flags=_words("-i --ignore-environment -0 --null -v --debug -"),
    special={"-S": Special.SHELL, "--split-string": Special.SHELL},
    assignments=True,
)
_WRAPPER = Form(Operand.COMMAND)

#: Launchers by their words (the program's name first); the longest match counts.
LAUNCHERS: dict[tuple[str, ...], Form] = {
    ("npx",): _NPX,
    ("npm", "exec"): _NPX,
    ("npm", "x"): _NPX,
    ("pnpm", "dlx"): _DLX,
    ("pnpx",): _DLX,
    ("yarn", "dlx"): _DLX,
    ("bunx",): _DLX,
    ("bun", "x"): _DLX,
    ("pnpm", "exec"): Form(Operand.COMMAND, _words("--filter -F"), _words("-r --recursive")),
    ("uvx",): _UVX,
    ("uv", "tool", "run"): _UVX,
    ("uv", "run"): _UV_RUN,
    ("pipx", "run"): Form(
        Operand.PACKAGE,
        _words("--python --index-url --pip-args"),
        _words("--no-cache -v --verbose -q --quiet --system-site-packages"),
        special={"--spec": Special.BIN},
    ),
    ("docker", "run"): _DOCKER,
    ("docker", "container", "run"): _DOCKER,
    ("podman", "run"): _DOCKER,
    ("podman", "container", "run"): _DOCKER,
    ("deno", "run"): _DENO,
    ("bun", "run"): _NODE,
    ("bun",): _NODE,
    ("node",): _NODE,
    ("nodejs",): _NODE,
    ("tsx",): _NODE,
    ("ts-node",): _NODE,
    ("python",): _PYTHON_FORM,
    ("sh",): _SHELL,
    ("bash",): _SHELL,
    ("dash",): _SHELL,
    ("zsh",): _SHELL,
    ("env",): _ENV,
    ("exec",): _WRAPPER,
    ("nohup",): _WRAPPER,
    ("setsid",): Form(Operand.COMMAND, flags=_words("-f --fork -w --wait -c --ctty")),
    ("nice",): Form(Operand.COMMAND, valued=_words("-n --adjustment")),
}
