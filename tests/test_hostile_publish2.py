"""`publish --to-git` runs git only in the repository it checked, reached through the descriptor it checked (issue 33).

Two ways git used to reach another repository than the one needlebench had checked:

* a folder holding a ``.git`` that git does not take as a repository (no ``HEAD``) beside a bare repository's files:
  needlebench checked the harmless ``.git/config``, git discovered the folder itself as a bare repository and ran
  the filter of its unchecked top-level ``config``;
* every git command ran as ``git -C PATH``: a path swapped for a link (to the attacker's repository) after the
  folder was created sent the later git commands there.

Each attack runs the `needlebench` command (a subprocess) in a sandbox HOME; a command the attacker planted would
write ``~/PWNED`` and append to ``~/notes.txt``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.sandbox import CLI, git, refused, run, snapshot

PWN = 'sh -c "touch \\"$HOME/PWNED\\"; echo PWNED >> \\"$HOME/notes.txt\\"; cat"'


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """`needlebench build atc_en --out DS`, once."""
    out = tmp_path_factory.mktemp("built") / "ds"
    result = subprocess.run([*CLI, "build", "atc_en", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return out


def _copy(built: Path, home: Path) -> Path:
    target = home / "work" / "ds"
    shutil.copytree(built, target)
    return target


def _users(home: Path) -> dict:
    """The user's own files (everything but the work folder, where the hostile things sit)."""
    return snapshot(home, skip=home / "work")


def _tag(repo: Path, tag: str = "v1.0.0") -> str:
    completed = subprocess.run(
        ["git", "--git-dir", str(repo / ".git"), "rev-parse", "-q", "--verify", f"{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return completed.stdout.strip()


def _evil_repo(path: Path) -> Path:
    """A work-tree repository whose filter (declared for every file) would run the attacker's command on checkout."""
    git("init", "-q", "-b", "main", str(path), cwd=path.parent)
    git("config", "filter.pwn.smudge", PWN, cwd=path)
    git("config", "filter.pwn.clean", "cat", cwd=path)
    (path / ".git" / "info").mkdir(exist_ok=True)
    (path / ".git" / "info" / "attributes").write_text("* filter=pwn\n")
    return path


# --- 1. the repository is the folder checked, never one git discovers beside it ------------------------------------


@pytest.mark.slow
def test_a_bare_repository_beside_an_invalid_dot_git_is_refused(built: Path, sandbox: Path) -> None:
    """The folder is a bare repository whose top-level config sets core.worktree=. and a smudge filter, plus a
    ``.git`` folder holding only a harmless config (no HEAD: git skips it). Refused in one line; no filter runs."""
    ds = _copy(built, sandbox)
    repo = sandbox / "work" / "rel"
    git("init", "-q", "--bare", str(repo), cwd=sandbox / "work")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    git("config", "--file", "config", "core.bare", "false", cwd=repo)
    git("config", "--file", "config", "core.worktree", ".", cwd=repo)
    git("config", "--file", "config", "filter.pwn.smudge", PWN, cwd=repo)
    git("config", "--file", "config", "filter.pwn.clean", "cat", cwd=repo)
    (repo / "info" / "attributes").write_text("* filter=pwn\n")
    before = _users(sandbox)
    refused(run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)), str(repo), ".git", "HEAD")
    assert not (sandbox / "PWNED").exists()
    assert _users(sandbox) == before


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dot-git-without-head", "bare-without-core-bare"])
def test_a_folder_git_would_not_take_as_checked_is_refused(built: Path, sandbox: Path, kind: str) -> None:
    """A ``.git`` git would skip (no HEAD) is not a repository; a bare repository whose config says core.bare =
    false would have git write the release's work tree into the repository folder itself."""
    ds = _copy(built, sandbox)
    repo = sandbox / "work" / "rel"
    if kind == "dot-git-without-head":
        git("init", "-q", "-b", "main", str(repo), cwd=sandbox / "work")
        (repo / ".git" / "HEAD").unlink()
        needle = "HEAD"
    else:
        git("init", "-q", "--bare", "-b", "main", str(repo), cwd=sandbox / "work")
        git("config", "--file", "config", "core.bare", "false", cwd=repo)
        needle = "core.bare"
    before = snapshot(sandbox)
    refused(run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)), str(repo), needle)
    assert snapshot(sandbox) == before
    assert not (repo / "README.md").exists() and not (repo / "data").exists()


# --- 2. a path swapped for a link after the folder was opened is never followed -----------------------------------

