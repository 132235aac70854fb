"""The derived key kept in the runtime directory (highlander._host.key_cache), with real files.

A cached key is used only when its tag checks out for this token and this
project, from our own private regular file; anything else (another token,
a torn or tampered file, a symlink, a FIFO, another owner's file, a file
others may read) is ignored and the key derived again.  Storing never
raises: a cache that cannot be written costs a derivation, nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from highlander._commands.inspect import look
from highlander._core.signing import derive_key
from highlander._host import key_cache
from highlander._host.rendezvous import ensure_runtime_dir
from highlander._host.settings import Settings

TOKEN = b"k" * 40
PROJECT = hashlib.sha256(b"/some/project").digest()
KEY = derive_key(TOKEN, PROJECT)
FOREIGN_UID = 12345
PROCESS_TIMEOUT = 60  # seconds; catches hangs only


@pytest.fixture
def cache(tmp_path: Path) -> str:
    return key_cache.cache_path(ensure_runtime_dir(str(tmp_path / "rt")), "app-0123456789abcdef")


def _tagged(key: bytes, token: bytes = TOKEN, project: bytes = PROJECT) -> bytes:
    """A cache file's bytes, computed independently of the module."""
    return hmac.digest(token, key_cache.TAG_LABEL + project + key, "sha256") + key


def test_a_stored_key_is_loaded_for_the_same_token_and_project(cache: str) -> None:
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    assert key_cache.load(cache, TOKEN, PROJECT) == KEY
    st = os.stat(cache)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert Path(cache).read_bytes() == _tagged(KEY)


def test_another_token_or_project_finds_nothing(cache: str) -> None:
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    assert key_cache.load(cache, b"another token, as long", PROJECT) is None
    assert key_cache.load(cache, TOKEN, hashlib.sha256(b"/other").digest()) is None


def test_nothing_stored_finds_nothing(cache: str) -> None:
    assert key_cache.load(cache, TOKEN, PROJECT) is None


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[:40], id="torn"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: data + b"x", id="too-long"),
        pytest.param(lambda data: data[:-1] + bytes([data[-1] ^ 1]), id="key-bit-flipped"),
        pytest.param(lambda data: bytes([data[0] ^ 1]) + data[1:], id="tag-bit-flipped"),
    ],
)
def test_a_damaged_file_is_not_used(cache: str, damage: object) -> None:
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    assert callable(damage)
    Path(cache).write_bytes(damage(Path(cache).read_bytes()))
    assert key_cache.load(cache, TOKEN, PROJECT) is None


def test_a_symlink_fifo_or_foreign_file_is_not_used(cache: str, tmp_path: Path) -> None:
    elsewhere = tmp_path / "planted"
    elsewhere.write_bytes(_tagged(KEY))
    os.symlink(elsewhere, cache)
    assert key_cache.load(cache, TOKEN, PROJECT) is None
    os.unlink(cache)
    os.mkfifo(cache, 0o600)
    assert key_cache.load(cache, TOKEN, PROJECT) is None  # and did not hang on the open
    os.unlink(cache)
    Path(cache).write_bytes(_tagged(KEY))
    os.chmod(cache, 0o600)
    os.chown(cache, FOREIGN_UID, FOREIGN_UID)
    assert key_cache.load(cache, TOKEN, PROJECT) is None


def test_a_file_others_may_read_is_not_used(cache: str) -> None:
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    os.chmod(cache, 0o644)
    assert key_cache.load(cache, TOKEN, PROJECT) is None


def test_storing_replaces_what_is_in_the_way_and_never_raises(cache: str) -> None:
    os.mkfifo(cache, 0o600)
    key_cache.store(cache, TOKEN, PROJECT, KEY)  # rename replaces the FIFO, never opens it
    assert key_cache.load(cache, TOKEN, PROJECT) == KEY
    os.unlink(cache)
    os.mkdir(cache)  # a directory cannot be replaced: the key is simply not kept
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    assert os.path.isdir(cache)
    assert [n for n in os.listdir(os.path.dirname(cache)) if n.endswith(".tmp")] == []


