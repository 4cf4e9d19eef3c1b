"""`publish --to-git` into a repository folder someone else can change while it runs (issue 33, round 5).

* a FIFO in ``.git`` (``info/grafts``, ``shallow``, ``packed-refs``, ``objects/info/alternates``) is refused at once:
  git would block opening it, paced by the writer (who could swap ``.git/config`` meanwhile);
* a tracked file that differs from the index is compared byte for byte: no clean filter runs (one named by
  ``.git/info/attributes`` and a configuration swapped after the check would run the attacker's command);
* a repository another user can write into is refused (they could plant links in ``objects/`` while git writes);
* a tag ref that cannot be written is found before the branch moves (nothing half-published);
* non-UTF-8 names and manifests of earlier releases give a release or a one-line error, never a traceback;
* fields of earlier releases' manifests reach the card's changelog and the commit message escaped.

Each attack runs the `needlebench` command (a subprocess) in a sandbox HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.sandbox import CLI, refused, run, snapshot


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """`needlebench build atc_en --out DS` and a second dataset (another seed), once."""
    root = tmp_path_factory.mktemp("built")
    for name, extra in (("ds", []), ("other", ["--seed", "7"])):
        result = subprocess.run(
            [*CLI, "build", "atc_en", "--out", str(root / name), *extra], capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stderr[-2000:]
    return root


def _released(built: Path, home: Path, version: str = "1.0.0") -> tuple[Path, Path]:
    """The victim's dataset (a copy of ``ds``) and a repository holding ``other`` released as ``version``."""
    ds = home / "work" / "ds"
    shutil.copytree(built / "ds", ds)
    repo = home / "work" / "rel"
    result = run(home, "publish", str(built / "other"), "--version", version, "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    return ds, repo


def _users(home: Path) -> dict:
    return snapshot(home, skip=home / "work")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo / ".git"), *args], capture_output=True, text=True, timeout=60, check=False
    ).stdout


# --- 1 and 3: FIFOs in .git; no filter ever runs --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["info/grafts", "shallow", "packed-refs", "objects/info/alternates"])
def test_a_fifo_in_the_git_folder_is_refused_at_once(built: Path, sandbox: Path, where: str) -> None:
    ds, repo = _released(built, sandbox)
    if where == "packed-refs":
        (repo / ".git" / "packed-refs").unlink(missing_ok=True)
    os.mkfifo(repo / ".git" / where)
    before = _users(sandbox)
    start = time.monotonic()
    result = subprocess.run(
        [*CLI, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo)],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(sandbox)}, check=False,
    )  # fmt: skip
    assert time.monotonic() - start < 30
    refused(result, where.rsplit("/", 1)[-1], "FIFO")
    assert _users(sandbox) == before


@pytest.mark.slow
def test_a_dirty_file_is_compared_without_running_the_repositorys_filter(built: Path, sandbox: Path) -> None:
    """``.git/info/attributes`` names a filter for README.md and the filter is in the configuration git reads (as
    if swapped in after the check; here in the user's global configuration, which needlebench does not check): the
    changed README.md is an uncommitted change, found without running the filter."""
    ds, repo = _released(built, sandbox)
    (repo / "README.md").write_text((repo / "README.md").read_text() + "dirty\n")
    (repo / ".git" / "info" / "attributes").write_text("README.md filter=evil\n")
    (sandbox / ".gitconfig").write_text('[filter "evil"]\n\tclean = "touch $HOME/PWNED; cat"\n')
    before = _users(sandbox)
    refused(run(sandbox, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo)), "uncommitted", "README.md")
    assert not (sandbox / "PWNED").exists()
    before.pop(".gitconfig", None)
    after = _users(sandbox)
    after.pop(".gitconfig", None)
    assert after == before


# --- 2: a git folder others can write into ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", [".git", ".git/objects", ".git/refs/tags"])
def test_a_git_folder_writable_by_others_is_refused(built: Path, sandbox: Path, where: str) -> None:
    """Another user who can write into ``.git/objects`` could plant ``objects/XX`` links while git writes."""
    ds, repo = _released(built, sandbox)
    heads = _git(repo, "show-ref")
    (repo / where).chmod(0o777)
    refused(run(sandbox, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo)), where, "writable by others")
    assert _git(repo, "show-ref") == heads


# --- 4: a ref that cannot be written is found before the branch moves -----------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("where", ["refs/tags/v1.0.0", "logs/HEAD", "refs/heads/main.lock"])
def test_an_unwritable_ref_is_refused_before_the_branch_moves(built: Path, sandbox: Path, where: str) -> None:
    ds, repo = _released(built, sandbox, "0.9.0")
    heads = _git(repo, "show-ref")
    target = repo / ".git" / where
    if target.exists():
        target.unlink()
    target.mkdir()
    refused(run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo)), where.rsplit("/", 1)[-1])
    assert _git(repo, "show-ref") == heads


# --- 5: bytes that are not UTF-8 in git's output ---------------------------------------------------------------------