#: A `git` first on PATH that swaps the repository path for a link to the attacker's repository at needlebench's
#: `git init` (before it runs, or right after it): the moment the race of a second process aims at.
SHIM = """#!/bin/sh
swap() {
    if [ ! -e "$SWAP_DONE" ]; then
        : > "$SWAP_DONE"
        mv "$SWAP_FROM" "$SWAP_FROM.orig" && ln -s "$SWAP_TO" "$SWAP_FROM"
    fi
}
is_init=no
for arg in "$@"; do [ "$arg" = init ] && is_init=yes; done
[ "$is_init" = yes ] && [ "$SWAP_WHEN" = before ] && swap
"$REAL_GIT" "$@"
status=$?
[ "$is_init" = yes ] && [ "$SWAP_WHEN" = after ] && swap
exit $status
"""


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_new_repository_path_swapped_for_a_link_is_not_followed(built: Path, sandbox: Path, when: str) -> None:
    """`publish --to-git shared/rel`, a new folder in a folder another user can write: the path is swapped for a
    link to the attacker's repository (its filter runs on checkout) around `git init`. Every git command still runs
    in the folder needlebench created: the release is there, the attacker's repository is untouched and its filter
    never runs."""
    ds = _copy(built, sandbox)
    work = sandbox / "work"
    evil = _evil_repo(work / "evil")
    evil_before = snapshot(evil / ".git")
    shared = work / "shared"
    shared.mkdir()
    shim = work / "bin"
    shim.mkdir()
    (shim / "git").write_text(SHIM)
    (shim / "git").chmod(0o755)
    env = {
        "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
        "REAL_GIT": shutil.which("git") or "git",
        "SWAP_FROM": str(shared / "rel"),
        "SWAP_TO": str(evil),
        "SWAP_DONE": str(work / "swapped"),
        "SWAP_WHEN": when,
    }
    before = _users(sandbox)
    result = run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(shared / "rel"), env=env)
    assert (work / "swapped").exists() and (shared / "rel").is_symlink()  # the swap did happen
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (sandbox / "PWNED").exists()
    assert _users(sandbox) == before
    assert _tag(shared / "rel.orig")  # the release is in the folder needlebench made
    assert (shared / "rel.orig" / "README.md").is_file()
    assert snapshot(evil / ".git") == evil_before and not (evil / "README.md").exists()


#: A `git` first on PATH that logs each call's arguments (each ended by a NUL, each call by bytes 1 and 0).
LOGGER = """#!/bin/sh
printf '%s\\0' "$@" >> "$CALLS_LOG"
printf '\\1\\0' >> "$CALLS_LOG"
exec "$REAL_GIT" "$@"
"""
#: git commands that name the files they write by absolute paths (lock files: git's ``tempfile.c``; ``git init``).
ABSOLUTE_PATH_COMMANDS = {"init", "update-ref", "tag"}
#: git commands that `chdir` to the work tree by its absolute path (``setup_work_tree``, git's setup.c), so a folder
#: renamed and swapped for a link at that moment would send them (and the filters they run) elsewhere.
WORK_TREE_COMMANDS = {"status", "checkout", "reset", "add", "commit", "diff-files", "stash", "restore", "switch"}


@pytest.mark.slow
def test_no_git_command_finds_its_repository_by_path(built: Path, sandbox: Path) -> None:
    """Two releases into a work-tree repository: every git command names its repository (``--git-dir``, never
    ``-C PATH``), and none needs the work tree (they would look its path up again): needlebench writes the work tree
    and compares it with the index itself, through the folder's descriptor."""
    ds = _copy(built, sandbox)
    work = sandbox / "work"
    (work / "bin").mkdir()
    (work / "bin" / "git").write_text(LOGGER)
    (work / "bin" / "git").chmod(0o755)
    env = {
        "PATH": f"{work / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "REAL_GIT": shutil.which("git") or "git",
        "CALLS_LOG": str(work / "calls"),
    }
    repo = work / "rel"
    for version in ("1.0.0", "1.0.1"):
        result = run(sandbox, "publish", str(ds), "--version", version, "--to-git", str(repo), env=env)
        assert result.returncode == 0, result.stderr[-2000:]
        os.utime(repo / "README.md")  # stat-dirty: a `git status` would re-read it
    calls = [call.split("\0")[:-1] for call in (work / "calls").read_text().split("\1\0") if call]
    in_repo = 0
    for args in calls:
        command = next(arg for i, arg in enumerate(args) if not arg.startswith("-") and args[i - 1] != "-c")
        if command == "config" and "--file" in args:
            continue  # the repository's configuration checked from stdin
        if command == "init":
            assert not args[-1].startswith(str(sandbox)), args  # made in a private folder, copied by descriptors
            continue
        in_repo += 1
        assert "-C" not in args and ("--git-dir=.git" in args or "--git-dir=." in args), args
        assert command not in WORK_TREE_COMMANDS | ABSOLUTE_PATH_COMMANDS, args
        assert command != "read-tree" or "-u" not in args, args
    assert in_repo > 10
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True, check=True, timeout=60
    )
    assert status.stdout == ""
    tag = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "tag", "v1.0.1"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert tag == (  # what `git tag -a v1.0.1 -m "needlebench release v1.0.1"` makes with the fixed identity
        f"object {_tag(repo, 'v1.0.1')}\ntype commit\ntag v1.0.1\n"
        "tagger needlebench <needlebench@users.noreply.huggingface.co> 1720656000 +0000\n\nneedlebench release v1.0.1\n"
    )
    reflog = (repo / ".git" / "logs" / "HEAD").read_text().splitlines()
    assert len(reflog) == 2 and reflog[1].endswith(f"\tneedlebench publish {_tag(repo, 'v1.0.1')[:12]}")