def test_storing_into_a_vanished_directory_does_not_raise(tmp_path: Path) -> None:
    gone = key_cache.cache_path(str(tmp_path / "never-made"), "app-0123456789abcdef")
    key_cache.store(gone, TOKEN, PROJECT, KEY)
    assert key_cache.load(gone, TOKEN, PROJECT) is None


@pytest.mark.skipif(sys.platform != "linux", reason="a full filesystem is made with a Linux tmpfs")
def test_storing_on_a_full_filesystem_does_not_raise(tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir(mode=0o700)
    mount = ["mount", "-t", "tmpfs", "-o", "size=4k,mode=0700", "tmpfs", str(full)]
    done = subprocess.run(mount, capture_output=True, timeout=PROCESS_TIMEOUT, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        with contextlib.suppress(OSError), open(full / "filler", "wb", buffering=0) as out:
            while out.write(b"x" * 4096):
                pass
        path = key_cache.cache_path(str(full), "app-0123456789abcdef")
        key_cache.store(path, TOKEN, PROJECT, KEY)
        assert key_cache.load(path, TOKEN, PROJECT) is None
        assert sorted(os.listdir(full)) == ["filler"]  # no staged file left behind
    finally:
        subprocess.run(["umount", "-l", str(full)], timeout=PROCESS_TIMEOUT, check=False)


def _settings(tmp_path: Path, token: str) -> Settings:
    return Settings.resolve(
        app="cache-app",
        project=str(tmp_path),
        mode=None,
        token=token,
        timeouts=None,
        runtime_dir=str(tmp_path / "rt"),
        env={},
    )


def test_settings_derive_once_then_read_the_cache(tmp_path: Path) -> None:
    token = "s" * 40
    first = _settings(tmp_path, token)
    path = key_cache.cache_path(first.paths.runtime_dir, first.paths.base)
    key = first.key(keep=True)  # a newcomer's
    assert key == derive_key(token.encode(), first.project_key())
    assert key_cache.load(path, token.encode(), first.project_key()) == key
    # A cache entry with a valid tag is what the next process uses, as it is:
    planted = os.urandom(32)
    Path(path).write_bytes(_tagged(planted, token.encode(), first.project_key()))
    assert _settings(tmp_path, token).key() == planted
    # and one written for another token is derived over and replaced.
    other = "o" * 40
    assert _settings(tmp_path, other).key(keep=True) == derive_key(
        other.encode(), first.project_key()
    )
    assert key_cache.load(path, other.encode(), first.project_key()) is not None


def test_another_user_cannot_read_the_cached_key(cache: str) -> None:
    key_cache.store(cache, TOKEN, PROJECT, KEY)
    probe = (
        "import sys\n"
        "try:\n    open(sys.argv[1], 'rb').read()\n"
        "except PermissionError:\n    print('denied')\n"
        "else:\n    print('read')\n"
    )
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) runs the probe as another uid"
    ids = [f"--reuid={FOREIGN_UID}", f"--regid={FOREIGN_UID}", "--clear-groups"]
    done = subprocess.run(
        [setpriv, *ids, sys.executable, "-I", "-c", probe, cache],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=PROCESS_TIMEOUT,
        check=False,
    )
    assert done.stdout == "denied\n", done


def test_a_holder_or_a_read_only_command_reads_the_cache_but_never_writes_it(
    tmp_path: Path,
) -> None:
    token = "r" * 40
    holder = _settings(tmp_path, token)
    path = key_cache.cache_path(holder.paths.runtime_dir, holder.paths.base)
    assert holder.key() == derive_key(token.encode(), holder.project_key())  # a holder's call
    assert not os.path.lexists(path)
    env = {"HIGHLANDER_TOKEN": token}
    looker = look(
        app="cache-app", project=str(tmp_path), runtime_dir=holder.paths.runtime_dir, env=env
    )
    assert looker.paths == holder.paths  # what highlander status builds, for the same project
    looker.key()
    assert not os.path.lexists(path)
    planted = os.urandom(32)
    Path(path).write_bytes(_tagged(planted, token.encode(), holder.project_key()))
    os.chmod(path, 0o600)
    assert _settings(tmp_path, token).key() == planted
