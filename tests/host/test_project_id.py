"""Tests for highlander._host.project_id: one project key on every host (issue #15).

Normalisation is table-driven.  Derivation runs on real repositories made
with the real ``git`` binary (init, remotes, a worktree, a submodule), and
git itself is the oracle for what a config file says.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from highlander._core.errors import ConfigurationError, ProjectIdError
from highlander._host.project_id import (
    ENV_VAR,
    FIX,
    MAX_BYTES,
    ProjectId,
    check_id,
    derive,
    normalise_remote,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")

SAME = [
    "git@github.com:Org/Repo.git",
    "ssh://git@github.com/Org/Repo",
    "https://github.com/Org/Repo.git/",
    "https://user:token@github.com/Org/Repo",
    "git://github.com/Org/Repo",
    "git+ssh://git@github.com/Org/Repo.git",
    "ssh://git@GitHub.COM:22/Org/Repo.git",
    "https://github.com:443/Org/Repo",
    "HTTPS://GITHUB.COM/Org/Repo",
    "GIT@GITHUB.COM:Org/Repo",
    "github.com:Org/Repo",
    "https://github.com//Org/./Repo//",
    "https://github.com/Org/Repo?private_token=abc#readme",
    "  https://github.com/Org/Repo\n",
]

#: Default ports are dropped, whatever the scheme.
DEFAULT_PORT = [
    "http://host:80/org/repo",
    "git://host:9418/org/repo",
    "git://host/org/repo",
    "ssh://git@host:22/org/repo.git",
    "https://host:443/org/repo",
]

#: Each a repository of its own (and none is host/org/repo).
DISTINCT = {
    "ssh://git@host:2222/org/repo.git": "host:2222/org/repo",
    "https://host:8443/org/repo": "host:8443/org/repo",
    "http://host:443/org/repo": "host:443/org/repo",
    # The scp form has no port: 2222 is the first directory of the path.
    "git@host:2222/org/repo.git": "host/2222/org/repo",
    "ssh://git@[::1]:2222/org/repo": "[::1]:2222/org/repo",
    "git@[::1]:org/repo": "[::1]/org/repo",
    "git@github.com:org/repo.git": "github.com/org/repo",
    "git@github.com:Org/Repo2.git": "github.com/Org/Repo2",
    "git@gitlab.com:Org/Repo.git": "gitlab.com/Org/Repo",
    "git@github.com:Org/Sub/Repo.git": "github.com/Org/Sub/Repo",
    "host:~alice/repo.git": "host/~alice/repo",
    "https://host/org/repo.git.git": "host/org/repo.git",
    "https://host/org/Repo": "host/org/Repo",
}

REFUSED = [
    "file:///srv/git/repo.git",
    "FILE://localhost/srv/git/repo.git",
    "/srv/git/repo.git",
    "../repo",
    "./repo",
    "repo",
    "~/repo.git",
    "./dir:with-colon/repo",
    "ext::ssh -p 22 host %S repo",
    "codecommit::us-east-1://repo",
    "hg://host/org/repo",
    "https://github.com/",
    "https://github.com/.git",
    "git@github.com:",
    "https://host:notaport/org/repo",
    "https://[::1/org/repo",
    "https://host/org/../other/repo",
    "",
]


@pytest.mark.parametrize("url", SAME)
def test_every_spelling_of_one_repository_converges(url: str) -> None:
    assert normalise_remote(url) == "github.com/Org/Repo"


@pytest.mark.parametrize(("url", "expected"), DISTINCT.items())
def test_ports_hosts_paths_and_case_are_kept_apart(url: str, expected: str) -> None:
    assert normalise_remote(url) == expected


@pytest.mark.parametrize("url", DEFAULT_PORT)
def test_a_default_port_is_dropped(url: str) -> None:
    assert normalise_remote(url) == "host/org/repo"


def test_different_repositories_differ_and_never_contain_the_separator() -> None:
    keys = [normalise_remote(url) for url in DISTINCT]
    assert len(set(keys)) == len(keys)
    assert "github.com/Org/Repo" not in keys
    assert "host/org/repo" not in keys
    assert all("//" not in key for key in [*keys, normalise_remote(SAME[0])])


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cr3t@github.com/Org/Repo",
        "https://s3cr3t@github.com/Org/Repo.git",
        "ssh://alice:s3cr3t@github.com:22/Org/Repo",
        "https://alice:s3cr3t@github.com/Org/Repo?s3cr3t",
    ],
)
def test_credentials_never_reach_the_key(url: str) -> None:
    key = normalise_remote(url)
    assert key == "github.com/Org/Repo"
    assert "s3cr3t" not in key
    assert "alice" not in key


@pytest.mark.parametrize("url", REFUSED)
def test_local_helper_and_malformed_remotes_are_refused(url: str) -> None:
    with pytest.raises(ProjectIdError) as caught:
        normalise_remote(url)
    assert FIX in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cr3t@github.com/",
        "https://alice:s3/cr?et#x@host:bad/org/repo",
        "ftp://alice:s3cr3t@host/org/repo",
        "https://alice:s3cr3t@host/a/../b",
        "https:/alice:s3cr3t@github.com/Org/Repo",
        "https:alice:s3cr3t@github.com/Org/Repo",
        "ssh:/alice:s3cr3t@github.com/Org/Repo",
    ],
)
def test_credentials_never_reach_a_refusal(url: str) -> None:
    with pytest.raises(ProjectIdError) as caught:
        normalise_remote(url)
    message = str(caught.value)
    assert all(secret not in message for secret in ("s3cr3t", "s3/cr", "cr?et", "et#x"))
    assert "***@" in message


def test_local_paths_say_why() -> None:
    with pytest.raises(ProjectIdError, match="local path"):
        normalise_remote("file:///srv/git/repo.git")
    assert issubclass(ProjectIdError, ConfigurationError)


# --- derivation on real repositories -----------------------------------------


def git(cwd: Path, *args: str) -> str:
    """Run the real git in ``cwd``, isolated from the machine's and the user's config."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def make_repo(path: Path, **remotes: str) -> Path:
    """A real repository at ``path`` with one commit and the given remotes."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    git(path, "commit", "-q", "--allow-empty", "-m", "start")
    for name, url in remotes.items():
        git(path, "remote", "add", name, url)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory no repository holds (checked, or the refusals would prove nothing)."""
    for parent in [tmp_path, *tmp_path.parents]:
        if (parent / ".git").exists():
            pytest.skip(f"{parent} is a git repository")
    return tmp_path