def _commit(repo: Path, files: dict[bytes, bytes], parent: str | None = None, ref: str | None = None) -> str:
    """A commit holding ``files`` (names as bytes), on ``parent``, set at ``ref`` when given (plain git)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(repo / ".git" / "tmp-index")}
    for role in ("AUTHOR", "COMMITTER"):
        env.update({f"GIT_{role}_NAME": "u", f"GIT_{role}_EMAIL": "u@example.invalid"})

    def git(*args: str | bytes, data: bytes | None = None) -> bytes:
        return subprocess.run(
            ["git", "--git-dir", str(repo / ".git"), *args], input=data, env=env, capture_output=True, check=True
        ).stdout

    if parent:
        git("read-tree", parent)
    for name, content in files.items():
        oid = git("hash-object", "-w", "--stdin", data=content).strip()
        git("update-index", "--add", "-z", "--index-info", data=b"100644 " + oid + b"\t" + name + b"\0")
    tree = git("write-tree").decode().strip()
    commit = git("commit-tree", tree, *(["-p", parent] if parent else []), "-m", "x").decode().strip()
    os.unlink(repo / ".git" / "tmp-index")
    if ref:
        git("update-ref", ref, commit)
    return commit


@pytest.mark.slow
def test_a_file_name_that_is_not_utf8_on_the_branch_is_kept(built: Path, sandbox: Path) -> None:
    ds, repo = _released(built, sandbox)
    head = _git(repo, "rev-parse", "HEAD").strip()
    _commit(repo, {b"notes-\xff.txt": b"mine\n"}, parent=head, ref="refs/heads/main")
    (repo / os.fsdecode(b"notes-\xff.txt")).write_bytes(b"mine\n")
    subprocess.run(["git", "-C", str(repo), "reset", "-q"], check=True, timeout=60)
    result = run(sandbox, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    names = subprocess.run(["git", "-C", str(repo), "ls-tree", "-r", "-z", "--name-only", "v1.1.0"],
                           capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    assert b"notes-\xff.txt" in names


@pytest.mark.slow
def test_an_earlier_manifest_that_is_not_utf8_is_an_earlier_release(built: Path, sandbox: Path) -> None:
    ds, repo = _released(built, sandbox)
    old = _commit(repo, {b"needlebench.json": b'{"format": "needlebench-dataset", "x": "\xff"}'})
    subprocess.run(["git", "-C", str(repo), "tag", "v0.5.0", old], check=True, timeout=60)
    result = run(sandbox, "publish", str(ds), "--version", "1.1.0", "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "earlier release" in (repo / "README.md").read_text()


# --- 6: fields of earlier manifests reach the changelog escaped ------------------------------------------------------


@pytest.mark.slow
def test_an_earlier_manifests_fields_reach_the_changelog_inert(built: Path, sandbox: Path) -> None:
    ds, repo = _released(built, sandbox, "0.9.0")
    manifest = json.loads((repo / "needlebench.json").read_text())
    manifest["generator_version"] = (
        "0.0.1\n\n## Notice\n\n[fixed data](https://evil.example/x)\n<img src=x onerror=a()>\n"
    )
    manifest["recipe"]["<b>k</b>"] = 1
    manifest["configs"]["[c](https://evil.example/c)"] = {"fingerprint": "x"}
    head = _git(repo, "rev-parse", "HEAD").strip()
    commit = _commit(repo, {b"needlebench.json": json.dumps(manifest).encode()}, parent=head, ref="refs/heads/main")
    subprocess.run(["git", "-C", str(repo), "tag", "v0.9.1", commit], check=True, timeout=60)
    subprocess.run(["git", "-C", str(repo), "reset", "-q", "--hard"], check=True, timeout=60)
    result = run(sandbox, "publish", str(ds), "--version", "1.0.0", "--to-git", str(repo))
    assert result.returncode == 0, result.stderr[-2000:]
    card = (repo / "README.md").read_text()
    message = _git(repo, "log", "-1", "--format=%B", "v1.0.0")
    for text in (card, message):
        assert "## Notice" not in text.replace("0.0.1  ## Notice", "")  # never at the start of a line
        assert "<img" not in text and "<b>" not in text
        assert "](https://evil.example" not in text
    assert "0.0.1  ## Notice" in card and "&lt;img src=x onerror=a()&gt;" in card


def test_object_folders_are_made_and_a_link_planted_after_the_check_is_refused(tmp_path: Path) -> None:
    """Before git writes, every ``objects/XX`` is made a folder through descriptors; one planted as a link after the
    repository was checked (by someone who could write there) is refused, never written through."""
    from needlebench.dataset.publish import GitRepo, _prepare_objects, check_repo_config
    from needlebench.errors import NeedlebenchError
    from needlebench.safe_fs import Folder

    repo, outside = tmp_path / "r", tmp_path / "outside"
    outside.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    with Folder.open(repo) as root:
        check_repo_config(root)
        (repo / ".git" / "objects" / "ab").symlink_to(outside)
        with pytest.raises(NeedlebenchError, match="objects/ab"):
            _prepare_objects(GitRepo(repo, root))
        (repo / ".git" / "objects" / "ab").unlink()
        _prepare_objects(GitRepo(repo, root))
    assert all((repo / ".git" / "objects" / f"{i:02x}").is_dir() for i in range(256))
    assert not any(outside.iterdir())
