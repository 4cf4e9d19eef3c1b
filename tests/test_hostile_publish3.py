"""`publish --to-git` tags exactly the bytes it checked (issue 33).

Ways a hostile release repository used to make the tag serve other rows than the dataset checked:

* a kept file whose path holds a newline injected a record into ``git update-index --index-info``, naming the
  release's data file with a blob the attacker chose;
* a ``refs/replace/`` ref made ``git ls-tree`` read another commit than the tag's (a clone gets the real one);
* an object planted under the id of the release's data file, holding other bytes: ``hash-object -w`` wrote nothing;
* an existing tag holding the right manifest and ``data/**`` plus a card pointing the loader at another file;
* a "tag" naming a tree, not a commit.

Each attack runs the `needlebench` command (a subprocess) in a sandbox HOME; the user's own files stay untouched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from support.sandbox import CLI, git, refused, run, snapshot

PARQUET = "data/atc_en/test-00000-of-00001.parquet"


def _build(out: Path, *extra: str) -> Path:
    result = subprocess.run(
        [*CLI, "build", "atc_en", "--out", str(out), *extra], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The dataset the user checked: `needlebench build atc_en --out DS`, once."""
    return _build(tmp_path_factory.mktemp("built") / "ds")


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    """The attacker's other rows: `needlebench build atc_en --seed 7 --out DS`, once."""
    return _build(tmp_path_factory.mktemp("other") / "ds", "--seed", "7")


def _copy(source: Path, home: Path, name: str) -> Path:
    target = home / "work" / name
    shutil.copytree(source, target)
    return target


def _users(home: Path) -> dict:
    return snapshot(home, skip=home / "work")


def _out(repo: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "--git-dir", str(repo / ".git"), *args], capture_output=True, text=True, timeout=60, check=False
    )
    return completed.stdout.strip()


def _tag(repo: Path, tag: str = "v1.0.0") -> str:
    return _out(repo, "rev-parse", "-q", "--verify", f"{tag}^{{commit}}")


def _publish(home: Path, ds: Path, repo: Path, version: str) -> subprocess.CompletedProcess:
    return run(home, "publish", str(ds), "--to-git", str(repo), "--version", version)


def _published(home: Path, ds: Path, repo: Path, version: str) -> None:
    result = _publish(home, ds, repo, version)
    assert result.returncode == 0, result.stderr[-2000:]


def _blob_id(path: Path) -> str:
    data = path.read_bytes()
    return __import__("hashlib").sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _plant(repo: Path, oid: str, data: bytes) -> None:
    """A loose object under ``oid`` holding ``data`` (not what ``oid`` names)."""
    folder = repo / ".git" / "objects" / oid[:2]
    folder.mkdir(exist_ok=True)
    target = folder / oid[2:]
    if target.exists():
        target.chmod(0o644)
    target.write_bytes(zlib.compress(b"blob %d\0" % len(data) + data))


# --- 1. a kept path with a newline injects nothing ------------------------------------------------------------------


@pytest.mark.slow
def test_a_kept_path_with_a_newline_is_refused(built: Path, other: Path, sandbox: Path) -> None:
    ds, evil = _copy(built, sandbox, "ds"), _copy(other, sandbox, "evil")
    repo = sandbox / "work" / "rel"
    _published(sandbox, evil, repo, "0.9.0")
    blob = _out(repo, "rev-parse", f"v0.9.0:{PARQUET}")
    folder = repo / f"zz\n100644 {blob}\tdata/atc_en"
    folder.mkdir(parents=True)
    (folder / "test-00000-of-00001.parquet").write_text("harmless\n")
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "notes", cwd=repo)
    before = _users(sandbox)
    refused(_publish(sandbox, ds, repo, "1.0.0"), "control character")
    assert _tag(repo) == ""
    assert _users(sandbox) == before


# --- 2. replace refs are not followed -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_replace_ref_does_not_make_a_tag_look_like_the_data(built: Path, other: Path, sandbox: Path) -> None:
    ds, evil = _copy(built, sandbox, "ds"), _copy(other, sandbox, "evil")
    good, repo = sandbox / "work" / "good", sandbox / "work" / "rel"
    _published(sandbox, ds, good, "1.0.0")
    _published(sandbox, evil, repo, "1.0.0")
    git("fetch", "-q", str(good), "main:refs/heads/good", cwd=repo)
    git("replace", _tag(repo), _out(repo, "rev-parse", "good"), cwd=repo)
    git("branch", "-qD", "good", cwd=repo)
    before = _users(sandbox)
    refused(_publish(sandbox, ds, repo, "1.0.0"), "v1.0.0", "already holds different data")
    assert _users(sandbox) == before