def test_the_top_of_a_repository_is_its_remote(outside: Path) -> None:
    repo = make_repo(outside / "checkout", origin="git@github.com:Org/Repo.git")
    assert derive(repo, None, {}) == ProjectId(key="github.com/Org/Repo", source="git")


def test_a_subdirectory_is_appended_after_the_separator(outside: Path) -> None:
    repo = make_repo(outside / "checkout", origin="git@github.com:Org/Repo.git")
    (repo / "sub" / "dir").mkdir(parents=True)
    assert derive(repo / "sub" / "dir", None, {}).key == "github.com/Org/Repo//sub/dir"
    assert derive(repo / "sub", None, {}).key == "github.com/Org/Repo//sub"


def test_two_hosts_with_different_paths_and_spellings_agree(outside: Path) -> None:
    one = make_repo(outside / "home" / "alice" / "src" / "r", origin="git@github.com:Org/Repo.git")
    two = make_repo(outside / "srv" / "build", origin="https://ci:tok@github.com/Org/Repo")
    (one / "pkg").mkdir()
    (two / "pkg").mkdir()
    assert derive(one / "pkg", None, {}) == derive(two / "pkg", None, {})
    assert derive(one, None, {}) != derive(one / "pkg", None, {})


def test_a_symlinked_spelling_of_the_project_is_the_same_project(outside: Path) -> None:
    repo = make_repo(outside / "checkout", origin="https://github.com/Org/Repo")
    (repo / "sub").mkdir()
    (outside / "link").symlink_to(repo / "sub")
    assert derive(outside / "link", None, {}).key == "github.com/Org/Repo//sub"


