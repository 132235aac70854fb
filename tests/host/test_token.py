"""Tests for highlander._host.token with real files, modes, owners, processes and uids.

We run as root: files are chowned to other uids for real, and one test runs
a child process as another uid (via ``setpriv``) to show that the 0700
runtime directory and the 0600 secret file keep it out.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from highlander._core.errors import UnsafeSecretError
from highlander._host import log as _log
from highlander._host.rendezvous import ensure_runtime_dir
from highlander._host.token import (
    MIN_TOKEN_CHARS,
    SECRET_FILE,
    TOKEN_VAR,
    Token,
    load_or_create_secret,
    resolve_token,
)

FOREIGN_UID = 12345
GOOD_TOKEN = "t" * 40
PROCESS_TIMEOUT = 60  # seconds; catches hangs only, nothing asserts on time


def _read(capfd: pytest.CaptureFixture[str]) -> pytest.CaptureResult[str]:
    """Captured (out, err) once every queued log line has been written."""
    _log.flush()
    return capfd.readouterr()


@pytest.fixture(autouse=True)
def _fresh_warnings():
    """Make every test see the one-time warnings as not yet given."""
    _log._warned.clear()
    yield
    _log._warned.clear()


@pytest.fixture(autouse=True)
def _close_leaked_fds(tmp_path: Path):
    """Close descriptors left open on this test's files (a library leak must not outlive it)."""
    before = _open_fds()
    yield
    for fd in _open_fds() - before:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path)):
                os.close(int(fd))


@pytest.fixture
def runtime_dir(tmp_path: Path) -> str:
    return ensure_runtime_dir(str(tmp_path / "rt"))


def _secret_path(runtime_dir: str) -> str:
    return os.path.join(runtime_dir, SECRET_FILE)