# --- 3. a planted object is read back, not trusted -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before-the-release", "under-an-existing-tag"])
def test_an_object_planted_under_the_data_files_id_is_refused(
    built: Path, other: Path, sandbox: Path, when: str
) -> None:
    ds, evil = _copy(built, sandbox, "ds"), _copy(other, sandbox, "evil")
    repo = sandbox / "work" / "rel"
    if when == "before-the-release":
        _published(sandbox, evil, repo, "0.9.0")
    else:
        _published(sandbox, ds, repo, "1.0.0")
    oid = _blob_id(ds / PARQUET)
    _plant(repo, oid, (evil / PARQUET).read_bytes())
    before = _users(sandbox)
    line = refused(_publish(sandbox, ds, repo, "1.0.0"), oid, PARQUET, "corrupt or was planted")
    assert "other bytes than its id says" in line
    if when == "before-the-release":
        assert _tag(repo) == ""
        assert _out(repo, "rev-parse", "main") == _out(repo, "rev-parse", "v0.9.0^{commit}")  # branch not moved
    assert _users(sandbox) == before


# --- 4. an existing tag matches only when its whole tree is this release ------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("change", ["card-points-elsewhere", "extra-data-file"])
def test_an_existing_tag_with_other_files_is_refused(built: Path, other: Path, sandbox: Path, change: str) -> None:
    ds, evil = _copy(built, sandbox, "ds"), _copy(other, sandbox, "evil")
    repo = sandbox / "work" / "rel"
    if change == "card-points-elsewhere":
        _published(sandbox, ds, repo, "0.9.0")
        (repo / "other").mkdir()
        shutil.copy(evil / PARQUET, repo / "other" / "x.parquet")
        card = (repo / "README.md").read_text()
        assert "path: data/atc_en/test-*.parquet" in card
        (repo / "README.md").write_text(card.replace("path: data/atc_en/test-*.parquet", "path: other/x.parquet"))
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "v1.0.0", cwd=repo)
        git("tag", "v1.0.0", cwd=repo)
        names = ("v1.0.0", "README.md")
    else:  # the right card, manifest and data, plus a file a later loader might read, on a side branch
        _published(sandbox, ds, repo, "1.0.0")
        git("checkout", "-q", "-b", "side", cwd=repo)
        shutil.copy(evil / PARQUET, repo / "data" / "atc_en" / "test-00000-of-00002.parquet")
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "more", cwd=repo)
        git("tag", "-f", "v1.0.0", cwd=repo)
        git("checkout", "-q", "main", cwd=repo)
        names = ("v1.0.0", "data/atc_en/test-00000-of-00002.parquet")
    before = _users(sandbox)
    refused(_publish(sandbox, ds, repo, "1.0.0"), *names, "already holds different data")
    assert _users(sandbox) == before


@pytest.mark.slow
def test_publishing_the_same_release_again_still_finds_it(built: Path, sandbox: Path) -> None:
    """The honest case the checks above must keep: the same dataset, version and repository, twice."""
    ds = _copy(built, sandbox, "ds")
    repo = sandbox / "work" / "rel"
    _published(sandbox, ds, repo, "1.0.0")
    tag = _tag(repo)
    again = _publish(sandbox, ds, repo, "1.0.0")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _tag(repo) == tag


# --- 5. a release tag names a commit ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_tag_naming_a_tree_is_refused(built: Path, sandbox: Path) -> None:
    ds = _copy(built, sandbox, "ds")
    repo = sandbox / "work" / "rel"
    _published(sandbox, ds, repo, "0.9.0")
    git("tag", "v1.0.0", _out(repo, "rev-parse", "v0.9.0^{tree}"), cwd=repo)
    before = _users(sandbox)
    refused(_publish(sandbox, ds, repo, "1.0.0"), "v1.0.0", "does not name a commit")
    assert _users(sandbox) == before


def test_git_reads_no_replace_refs_grafts_or_commit_graph() -> None:
    from needlebench.dataset.publish import GIT_SAFETY, git_environment

    env = git_environment()
    assert env["GIT_NO_REPLACE_OBJECTS"] == "1"
    assert env["GIT_GRAFT_FILE"] == os.devnull
    assert "core.commitGraph=false" in GIT_SAFETY
