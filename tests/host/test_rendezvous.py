"""Tests for highlander._host.rendezvous against real directories, modes, owners and sockets.

We run as root, so ownership is real: directories are chowned to other uids
with ``os.chown`` and the kernel's own answers are checked.  Nothing the
kernel does is mocked.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import stat
from pathlib import Path

import pytest

from highlander._core.errors import (
    ConfigurationError,
    SocketPathTooLongError,
    UnsafeRuntimeDirError,
)
from highlander._host.app_name import APP_MAX, APP_NAME_MAX, app_stem, check_app
from highlander._host.rendezvous import (
    PRIVATE_TAG_CHARS,
    RUNTIME_VAR,
    ProjectPaths,
    choose_runtime_dir,
    ensure_runtime_dir,
    project_key,
    project_paths,
    project_root,
    sun_path_limit,
)

FOREIGN_UID = 12345


def _mode(path: str | os.PathLike[str]) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _dir_of_len(length: int) -> str:
    """Return an absolute (pure, never created) directory path of ``length`` bytes."""
    assert length >= 2
    return "/" + "d" * (length - 1)


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, str]:
    """Four distinct real directories, by name."""
    made = {}
    for name in ("explicit", "hl_project", "claude", "cwd"):
        path = tmp_path / name
        path.mkdir()
        made[name] = str(path)
    return made


# --------------------------------------------------------------------------- project_root


def test_project_root_explicit_beats_everything(dirs: dict[str, str]) -> None:
    env = {"HIGHLANDER_PROJECT": dirs["hl_project"], "CLAUDE_PROJECT_DIR": dirs["claude"]}
    got = project_root(dirs["explicit"], env=env, cwd=dirs["cwd"])
    assert got == os.path.realpath(dirs["explicit"])


def test_project_root_accepts_pathlike(dirs: dict[str, str]) -> None:
    got = project_root(Path(dirs["explicit"]), env={}, cwd=dirs["cwd"])
    assert got == os.path.realpath(dirs["explicit"])


def test_project_root_highlander_project_beats_claude_and_cwd(dirs: dict[str, str]) -> None:
    env = {"HIGHLANDER_PROJECT": dirs["hl_project"], "CLAUDE_PROJECT_DIR": dirs["claude"]}
    assert project_root(env=env, cwd=dirs["cwd"]) == os.path.realpath(dirs["hl_project"])


def test_project_root_claude_project_dir_beats_cwd(dirs: dict[str, str]) -> None:
    env = {"CLAUDE_PROJECT_DIR": dirs["claude"]}
    assert project_root(env=env, cwd=dirs["cwd"]) == os.path.realpath(dirs["claude"])


def test_project_root_falls_back_to_cwd(dirs: dict[str, str]) -> None:
    assert project_root(env={}, cwd=dirs["cwd"]) == os.path.realpath(dirs["cwd"])


def test_project_root_ignores_unrelated_variables(dirs: dict[str, str]) -> None:
    env = {"PWD": dirs["claude"], "PROJECT": dirs["hl_project"]}
    assert project_root(env=env, cwd=dirs["cwd"]) == os.path.realpath(dirs["cwd"])


def test_project_root_empty_highlander_project_is_ignored(dirs: dict[str, str]) -> None:
    env = {"HIGHLANDER_PROJECT": "", "CLAUDE_PROJECT_DIR": dirs["claude"]}
    assert project_root(env=env, cwd=dirs["cwd"]) == os.path.realpath(dirs["claude"])


def test_project_root_all_empty_values_fall_back_to_cwd(dirs: dict[str, str]) -> None:
    env = {"HIGHLANDER_PROJECT": "", "CLAUDE_PROJECT_DIR": ""}
    assert project_root("", env=env, cwd=dirs["cwd"]) == os.path.realpath(dirs["cwd"])


def test_project_root_empty_explicit_is_ignored(dirs: dict[str, str]) -> None:
    env = {"HIGHLANDER_PROJECT": dirs["hl_project"]}
    got = project_root("", env=env, cwd=dirs["cwd"])
    assert got == os.path.realpath(dirs["hl_project"])


def test_project_root_is_realpathed(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    expected = os.path.realpath(real)

    via_link = project_root(str(link), env={})
    via_dotdot = project_root(str(real / "sub" / ".."), env={})
    via_env_link = project_root(env={"HIGHLANDER_PROJECT": str(link)}, cwd="/")
    via_cwd_link = project_root(env={}, cwd=str(link))

    assert via_link == via_dotdot == via_env_link == via_cwd_link == expected
    assert not os.path.islink(via_link)
    assert ".." not in via_dotdot.split(os.sep)


@pytest.mark.parametrize(
    ("bad", "source"),
    [
        ("explicit", "project="),
        ("HIGHLANDER_PROJECT", "HIGHLANDER_PROJECT"),
        ("CLAUDE_PROJECT_DIR", "CLAUDE_PROJECT_DIR"),
        ("cwd", "the working directory"),
    ],
)
def test_project_root_missing_directory_names_its_source(
    tmp_path: Path, bad: str, source: str
) -> None:
    missing = str(tmp_path / "no-such-project")
    good = tmp_path / "good"
    good.mkdir()
    order = ["explicit", "HIGHLANDER_PROJECT", "CLAUDE_PROJECT_DIR", "cwd"]
    # The bad source is set to a missing directory, every lower-priority source
    # to a good one: a typo must not silently fall through to another project.
    lower = order[order.index(bad) + 1 :]
    values = {name: str(good) for name in lower}
    values[bad] = missing
    env = {
        name: values[name]
        for name in ("HIGHLANDER_PROJECT", "CLAUDE_PROJECT_DIR")
        if name in values
    }

    with pytest.raises(ConfigurationError) as info:
        project_root(values.get("explicit"), env=env, cwd=values["cwd"])

    message = str(info.value)
    assert f"(from {source})" in message
    assert repr(missing) in message
    assert isinstance(info.value, ValueError)


def test_project_root_regular_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("not a directory")
    with pytest.raises(ConfigurationError, match=r"\(from project=\) is not a directory"):
        project_root(str(file), env={}, cwd=str(tmp_path))


# --------------------------------------------------------------------------- project_key


def test_project_key_is_sha256_of_fsencoded_root(tmp_path: Path) -> None:
    root = project_root(str(tmp_path), env={})
    key = project_key(root)
    assert isinstance(key, bytes)
    assert len(key) == 32
    assert key == hashlib.sha256(os.fsencode(root)).digest()


def test_project_key_uses_fsencode_for_undecodable_names() -> None:
    root = "/srv/caf\udce9"  # the byte 0xe9 in a non-UTF-8 file name (surrogateescape)
    assert project_key(root) == hashlib.sha256(b"/srv/caf\xe9").digest()


def test_project_key_same_for_two_spellings_of_one_directory(tmp_path: Path) -> None:
    real = tmp_path / "proj"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "alias"
    link.symlink_to(real, target_is_directory=True)
    key_real = project_key(project_root(str(real), env={}))
    key_link = project_key(project_root(str(link), env={}))
    key_dotdot = project_key(project_root(str(real / "sub" / ".."), env={}))
    assert key_real == key_link == key_dotdot
    other = tmp_path / "other"
    other.mkdir()
    assert project_key(project_root(str(other), env={})) != key_real


# --------------------------------------------------------------------------- app_name


@pytest.mark.parametrize("app", ["my-server", "My_Server.v2", "a.b-c_d", "x" * APP_MAX, "-x"])
def test_a_short_plain_app_name_is_its_own_stem(app: str) -> None:
    assert check_app(app) == app
    assert app_stem(app) == app


@pytest.mark.parametrize(
    "app",
    [
        *("my server/v2", "a:b*c?d", "caf\u00e9", "...hidden", ".a.b", "../etc/passwd"),
        *("/", ".", "...", "x" * (APP_MAX + 1), "." * 5 + "y" * 40, "a~b", "\u96fb\u8133"),
    ],
)
def test_any_other_app_name_is_used_whole_with_a_hashed_stem(app: str) -> None:
    assert check_app(app) == app  # never rewritten: the name stays the identity
    stem = app_stem(app)
    assert re.fullmatch(r"(?:[A-Za-z0-9_\-][A-Za-z0-9._\-]{0,14})?~[0-9a-f]{16}", stem)
    assert stem.endswith("~" + hashlib.sha256(app.encode()).hexdigest()[:16])


@pytest.mark.parametrize(
    ("app", "problem"),
    [
        ("", "empty"),
        ("a" * (APP_NAME_MAX + 1), f"limit is {APP_NAME_MAX}"),
        ("my\napp", "control character"),
        ("nul\x00", "control character"),
        ("lone\udce9", "not valid Unicode"),
    ],
)
def test_an_app_name_that_cannot_be_used_is_refused_never_rewritten(app: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_app(app)
    message = str(info.value)
    assert problem in message
    assert "--app" in message


# --------------------------------------------------------------------------- choose_runtime_dir


@pytest.fixture
def run_user():
    """Create ``/run/user/<uid>`` entries for test uids; remove all of them afterwards."""
    base = "/run/user"
    created_base = False
    if not os.path.lexists(base):
        os.makedirs(base)
        created_base = True
        os.chmod(base, 0o755)
    made: list[str] = []

    def make(uid: int, *, kind: str = "dir", owner: int | None = None, target: str = "") -> str:
        path = f"{base}/{uid}"
        assert not os.path.lexists(path), f"{path} already exists; this test needs it absent"
        if kind == "dir":
            os.mkdir(path, 0o700)
        elif kind == "file":
            with open(path, "x"):
                pass
        elif kind == "symlink":
            os.symlink(target, path)
        made.append(path)
        os.chown(path, uid if owner is None else owner, -1, follow_symlinks=False)
        return path

    try:
        yield make
    finally:
        for path in reversed(made):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        if created_base:
            os.rmdir(base)


def test_choose_runtime_dir_explicit_beats_env(tmp_path: Path) -> None:
    env = {RUNTIME_VAR: str(tmp_path / "from-env")}
    got = choose_runtime_dir(str(tmp_path / "explicit"), env=env, uid=4242)
    assert got == str(tmp_path / "explicit")


def test_choose_runtime_dir_explicit_pathlike_and_relative(tmp_path: Path) -> None:
    assert choose_runtime_dir(tmp_path / "p", env={}, uid=4242) == str(tmp_path / "p")
    assert choose_runtime_dir("rel/dir", env={}, uid=4242) == os.path.join(
        os.getcwd(), "rel", "dir"
    )


def test_choose_runtime_dir_from_env_is_absolute(tmp_path: Path) -> None:
    env = {RUNTIME_VAR: str(tmp_path / "rt") + "/"}
    assert choose_runtime_dir(env=env, uid=4242) == str(tmp_path / "rt")


def test_choose_runtime_dir_empty_values_are_ignored(tmp_path: Path) -> None:
    assert not os.path.lexists("/run/user/4242")
    env = {RUNTIME_VAR: str(tmp_path / "rt")}
    assert choose_runtime_dir("", env=env, uid=4242) == str(tmp_path / "rt")
    assert choose_runtime_dir(env={RUNTIME_VAR: ""}, uid=4242) == "/tmp/highlander-4242"


def test_choose_runtime_dir_ignores_xdg_and_tmpdir(tmp_path: Path) -> None:
    assert not os.path.lexists("/run/user/4242")
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "xdg"), "TMPDIR": str(tmp_path / "tmpdir")}
    assert choose_runtime_dir(env=env, uid=4242) == "/tmp/highlander-4242"


def test_choose_runtime_dir_without_run_user_dir_uses_tmp() -> None:
    assert not os.path.lexists("/run/user/4242")
    got = choose_runtime_dir(env={}, uid=4242)
    assert got == "/tmp/highlander-4242"
    assert not os.path.lexists("/run/user/4242")  # choosing creates nothing


def test_choose_runtime_dir_default_uid_is_ours() -> None:
    assert choose_runtime_dir(env={}) == choose_runtime_dir(env={}, uid=os.geteuid())


def test_choose_runtime_dir_ignores_a_run_user_dir_even_when_it_is_ours(run_user) -> None:
    """/run/user/<uid> comes and goes with login sessions: using it would move the rendezvous."""
    path = run_user(4243)
    assert os.lstat(path).st_uid == 4243
    assert choose_runtime_dir(env={}, uid=4243) == "/tmp/highlander-4243"
    assert not os.path.lexists(os.path.join(path, "highlander"))


# --------------------------------------------------------------------------- ensure_runtime_dir


@pytest.mark.parametrize("umask", [0o000, 0o077, 0o022, 0o277, 0o777], ids=oct)
def test_ensure_runtime_dir_creates_dir_0700_under_any_umask(tmp_path: Path, umask: int) -> None:
    path = str(tmp_path / "parent" / "child" / "rt")
    old = os.umask(umask)
    try:
        got = ensure_runtime_dir(path)
    finally:
        os.umask(old)
    assert got == path
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()


@pytest.mark.parametrize("umask", [0o000, 0o077], ids=oct)
def test_ensure_runtime_dir_creates_missing_parents_0700(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "parent" / "child" / "rt"
    old = os.umask(umask)
    try:
        ensure_runtime_dir(str(path))
    finally:
        os.umask(old)
    for created in (tmp_path / "parent", tmp_path / "parent" / "child"):
        assert os.path.isdir(created)
        # A group/world-writable parent lets another user rename the runtime
        # directory away and plant a look-alike between the check and its use.
        assert _mode(created) == 0o700, f"{created} created with mode {_mode(created):04o}"


def test_ensure_runtime_dir_accepts_existing_private_dir(tmp_path: Path) -> None:
    path = tmp_path / "rt"
    path.mkdir()
    os.chmod(path, 0o700)
    marker = path / "keep"
    marker.write_text("x")
    assert ensure_runtime_dir(str(path)) == str(path)
    assert _mode(path) == 0o700
    assert marker.read_text() == "x"  # an existing directory is used as is


def test_ensure_runtime_dir_is_idempotent(tmp_path: Path) -> None:
    path = str(tmp_path / "rt")
    assert ensure_runtime_dir(path) == path
    assert ensure_runtime_dir(path) == path
    assert _mode(path) == 0o700


def _assert_refused(path: str, *fragments: str) -> str:
    with pytest.raises(UnsafeRuntimeDirError) as info:
        ensure_runtime_dir(path)
    message = str(info.value)
    assert path in message
    assert RUNTIME_VAR in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_ensure_runtime_dir_refuses_symlink_to_good_dir(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    os.chmod(good, 0o700)
    link = tmp_path / "rt"
    link.symlink_to(good, target_is_directory=True)
    _assert_refused(str(link), "symlink", f"rm {link}")
    assert os.path.islink(link)
    assert _mode(good) == 0o700


def test_ensure_runtime_dir_refuses_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "rt"
    target = tmp_path / "planted"
    link.symlink_to(target)
    _assert_refused(str(link), "symlink")
    assert not os.path.lexists(target)  # nothing created through the link


def test_ensure_runtime_dir_refuses_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "rt"
    path.write_text("")
    os.chmod(path, 0o700)
    _assert_refused(str(path), "not a directory", "remove it")
    assert path.is_file()


def test_ensure_runtime_dir_refuses_dir_owned_by_another_uid(tmp_path: Path) -> None:
    path = tmp_path / "rt"
    path.mkdir()
    os.chmod(path, 0o700)
    os.chown(path, FOREIGN_UID, -1)
    assert os.lstat(path).st_uid == FOREIGN_UID
    _assert_refused(
        str(path), f"owned by uid {FOREIGN_UID}", f"(uid {os.geteuid()})", "remove it as its owner"
    )
    assert os.lstat(path).st_uid == FOREIGN_UID


@pytest.mark.parametrize("mode", [0o755, 0o710, 0o701, 0o750, 0o702, 0o720, 0o777], ids=oct)
def test_ensure_runtime_dir_refuses_group_or_other_bits(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "rt"
    path.mkdir()
    os.chmod(path, mode)
    assert _mode(path) == mode
    _assert_refused(str(path), f"mode {mode:04o}", f"chmod 700 {path}")
    assert _mode(path) == mode  # refused, not silently repaired


def test_ensure_runtime_dir_unreachable_path_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    path = str(blocker / "rt")
    message = _assert_refused(path, "cannot create the runtime directory")
    assert "Not a directory" in message


# --------------------------------------------------------------------------- project_paths
#
# A listener binds a private name ``.<base>.<tag>`` (tag: PRIVATE_TAG_CHARS
# characters) and renames it to ``<base>.sock``; both must fit ``sun_path``.
# The private name is the longer one, so it decides which base is used.

ROOT_A = "/srv/project-a"
ROOT_B = "/srv/project-b"
TAG = "t" * PRIVATE_TAG_CHARS
SHORT_BASE = 16  # "h" + 15 hex


def _private_extra(base_len: int) -> int:
    """Bytes the runtime dir is extended by for the longest path bound with a base."""
    return len("/.") + base_len + len(".") + PRIVATE_TAG_CHARS


def _longest(paths: ProjectPaths) -> int:
    return max(len(os.fsencode(paths.socket)), len(os.fsencode(paths.private_socket(TAG))))


def test_sun_path_limits() -> None:
    assert sun_path_limit("linux") == 107
    assert sun_path_limit("darwin") == 103
    assert sun_path_limit("freebsd") == 103  # unknown: the smallest known
    assert sun_path_limit() == sun_path_limit("linux")  # this machine


def test_project_paths_regular_names() -> None:
    runtime_dir = "/run/user/1000/highlander"
    paths = project_paths(runtime_dir, "my-server", ROOT_A, limit=107)
    digest = project_key(ROOT_A).hex()[:16]
    assert re.fullmatch(r"my-server-[0-9a-f]{16}", paths.base)
    assert paths.base == f"my-server-{digest}"
    assert paths.runtime_dir == runtime_dir
    assert paths.socket == f"{runtime_dir}/my-server-{digest}.sock"
    assert paths.lock == f"{runtime_dir}/my-server-{digest}.lock"
    assert paths.state == f"{runtime_dir}/my-server-{digest}.state"
    assert paths.events == f"{runtime_dir}/my-server-{digest}.events.jsonl"
    assert paths.private_socket(TAG) == f"{runtime_dir}/.my-server-{digest}.{TAG}"


def test_project_paths_default_limit_is_this_platform() -> None:
    long_dir = _dir_of_len(sun_path_limit() - _private_extra(SHORT_BASE))
    assert project_paths(long_dir, "app", ROOT_A) == project_paths(
        long_dir, "app", ROOT_A, limit=sun_path_limit()
    )
    assert project_paths(long_dir, "app", ROOT_A).base.startswith("h")


def test_project_paths_name_an_unusual_app_by_its_stem() -> None:
    paths = project_paths("/rt", "my server/v2", ROOT_A, limit=107)
    assert paths.base == f"{app_stem('my server/v2')}-{project_key(ROOT_A).hex()[:16]}"
    assert paths.base.startswith("my_server_v2~")
    assert os.path.dirname(paths.socket) == "/rt"


def test_project_paths_differ_between_apps_and_projects() -> None:
    combos = [(app, root) for app in ("alpha", "beta") for root in (ROOT_A, ROOT_B)]
    all_paths = [project_paths("/rt", app, root, limit=107) for app, root in combos]
    for attr in ("base", "socket", "lock", "state", "events"):
        values = [getattr(p, attr) for p in all_paths]
        assert len(set(values)) == len(values), attr
    privates = {p.private_socket(TAG) for p in all_paths}
    assert len(privates) == len(all_paths)


@pytest.mark.parametrize("limit", [107, 103])
def test_project_paths_regular_name_exactly_at_limit(limit: int) -> None:
    app = "my-server"
    runtime_dir = _dir_of_len(limit - _private_extra(len(app) + 17))
    paths = project_paths(runtime_dir, app, ROOT_A, limit=limit)
    assert paths.base.startswith(f"{app}-")
    assert _longest(paths) == limit
    one_longer = project_paths(runtime_dir + "x", app, ROOT_A, limit=limit)
    assert one_longer.base.startswith("h")
    assert _longest(one_longer) <= limit


@pytest.mark.parametrize("limit", [107, 103])
@pytest.mark.parametrize("slack", [0, 5])
def test_project_paths_short_name_when_regular_does_not_fit(limit: int, slack: int) -> None:
    runtime_dir = _dir_of_len(limit - _private_extra(SHORT_BASE) - slack)
    cases = [
        ("alpha-server", ROOT_A),
        ("beta-server", ROOT_A),
        ("alpha-server", ROOT_B),
        ("my-server", ROOT_A),
    ]
    bases = set()
    for app, root in cases:
        regular_private = f"{runtime_dir}/.{app}-{project_key(root).hex()[:16]}.{TAG}"
        assert len(regular_private) > limit  # the premise: the regular names do not fit
        paths = project_paths(runtime_dir, app, root, limit=limit)
        assert re.fullmatch(r"h[0-9a-f]{15}", paths.base)
        assert len(os.fsencode(paths.socket)) <= limit
        assert _longest(paths) == limit - slack
        assert paths.socket == f"{runtime_dir}/{paths.base}.sock"
        assert paths.lock == f"{runtime_dir}/{paths.base}.lock"
        assert paths.state == f"{runtime_dir}/{paths.base}.state"
        assert paths.events == f"{runtime_dir}/{paths.base}.events.jsonl"
        assert project_paths(runtime_dir, app, root, limit=limit) == paths  # deterministic
        bases.add(paths.base)
    assert len(bases) == len(cases)  # different apps and projects never share a socket


def test_project_paths_private_name_decides() -> None:
    # The public regular socket fits exactly, but its private name would not.
    app = "my-server"
    runtime_dir = _dir_of_len(107 - len("/") - (len(app) + 17) - len(".sock"))
    regular = f"{runtime_dir}/{app}-{project_key(ROOT_A).hex()[:16]}.sock"
    assert len(regular) == 107
    paths = project_paths(runtime_dir, app, ROOT_A, limit=107)
    assert paths.base.startswith("h")
    assert _longest(paths) <= 107


@pytest.mark.parametrize("limit", [107, 103])
def test_project_paths_too_long_even_for_short_name(limit: int) -> None:
    runtime_dir = _dir_of_len(limit - _private_extra(SHORT_BASE) + 1)
    with pytest.raises(SocketPathTooLongError) as info:
        project_paths(runtime_dir, "app", ROOT_A, limit=limit)
    message = str(info.value)
    assert f"allows {limit}" in message
    assert f"would be {limit + 1} bytes" in message
    assert RUNTIME_VAR in message
    assert runtime_dir in message


def test_project_paths_limit_counts_bytes_not_characters() -> None:
    # 40 characters but 79 bytes of UTF-8: the regular names fit the limit
    # counted in characters, not in bytes; the short ones fit in bytes.
    runtime_dir = "/" + "\u00e9" * 39
    regular = f"{runtime_dir}/.app-{project_key(ROOT_A).hex()[:16]}.{TAG}"
    assert len(regular) <= 107 < len(os.fsencode(regular))  # the premise
    paths = project_paths(runtime_dir, "app", ROOT_A, limit=107)
    assert paths.base.startswith("h")
    assert _longest(paths) <= 107


@pytest.mark.parametrize("kind", ["regular", "short"])
def test_sockets_bind_at_exactly_the_linux_limit(tmp_path: Path, kind: str) -> None:
    limit = sun_path_limit("linux")
    app = "bind-test" if kind == "regular" else "a-long-application-name-for-short"
    base_len = len(app) + 17 if kind == "regular" else SHORT_BASE
    pad = limit - len(os.fsencode(str(tmp_path))) - len("/") - _private_extra(base_len)
    assert pad >= 1, "tmp_path too long for this test"
    runtime_dir = ensure_runtime_dir(str(tmp_path / ("p" * pad)))

    paths = project_paths(runtime_dir, app, ROOT_A, limit=limit)
    assert paths.base.startswith("h") == (kind == "short")
    private = paths.private_socket(TAG)
    assert len(os.fsencode(private)) == limit == 107
    assert len(os.fsencode(paths.socket)) < limit

    # The kernel takes the longest name: bind privately, rename into place, connect.
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client,
    ):
        server.bind(private)
        assert server.getsockname() == private
        assert stat.S_ISSOCK(os.lstat(private).st_mode)
        server.listen(1)
        os.rename(private, paths.socket)
        client.connect(paths.socket)
        conn, _ = server.accept()
        conn.close()
    os.unlink(paths.socket)

    too_long = private + "x"
    assert len(os.fsencode(too_long)) == 108
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, pytest.raises(OSError):
        sock.bind(too_long)
    assert not os.path.lexists(too_long)
    assert os.listdir(runtime_dir) == []