def _write_secret(path: str, content: bytes = b"s" * 64 + b"\n", mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    os.chmod(path, mode)


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    """Kill (by pid, via the Popen object) whatever still runs, reap it, close its pipes."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=PROCESS_TIMEOUT)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def _open_fds() -> set[str]:
    # Drop the descriptor listdir itself used (closed by the time we check).
    return {fd for fd in os.listdir("/proc/self/fd") if os.path.lexists(f"/proc/self/fd/{fd}")}


# --------------------------------------------------------------------------- resolve_token


def test_explicit_str_beats_env(runtime_dir: str, capfd: pytest.CaptureFixture[str]) -> None:
    token = resolve_token(GOOD_TOKEN, runtime_dir=runtime_dir, env={TOKEN_VAR: "e" * 40})
    assert token.secret == GOOD_TOKEN.encode()
    assert token.source == "token= argument"
    assert os.listdir(runtime_dir) == []  # no secret file without need
    assert _read(capfd) == ("", "")


def test_explicit_bytes_beats_env(runtime_dir: str) -> None:
    secret = bytes(range(200, 240))
    token = resolve_token(secret, runtime_dir=runtime_dir, env={TOKEN_VAR: "e" * 40})
    assert token.secret == secret
    assert token.source == "token= argument"


def test_explicit_non_ascii_str_is_utf8(runtime_dir: str) -> None:
    token = resolve_token("\u00e9" * 20, runtime_dir=runtime_dir, env={})
    assert token.secret == ("\u00e9" * 20).encode("utf-8")


def test_env_token_is_stripped(runtime_dir: str, capfd: pytest.CaptureFixture[str]) -> None:
    token = resolve_token(runtime_dir=runtime_dir, env={TOKEN_VAR: f"  \t{GOOD_TOKEN}\n"})
    assert token.secret == GOOD_TOKEN.encode()
    assert token.source == TOKEN_VAR
    assert os.listdir(runtime_dir) == []
    assert _read(capfd) == ("", "")


@pytest.mark.parametrize("explicit", ["", b""])
def test_empty_explicit_falls_back_to_env(runtime_dir: str, explicit: str | bytes) -> None:
    token = resolve_token(explicit, runtime_dir=runtime_dir, env={TOKEN_VAR: GOOD_TOKEN})
    assert token.secret == GOOD_TOKEN.encode()
    assert token.source == TOKEN_VAR


@pytest.mark.parametrize("value", ["", " ", "\t\n  \r\n"])
def test_empty_or_blank_env_counts_as_absent(runtime_dir: str, value: str) -> None:
    token = resolve_token(runtime_dir=runtime_dir, env={TOKEN_VAR: value})
    path = _secret_path(runtime_dir)
    assert token.source == f"secret file {path}"
    assert os.path.isfile(path)
    assert token.secret == load_or_create_secret(runtime_dir)
    assert token.secret.strip() != b""


def test_unrelated_env_is_ignored(runtime_dir: str) -> None:
    env = {"TOKEN": GOOD_TOKEN, "HIGHLANDER_TOKEN_FILE": "/x", "highlander_token": GOOD_TOKEN}
    token = resolve_token(runtime_dir=runtime_dir, env=env)
    assert token.source.startswith("secret file ")


def test_repr_does_not_reveal_the_secret(runtime_dir: str) -> None:
    explicit = resolve_token("sup3r-s3cret-value-xyz", runtime_dir=runtime_dir, env={})
    from_file = resolve_token(runtime_dir=runtime_dir, env={})
    for token in (explicit, from_file):
        for text in (repr(token), str(token), f"{token}", f"{token!r}"):
            assert token.secret.decode() not in text
            assert repr(token.secret) not in text
            assert token.source in text
            assert f"<{len(token.secret)} bytes>" in text
    assert repr(Token(b"abcdefgh" * 4, "x")) == "Token(source='x', secret=<32 bytes>)"


# --------------------------------------------------------------------------- the secret file


def test_secret_file_is_created_private(runtime_dir: str) -> None:
    token = resolve_token(runtime_dir=runtime_dir, env={})
    path = _secret_path(runtime_dir)
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_uid == os.geteuid()
    assert st.st_nlink == 1  # the temporary link is gone
    content = Path(path).read_bytes()
    assert len(content.strip()) >= 32
    assert token.secret == content.strip()
    assert os.listdir(runtime_dir) == [SECRET_FILE]


def test_secret_file_is_0600_even_under_umask_0(runtime_dir: str) -> None:
    old = os.umask(0)
    try:
        load_or_create_secret(runtime_dir)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.lstat(_secret_path(runtime_dir)).st_mode) == 0o600


def test_second_call_returns_the_same_secret(runtime_dir: str) -> None:
    first = load_or_create_secret(runtime_dir)
    second = load_or_create_secret(runtime_dir)
    via_resolve = resolve_token(runtime_dir=runtime_dir, env={}).secret
    assert first == second == via_resolve
    assert os.listdir(runtime_dir) == [SECRET_FILE]


def test_fresh_directories_get_different_secrets(tmp_path: Path) -> None:
    one = load_or_create_secret(ensure_runtime_dir(str(tmp_path / "one")))
    two = load_or_create_secret(ensure_runtime_dir(str(tmp_path / "two")))
    assert one != two


def test_existing_good_secret_file_is_used_as_is(runtime_dir: str) -> None:
    path = _secret_path(runtime_dir)
    _write_secret(path, b"  my-own-secret-of-32-characters!!  \n")
    assert load_or_create_secret(runtime_dir) == b"my-own-secret-of-32-characters!!"


CHILD = """
import sys
from highlander._host.token import load_or_create_secret
print("ready", flush=True)
sys.stdin.readline()
print(load_or_create_secret(sys.argv[1]).hex(), flush=True)
"""


def test_concurrent_first_calls_agree(runtime_dir: str) -> None:
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(8):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", CHILD, runtime_dir],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        # Barrier: release them together once all have imported Highlander.
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [proc.communicate(timeout=PROCESS_TIMEOUT) for proc in procs]
    finally:
        _stop(procs)

    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert err == ""
    secrets = {out.strip() for out, _err in results}
    assert len(secrets) == 1
    (secret_hex,) = secrets
    assert bytes.fromhex(secret_hex) == load_or_create_secret(runtime_dir)
    assert len(bytes.fromhex(secret_hex)) >= 32
    assert glob.glob(os.path.join(runtime_dir, "*.tmp")) == []
    assert os.listdir(runtime_dir) == [SECRET_FILE]
    assert stat.S_IMODE(os.lstat(_secret_path(runtime_dir)).st_mode) == 0o600


# --------------------------------------------------------------------------- warnings


def test_no_token_warns_once_on_stderr(runtime_dir: str, capfd: pytest.CaptureFixture[str]) -> None:
    first = resolve_token(runtime_dir=runtime_dir, env={})
    captured = _read(capfd)
    assert captured.out == ""
    assert TOKEN_VAR in captured.err
    assert _secret_path(runtime_dir) in captured.err
    assert "warning" in captured.err
    assert first.secret.decode() not in captured.err

    second = resolve_token(runtime_dir=runtime_dir, env={TOKEN_VAR: "   "})
    assert _read(capfd) == ("", "")
    assert second.secret == first.secret


def test_short_explicit_token_warns_once_and_works(
    runtime_dir: str, capfd: pytest.CaptureFixture[str]
) -> None:
    token = resolve_token("zq9x7", runtime_dir=runtime_dir, env={})
    assert token.secret == b"zq9x7"
    assert token.source == "token= argument"
    captured = _read(capfd)
    assert captured.out == ""
    assert "token= argument" in captured.err
    assert "5 bytes" in captured.err
    assert "zq9x7" not in captured.err  # the token itself is not logged
    assert os.listdir(runtime_dir) == []

    again = resolve_token("tiny", runtime_dir=runtime_dir, env={})
    assert again.secret == b"tiny"
    assert _read(capfd) == ("", "")


def test_short_env_token_warning_names_the_variable(
    runtime_dir: str, capfd: pytest.CaptureFixture[str]
) -> None:
    token = resolve_token(runtime_dir=runtime_dir, env={TOKEN_VAR: " abc "})
    assert token.secret == b"abc"
    captured = _read(capfd)
    assert captured.out == ""
    assert f"{TOKEN_VAR} is only 3 bytes" in captured.err


def test_token_of_minimum_length_does_not_warn(
    runtime_dir: str, capfd: pytest.CaptureFixture[str]
) -> None:
    resolve_token("m" * MIN_TOKEN_CHARS, runtime_dir=runtime_dir, env={})
    assert _read(capfd) == ("", "")
    resolve_token("m" * (MIN_TOKEN_CHARS - 1), runtime_dir=runtime_dir, env={})
    assert f"{MIN_TOKEN_CHARS - 1} bytes" in _read(capfd).err


# --------------------------------------------------------------------------- unsafe secret files


def _assert_unsafe(runtime_dir: str, *fragments: str) -> None:
    for call in (
        lambda: load_or_create_secret(runtime_dir),
        lambda: resolve_token(runtime_dir=runtime_dir, env={}),
    ):
        with pytest.raises(UnsafeSecretError) as info:
            call()
        message = str(info.value)
        assert _secret_path(runtime_dir) in message
        assert "remove it" in message
        assert TOKEN_VAR in message
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606], ids=oct)
def test_secret_readable_by_others_is_refused(runtime_dir: str, mode: int) -> None:
    path = _secret_path(runtime_dir)
    _write_secret(path, mode=mode)
    assert stat.S_IMODE(os.lstat(path).st_mode) == mode
    _assert_unsafe(runtime_dir, f"mode {mode:04o}")
    assert stat.S_IMODE(os.lstat(path).st_mode) == mode  # left alone
    assert Path(path).read_bytes() == b"s" * 64 + b"\n"


def test_secret_owned_by_another_uid_is_refused(runtime_dir: str) -> None:
    path = _secret_path(runtime_dir)
    _write_secret(path)
    os.chown(path, FOREIGN_UID, -1)
    assert os.lstat(path).st_uid == FOREIGN_UID
    _assert_unsafe(runtime_dir, f"owned by uid {FOREIGN_UID}")


def test_secret_symlink_to_good_file_is_refused(runtime_dir: str, tmp_path: Path) -> None:
    target = str(tmp_path / "elsewhere")
    _write_secret(target)
    os.symlink(target, _secret_path(runtime_dir))
    _assert_unsafe(runtime_dir, "cannot open")
    assert os.path.islink(_secret_path(runtime_dir))
    assert Path(target).read_bytes() == b"s" * 64 + b"\n"


def test_dangling_secret_symlink_is_refused_and_not_followed(
    runtime_dir: str, tmp_path: Path
) -> None:
    target = tmp_path / "planted"
    os.symlink(target, _secret_path(runtime_dir))
    _assert_unsafe(runtime_dir, "cannot open")
    assert not os.path.lexists(target)  # no secret written through the link


def test_secret_directory_is_refused(runtime_dir: str) -> None:
    os.mkdir(_secret_path(runtime_dir), 0o700)
    _assert_unsafe(runtime_dir, "not a regular file")


@pytest.mark.parametrize("content", [b"", b"\n", b"   \n", b"only-15-chars!!"])
def test_empty_or_truncated_secret_is_refused(runtime_dir: str, content: bytes) -> None:
    _write_secret(_secret_path(runtime_dir), content)
    _assert_unsafe(runtime_dir, "empty or truncated")
    assert Path(_secret_path(runtime_dir)).read_bytes() == content


def _make_unsafe(runtime_dir: str, kind: str, tmp_path: Path) -> None:
    path = _secret_path(runtime_dir)
    if kind == "mode-0644":
        _write_secret(path, mode=0o644)
    elif kind == "foreign-owner":
        _write_secret(path)
        os.chown(path, FOREIGN_UID, -1)
    elif kind == "symlink":
        _write_secret(str(tmp_path / "target"))
        os.symlink(tmp_path / "target", path)
    elif kind == "directory":
        os.mkdir(path, 0o700)
    elif kind == "empty":
        _write_secret(path, b"")


@pytest.mark.parametrize("kind", ["mode-0644", "foreign-owner", "symlink", "directory", "empty"])
def test_refusing_a_secret_file_leaks_no_descriptor(
    runtime_dir: str, tmp_path: Path, kind: str
) -> None:
    _make_unsafe(runtime_dir, kind, tmp_path)
    before = _open_fds()
    for _ in range(3):
        with pytest.raises((UnsafeSecretError, OSError)):
            load_or_create_secret(runtime_dir)
    leaked = _open_fds() - before
    assert leaked == set(), [os.readlink(f"/proc/self/fd/{fd}") for fd in sorted(leaked)]


CHILD_FIFO = """
import sys
from highlander._core.errors import UnsafeSecretError
from highlander._host.token import load_or_create_secret
try:
    load_or_create_secret(sys.argv[1])
except UnsafeSecretError as exc:
    print("refused:", exc)
"""


def test_secret_fifo_is_refused_without_hanging(runtime_dir: str) -> None:
    # A FIFO named "secret" must be refused like any non-regular file.  The
    # child gets a bound only so that a hang fails the test instead of the run.
    os.mkfifo(_secret_path(runtime_dir), 0o600)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD_FIFO, runtime_dir],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        out, err = "", "load_or_create_secret blocked opening the FIFO"
    finally:
        _stop([proc])
    assert "refused:" in out, err
    assert "not a regular file" in out


# --------------------------------------------------------------------------- another uid


PROBE = """
import os, sys
print("uid", os.getuid(), os.geteuid(), flush=True)
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        with open(path, "rb") as handle:
            print("READ", len(handle.read()))
    else:
        print("LIST", sorted(os.listdir(path)))
except PermissionError as exc:
    print("PermissionError", exc.errno)
    sys.exit(13)
"""


def _other_python() -> str:
    # The venv's interpreter may live under /root (0700): use a system one.
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        if os.path.exists(candidate):
            return candidate
    return os.path.realpath(sys.executable)


def _as_other_uid(op: str, path: str) -> subprocess.CompletedProcess[str]:
    args = [_other_python(), "-I", "-c", PROBE, op, path]
    setpriv = shutil.which("setpriv")
    kwargs: dict[str, object] = {}
    if setpriv:
        args = [
            setpriv,
            f"--reuid={FOREIGN_UID}",
            f"--regid={FOREIGN_UID}",
            "--clear-groups",
            *args,
        ]
    else:
        kwargs = {"user": FOREIGN_UID, "group": FOREIGN_UID, "extra_groups": []}
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        timeout=PROCESS_TIMEOUT,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    assert result.stdout.startswith(f"uid {FOREIGN_UID} {FOREIGN_UID}\n"), result
    return result


@pytest.fixture
def shared_base():
    """A directory other uids may traverse (pytest's basetemp is 0700 for root)."""
    base = tempfile.mkdtemp(prefix="highlander-uidtest-", dir="/tmp")
    try:
        os.chmod(base, 0o711)
        yield base
    finally:
        shutil.rmtree(base)


def test_other_uid_cannot_read_secret_in_private_runtime_dir(shared_base: str) -> None:
    runtime_dir = ensure_runtime_dir(os.path.join(shared_base, "rt"))
    load_or_create_secret(runtime_dir)
    path = _secret_path(runtime_dir)
    assert stat.S_IMODE(os.lstat(runtime_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600

    read = _as_other_uid("read", path)
    assert read.returncode == 13, read
    assert "PermissionError 13" in read.stdout
    assert "READ" not in read.stdout

    listing = _as_other_uid("list", runtime_dir)
    assert listing.returncode == 13, listing
    assert "PermissionError 13" in listing.stdout


def test_other_uid_is_kept_out_by_the_file_mode_alone(shared_base: str) -> None:
    runtime_dir = ensure_runtime_dir(os.path.join(shared_base, "rt"))
    secret = load_or_create_secret(runtime_dir)
    path = _secret_path(runtime_dir)
    os.chmod(runtime_dir, 0o711)  # traversable: only the 0600 file mode protects it

    read = _as_other_uid("read", path)
    assert read.returncode == 13, read
    assert "PermissionError 13" in read.stdout

    # Control: the same uid reads the file once its mode lets it, so the
    # refusals above come from the modes and not from some other obstacle.
    os.chmod(path, 0o644)
    control = _as_other_uid("read", path)
    assert control.returncode == 0, control
    assert f"READ {len(secret) + 1}" in control.stdout
    # ... and the library refuses such a readable file.
    with pytest.raises(UnsafeSecretError, match="mode 0644"):
        load_or_create_secret(runtime_dir)