def test_a_worktree_reads_the_common_config(outside: Path) -> None:
    repo = make_repo(outside / "main", origin="git@github.com:Org/Repo.git")
    git(repo, "worktree", "add", "-q", str(outside / "wt"))
    (outside / "wt" / "pkg").mkdir()
    assert (outside / "wt" / ".git").is_file()
    assert derive(outside / "wt" / "pkg", None, {}).key == "github.com/Org/Repo//pkg"
    assert derive(outside / "wt", None, {}) == derive(repo, None, {})


def test_a_submodule_is_its_own_project(outside: Path) -> None:
    child = make_repo(outside / "upstream")
    repo = make_repo(outside / "main", origin="git@github.com:Org/Repo.git")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(child), "libs/c")
    sub = repo / "libs" / "c"
    git(sub, "remote", "set-url", "origin", "https://gitlab.example.com/Team/Child.git")
    (sub / "x").mkdir()
    assert (sub / ".git").is_file()
    assert derive(sub / "x", None, {}).key == "gitlab.example.com/Team/Child//x"
    assert derive(repo / "libs", None, {}).key == "github.com/Org/Repo//libs"


def test_the_only_remote_serves_when_there_is_no_origin(outside: Path) -> None:
    repo = make_repo(outside / "r", upstream="git@host.example:team/tool.git")
    assert derive(repo, None, {}).key == "host.example/team/tool"


def test_origin_wins_over_other_remotes(outside: Path) -> None:
    repo = make_repo(outside / "r", alpha="git@a.example:x/y", origin="git@b.example:x/y")
    assert derive(repo, None, {}).key == "b.example/x/y"


def test_the_first_url_of_a_remote_is_the_one_git_fetches(outside: Path) -> None:
    repo = make_repo(outside / "r", origin="https://one.example/x/y")
    git(repo, "config", "--add", "remote.origin.url", "https://two.example/x/y")
    assert git(repo, "remote", "get-url", "origin") == "https://one.example/x/y"
    assert derive(repo, None, {}).key == "one.example/x/y"


@pytest.mark.parametrize(
    ("name", "url", "expected"),
    [
        ("my.remote", "https://host/org/re;po#x", "host/org/re;po"),
        ('we"ird\\name', "git@host:org/repo", "host/org/repo"),
        ("origin", "https://host/org/a b  ", "host/org/a b"),
    ],
)
def test_values_git_quotes_or_escapes_read_back(
    outside: Path, name: str, url: str, expected: str
) -> None:
    repo = make_repo(outside / "r")
    git(repo, "config", f"remote.{name}.url", url)
    assert normalise_remote(git(repo, "config", "--get", f"remote.{name}.url")) == expected
    assert derive(repo, None, {}).key == expected


HAND_WRITTEN = [
    '[Remote "origin"]\n\tURL = git@host:org/repo.git ; a comment\n',
    "[remote.origin]\n\turl = git@host:org/repo.git # a comment\n",
    '[core]\n\tbare = false\n[remote "origin"]\n\turl = git@host:\\\norg/repo.git\n',
    '[remote "origin"] url = "git@host:org/repo.git"\n',
    '[remote "origin"]\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\turl=git@host:org/repo\n',
    # Beside another remote, so the name has to be read as git reads it.
    '[remote "other"]\n\turl = git@x:y/z\n[remote "or\\igin"]\n\turl = git@host:org/repo\n',
    '[remote "other"]\n\turl = git@x:y/z\n[remote.ORIGIN]\n\turl = git@host:org/repo\n',
]


@pytest.mark.parametrize("config", HAND_WRITTEN)
def test_hand_written_configs_read_as_git_reads_them(outside: Path, config: str) -> None:
    repo = make_repo(outside / "r")
    (repo / ".git" / "config").write_text(config)
    said = git(repo, "config", "--file", ".git/config", "--get", "remote.origin.url")
    assert derive(repo, None, {}).key == normalise_remote(said) == "host/org/repo"