@pytest.mark.slow
def test_a_work_tree_clean_only_through_a_filter_is_refused_without_running_it(built: Path, sandbox: Path) -> None:
    """A tracked file whose bytes differ from the index but not through a clean filter (as a Git LFS work tree
    does) is an uncommitted change: needlebench runs no filter (the configuration naming it may have been swapped
    since it was checked), and says so."""
    ds = _copy(built, sandbox)
    repo = sandbox / "work" / "rel"
    assert run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)).returncode == 0
    (sandbox / ".gitconfig").write_text('[filter "upper"]\n\tclean = tr a-z A-Z\n\tsmudge = cat\n')
    (repo / ".gitattributes").write_text("notes.txt filter=upper\n")
    (repo / "notes.txt").write_text("lower case\n")
    env = {"HOME": str(sandbox)}
    for args in (("add", ".gitattributes", "notes.txt"), ("commit", "-q", "-m", "notes")):
        subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@example.invalid", *args], cwd=repo,
                       env={**os.environ, **env}, check=True, capture_output=True, timeout=60)  # fmt: skip
    assert (repo / "notes.txt").read_text() == "lower case\n"  # the index holds "LOWER CASE"
    result = run(sandbox, "publish", str(ds), "--version", "1.0.1", "--to-git", str(repo))
    refused(result, "uncommitted", "notes.txt", "no clean filter")
    assert not _tag(repo, "v1.0.1")


# --- 3. git's environment and working folder -------------------------------------------------------------------------


def test_git_environment_names_no_other_repository(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The user's GIT_* variables that would point git elsewhere are dropped; GIT_EXEC_PATH (where git's helpers
    are) is kept."""
    from needlebench.dataset.publish import git_environment

    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CONFIG_GLOBAL"):
        monkeypatch.setenv(name, str(tmp_path / "evil"))
    monkeypatch.setenv("GIT_ALTERNATE_OBJECT_DIRECTORIES", str(tmp_path / "evil"))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_EXEC_PATH", "/usr/lib/git-core")
    env = git_environment()
    assert not {key for key in env if key.startswith("GIT_")} & {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_COUNT",
    }
    assert env["GIT_EXEC_PATH"] == "/usr/lib/git-core" and env["GIT_CEILING_DIRECTORIES"] == "/"


@pytest.mark.parametrize("proc", [True, False])
def test_git_starts_in_the_open_folder_not_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: bool
) -> None:
    """A child started for an open folder runs there even after the folder was renamed and a link to another folder
    put at its name (through /proc/self/fd, or os.fchdir where /proc is missing)."""
    import needlebench.dataset.publish as publish
    from needlebench.safe_fs import Folder

    (tmp_path / "mine").mkdir()
    (tmp_path / "other").mkdir()
    with Folder.open(tmp_path / "mine") as folder:
        os.rename(tmp_path / "mine", tmp_path / "mine.orig")
        (tmp_path / "mine").symlink_to(tmp_path / "other")
        if not proc:
            real_stat = os.stat

            def no_proc(path: object, *args: object, **kwargs: object) -> os.stat_result:
                if str(path).startswith("/proc/"):
                    raise FileNotFoundError(path)
                return real_stat(path, *args, **kwargs)

            monkeypatch.setattr(publish.os, "stat", no_proc)
        arguments = publish._pinned_cwd(folder.fd)
        assert ("cwd" in arguments) is proc
        where = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getcwd())"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            **arguments,
        ).stdout.strip()
    assert where == str(tmp_path / "mine.orig")