def test_no_git_process_is_run(outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(outside / "r", origin="git@host:org/repo.git")
    monkeypatch.setenv("PATH", str(outside / "nowhere"))

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("derive ran a process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(os, "posix_spawn", refuse)
    assert derive(repo, None, {}).key == "host/org/repo"


# --- precedence ----------------------------------------------------------------


def test_argument_then_environment_then_git(outside: Path) -> None:
    repo = make_repo(outside / "r", origin="git@host:org/repo.git")
    env = {ENV_VAR: "from-env"}
    assert derive(repo, "from-arg", env) == ProjectId(key="from-arg", source="argument")
    assert derive(repo, None, env) == ProjectId(key="from-env", source="environment")
    assert derive(repo, None, {ENV_VAR: ""}) == ProjectId(key="host/org/repo", source="git")
    assert derive(repo, None, {"OTHER": "x"}).source == "git"


def test_an_argument_or_variable_needs_no_repository(outside: Path) -> None:
    assert derive(outside, "mine", {}).source == "argument"
    assert derive(outside, None, {ENV_VAR: "mine"}) == ProjectId(key="mine", source="environment")


# --- refusals ------------------------------------------------------------------


def refusal(project: Path, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ProjectIdError) as caught:
        derive(project, None, environ or {})
    message = str(caught.value)
    assert FIX in message
    return message


def test_no_repository_is_refused(outside: Path) -> None:
    (outside / "plain").mkdir()
    assert "no git repository holds" in refusal(outside / "plain")


def test_no_remote_is_refused(outside: Path) -> None:
    assert "no remote" in refusal(make_repo(outside / "r"))


def test_two_remotes_and_no_origin_are_refused(outside: Path) -> None:
    repo = make_repo(outside / "r", alpha="git@a.example:x/y", beta="git@b.example:x/y")
    assert "alpha, beta" in refusal(repo)


@pytest.mark.parametrize("url", ["/srv/git/repo.git", "file:///srv/git/repo.git", "../repo"])
def test_a_local_path_remote_is_refused(outside: Path, url: str) -> None:
    repo = make_repo(outside / "r", origin=url)
    message = refusal(repo)
    assert "local path" in message
    assert str(repo) in message


def test_a_credential_in_a_refused_remote_is_not_shown(outside: Path) -> None:
    repo = make_repo(outside / "r", origin="https://alice:s3cr3t@github.com/")
    assert "s3cr3t" not in refusal(repo)


def test_a_broken_gitfile_is_refused(outside: Path) -> None:
    (outside / "a").mkdir()
    (outside / "a" / ".git").write_text("not a gitfile\n")
    assert "gitdir:" in refusal(outside / "a")
    (outside / "b").mkdir()
    (outside / "b" / ".git").write_text("gitdir: ../missing\n")
    assert "not a directory" in refusal(outside / "b")


def test_a_derived_key_that_is_too_long_or_unprintable_is_refused(outside: Path) -> None:
    repo = make_repo(outside / "r", origin="git@host:org/repo.git")
    deep = repo.joinpath(*["d" * 100] * 6)
    deep.mkdir(parents=True)
    assert f"at most {MAX_BYTES}" in refusal(deep)
    odd = repo / "a\nb"
    odd.mkdir()
    assert "not printable" in refusal(odd)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "is empty"),
        (" mine", "whitespace"),
        ("mine ", "whitespace"),
        ("\u00a0mine", "not printable"),
        ("mi\x00ne", "not printable"),
        ("mi\nne", "not printable"),
        ("x" * (MAX_BYTES + 1), "bytes long"),
        ("\u00e9" * (MAX_BYTES // 2 + 1), "bytes long"),
    ],
)
def test_invalid_explicit_ids_are_refused(outside: Path, value: str, problem: str) -> None:
    with pytest.raises(ProjectIdError, match=problem) as caught:
        derive(outside, value, {})
    assert "project_id=" in str(caught.value)
    if value:  # an empty variable means unset; any other invalid one is refused
        with pytest.raises(ProjectIdError, match=problem) as caught:
            derive(outside, None, {ENV_VAR: value})
        assert ENV_VAR in str(caught.value)


@pytest.mark.parametrize("value", ["x" * MAX_BYTES, "\u00e9" * (MAX_BYTES // 2), "a b", "id/ü"])
def test_ids_at_the_bounds_are_accepted(value: str) -> None:
    assert check_id(value, "project_id=") == value
