"""Publishing: Hub write calls against a recording stand-in of HfApi, and releases into local git repositories."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hub_server import commit_files, git, make_dataset_folder
from needlebench.dataset.publish import (
    PublishResult,
    parse_version,
    publish_folder,
    publish_to_git,
    version_key,
)
from needlebench.errors import NeedlebenchError

WRITES = ("create_repo", "upload_folder", "create_tag")


class RecordingApi:
    """A stand-in for ``huggingface_hub.HfApi``: an in-memory Hub that records every call."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.repos: dict[str, dict[str, Any]] = {}
        self.commits: dict[str, dict[str, bytes]] = {}

    def _record(self, name: str, **kwargs: Any) -> None:
        self.calls.append((name, kwargs))

    def writes(self) -> list[str]:
        return [name for name, _ in self.calls if name in WRITES]

    def _repo(self, repo_id: str) -> dict[str, Any]:
        if repo_id not in self.repos:
            import httpx2
            from huggingface_hub.errors import RepositoryNotFoundError

            request = httpx2.Request("GET", f"https://hub.invalid/api/datasets/{repo_id}/refs")
            raise RepositoryNotFoundError("404 Repository Not Found", response=httpx2.Response(404, request=request))
        return self.repos[repo_id]

    def list_repo_refs(self, repo_id: str, *, repo_type: str | None = None, token: Any = None, **_: Any):
        from huggingface_hub.hf_api import GitRefInfo, GitRefs

        self._record("list_repo_refs", repo_id=repo_id, repo_type=repo_type, token=token)
        repo = self._repo(repo_id)
        tags = [GitRefInfo(name=n, ref=f"refs/tags/{n}", target_commit=c) for n, c in repo["tags"].items()]
        branches = [GitRefInfo(name="main", ref="refs/heads/main", target_commit=repo["head"])] if repo["head"] else []
        return GitRefs(branches=branches, converts=[], tags=tags)

    def list_repo_tree(
        self,
        repo_id: str,
        path_in_repo: str | None = None,
        *,
        recursive: bool = False,
        revision: str | None = None,
        repo_type: str | None = None,
        token: Any = None,
        **_: Any,
    ):
        from huggingface_hub.hf_api import RepoFile, RepoFolder

        self._record("list_repo_tree", repo_id=repo_id, revision=revision, recursive=recursive, token=token)
        files = self.commits[revision or self._repo(repo_id)["head"]]
        entries: list[Any] = [RepoFolder(path="data", oid="0" * 40)]
        for path, content in sorted(files.items()):
            blob = hashlib.sha1(f"blob {len(content)}\0".encode() + content).hexdigest()
            lfs = None
            if path.endswith(".parquet"):  # the Hub stores these in LFS/Xet: blob_id is the pointer's
                lfs = {"size": len(content), "oid": hashlib.sha256(content).hexdigest(), "pointerSize": 134}
                blob = hashlib.sha1(b"pointer " + content).hexdigest()
            entries.append(RepoFile(path=path, size=len(content), oid=blob, lfs=lfs))
        return iter(entries)

    def create_repo(
        self,
        repo_id: str,
        *,
        repo_type: str | None = None,
        private: bool | None = None,
        exist_ok: bool = False,
        token: Any = None,
        **_: Any,
    ) -> str:
        self._record(
            "create_repo", repo_id=repo_id, repo_type=repo_type, private=private, exist_ok=exist_ok, token=token
        )
        if repo_id in self.repos and not exist_ok:
            raise AssertionError("create_repo without exist_ok on an existing repo")
        self.repos.setdefault(repo_id, {"head": None, "tags": {}, "private": private})
        return f"https://hub.invalid/datasets/{repo_id}"

    def upload_folder(
        self,
        *,
        repo_id: str,
        folder_path: Path,
        repo_type: str | None = None,
        commit_message: str | None = None,
        commit_description: str | None = None,
        delete_patterns: list[str] | None = None,
        token: Any = None,
        **kwargs: Any,
    ):
        from huggingface_hub.hf_api import CommitInfo

        self._record(
            "upload_folder",
            repo_id=repo_id,
            repo_type=repo_type,
            commit_message=commit_message,
            delete_patterns=delete_patterns,
            token=token,
            **kwargs,
        )
        repo = self._repo(repo_id)
        uploaded = {
            p.relative_to(folder_path).as_posix(): p.read_bytes() for p in Path(folder_path).rglob("*") if p.is_file()
        }
        files = dict(self.commits.get(repo["head"], {}))
        for path in list(files):
            if any(fnmatch.fnmatch(path, pattern) for pattern in delete_patterns or []) and path not in uploaded:
                del files[path]
        files.update(uploaded)
        if repo["head"] is not None and files == self.commits[repo["head"]]:
            oid = repo["head"]  # like the Hub: no empty commit
        else:
            oid = hashlib.sha1(
                json.dumps(
                    [repo["head"], sorted((p, hashlib.sha256(c).hexdigest()) for p, c in files.items())]
                ).encode()
            ).hexdigest()
            self.commits[oid] = files
            repo["head"] = oid
        return CommitInfo(
            commit_url=f"https://huggingface.co/datasets/{repo_id}/commit/{oid}",
            commit_message=commit_message or "",
            commit_description=commit_description or "",
            oid=oid,
        )

    def create_tag(
        self,
        repo_id: str,
        *,
        tag: str,
        tag_message: str | None = None,
        revision: str | None = None,
        repo_type: str | None = None,
        exist_ok: bool = False,
        token: Any = None,
    ) -> None:
        self._record("create_tag", repo_id=repo_id, tag=tag, revision=revision, repo_type=repo_type, token=token)
        repo = self._repo(repo_id)
        if tag in repo["tags"]:
            raise AssertionError("tag already exists")
        repo["tags"][tag] = revision

    def hf_hub_download(
        self,
        repo_id: str,
        filename: str,
        *,
        repo_type: str | None = None,
        revision: str | None = None,
        token: Any = None,
        **_: Any,
    ) -> str:
        self._record("hf_hub_download", repo_id=repo_id, filename=filename, revision=revision)
        target = self.store / (revision or "head") / filename
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(self.commits[revision][filename])
        return str(target)

    def files_at(self, repo_id: str, tag: str) -> dict[str, bytes]:
        return self.commits[self.repos[repo_id]["tags"][tag]]


@pytest.fixture()
def api(tmp_path: Path) -> RecordingApi:
    return RecordingApi(tmp_path / "api-store")


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    make_dataset_folder(tmp_path / "ds", {"single_en_4k": 4, "atc_en": 2})
    return tmp_path / "ds"


def _one_line_error(excinfo: pytest.ExceptionInfo, *needles: str) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return message


# --- versions ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [("1.0.0", "1.0.0"), ("v2.3.4", "2.3.4"), ("1.0.0-rc.1", "1.0.0-rc.1")])
def test_parse_version_accepts_semver(value: str, expected: str) -> None:
    assert parse_version(value) == expected


@pytest.mark.parametrize("value", ["1.0", "latest", "1.0.0.0", "01.0.0", "1.0.0+build", "", "v"])
def test_parse_version_rejects_other_strings(value: str) -> None:
    with pytest.raises(NeedlebenchError) as excinfo:
        parse_version(value)
    _one_line_error(excinfo, repr(value), "X.Y.Z")


def test_prereleases_sort_before_their_release() -> None:
    assert sorted(["1.0.0", "1.0.0-rc.2", "0.9.0", "1.0.0-rc.10"], key=version_key) == [
        "0.9.0", "1.0.0-rc.2", "1.0.0-rc.10", "1.0.0",
    ]  # fmt: skip


# --- the Hub (recording stand-in) ---------------------------------------------------------------------------------


def test_publish_creates_repo_uploads_release_and_tags_the_commit(api: RecordingApi, folder: Path) -> None:
    result = publish_folder(folder, repo_id="org/nb", version="1.0.0", token="hf_secret", api=api)
    assert [name for name, _ in api.calls] == ["list_repo_refs", "create_repo", "upload_folder", "create_tag"]
    calls = dict(api.calls)
    assert calls["create_repo"] == {
        "repo_id": "org/nb",
        "repo_type": "dataset",
        "private": False,
        "exist_ok": True,
        "token": "hf_secret",
    }
    assert calls["upload_folder"]["repo_type"] == "dataset" and calls["upload_folder"]["delete_patterns"] == ["data/**"]
    assert calls["create_tag"]["tag"] == "v1.0.0" and calls["create_tag"]["revision"] == result.revision
    assert isinstance(result, PublishResult) and result.created
    assert not hasattr(result, "commit")  # `revision` is the commit; no second name for it
    files = api.files_at("org/nb", "v1.0.0")
    assert sorted(files) == [
        "README.md",
        "data/atc_en/test-00000-of-00001.parquet",
        "data/single_en_4k/test-00000-of-00001.parquet",
        "needlebench.json",
    ]
    assert files["needlebench.json"] == (folder / "needlebench.json").read_bytes()
    readme = files["README.md"].decode()
    assert 'load_dataset("org/nb", "single_en_4k", split="test", revision="v1.0.0")' in readme
    assert "**v1.0.0**: 2 configs" in readme
    assert result.how_to_load.startswith(f"published org/nb v1.0.0 at commit {result.revision}\n")
    assert 'revision="v1.0.0"' in result.how_to_load
    assert (folder / "README.md").read_text() != readme  # the folder itself is untouched


def test_publishing_the_same_content_again_is_a_no_op(api: RecordingApi, folder: Path) -> None:
    first = publish_folder(folder, repo_id="org/nb", version="1.0.0", api=api)
    api.calls.clear()
    again = publish_folder(folder, repo_id="org/nb", version="v1.0.0", api=api)
    assert not again.created and again.revision == first.revision and again.tag == "v1.0.0"
    assert again.how_to_load.startswith(f"org/nb v1.0.0 already holds this data (commit {first.revision})")
    assert api.writes() == []


def test_an_existing_tag_with_other_data_is_refused(api: RecordingApi, folder: Path, tmp_path: Path) -> None:
    publish_folder(folder, repo_id="org/nb", version="1.0.0", api=api)
    state = json.dumps(api.repos, sort_keys=True)
    api.calls.clear()
    other = tmp_path / "other"
    make_dataset_folder(other, {"single_en_4k": 4, "atc_en": 2}, salt="-changed")
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_folder(other, repo_id="org/nb", version="1.0.0", api=api)
    _one_line_error(excinfo, "v1.0.0", "org/nb", "different data")
    assert api.writes() == [] and json.dumps(api.repos, sort_keys=True) == state


def test_a_new_version_removes_stale_configs_and_logs_changes(api: RecordingApi, folder: Path, tmp_path: Path) -> None:
    publish_folder(folder, repo_id="org/nb", version="1.0.0", api=api)
    newer = tmp_path / "newer"
    make_dataset_folder(newer, {"single_en_4k": 4, "atc_zh": 2}, salt="-v2")
    result = publish_folder(newer, repo_id="org/nb", version="1.1.0", api=api)
    assert result.created
    files = api.files_at("org/nb", "v1.1.0")
    assert not any(path.startswith("data/atc_en/") for path in files)
    assert any(path.startswith("data/atc_en/") for path in api.files_at("org/nb", "v1.0.0"))
    readme = files["README.md"].decode()
    assert "**v1.1.0**: added atc_zh; removed atc_en; regenerated single_en_4k" in readme
    assert readme.index("**v1.1.0**") < readme.index("**v1.0.0**: 2 configs")


def test_an_older_version_after_a_newer_one_is_refused(api: RecordingApi, folder: Path, tmp_path: Path) -> None:
    publish_folder(folder, repo_id="org/nb", version="1.0.0", api=api)
    newer = tmp_path / "newer"
    make_dataset_folder(newer, {"single_en_4k": 4, "atc_en": 2}, salt="-v2")
    latest = publish_folder(newer, repo_id="org/nb", version="1.1.0", api=api)
    state = json.dumps(api.repos, sort_keys=True)
    api.calls.clear()
    for older in ("1.0.1", "1.1.0-rc.1"):
        with pytest.raises(NeedlebenchError) as excinfo:
            publish_folder(folder, repo_id="org/nb", version=older, api=api)
        _one_line_error(excinfo, f"version {older} is older than the newest release v1.1.0", "org/nb")
    assert api.writes() == [] and json.dumps(api.repos, sort_keys=True) == state  # main still at v1.1.0
    assert api.repos["org/nb"]["head"] == latest.revision
    for data, version in ((newer, "1.1.0"), (folder, "1.0.0")):  # re-publishing a release: still a no-op
        again = publish_folder(data, repo_id="org/nb", version=version, api=api)
        assert not again.created and again.revision == api.repos["org/nb"]["tags"][f"v{version}"]
    assert api.writes() == [] and api.repos["org/nb"]["head"] == latest.revision


def test_private_flag_reaches_create_repo(api: RecordingApi, folder: Path) -> None:
    publish_folder(folder, repo_id="org/private-nb", version="0.1.0", private=True, api=api)
    assert dict(api.calls)["create_repo"]["private"] is True


@pytest.mark.parametrize(
    "repo_id, version, needle",
    [
        ("org/nb", "1.0", "'1.0'"),
        ("nb", "1.0.0", "'nb'"),
        ("org/nb/x", "1.0.0", "ORG/NAME"),
        ("org/n b", "1.0.0", "'org/n b'"),
    ],
)
def test_bad_repo_or_version_makes_no_calls(
    api: RecordingApi, folder: Path, repo_id: str, version: str, needle: str
) -> None:
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_folder(folder, repo_id=repo_id, version=version, api=api)
    _one_line_error(excinfo, needle)
    assert api.calls == []


def test_a_folder_that_is_not_a_dataset_makes_no_calls(api: RecordingApi, tmp_path: Path, folder: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_folder(tmp_path / "empty", repo_id="org/nb", version="1.0.0", api=api)
    _one_line_error(excinfo, "not a needlebench dataset", "needlebench.json")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "needlebench.json").write_text('{"format": "something-else"}')
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_folder(tmp_path / "foreign", repo_id="org/nb", version="1.0.0", api=api)
    _one_line_error(excinfo, "not a needlebench manifest")
    parquet = folder / "data/atc_en/test-00000-of-00001.parquet"
    parquet.write_bytes(parquet.read_bytes() + b"\0")
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_folder(folder, repo_id="org/nb", version="1.0.0", api=api)
    _one_line_error(excinfo, "does not match its manifest", "atc_en")
    assert api.calls == []


# --- local git repositories ---------------------------------------------------------------------------------------


def _head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def _status(repo: Path) -> str:
    return git(repo, "status", "--porcelain")


def test_publish_to_git_creates_the_repo_commit_and_tag(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "mirrors" / "datasets" / "org" / "nb"
    result = publish_to_git(folder, repo, version="1.0.0")
    assert result.created and result.tag == "v1.0.0" and result.repo == str(repo.resolve())
    assert git(repo, "rev-parse", "v1.0.0^{commit}").strip() == result.revision == _head(repo)
    assert git(repo, "cat-file", "-t", "v1.0.0").strip() == "tag"  # annotated
    assert git(repo, "log", "--format=%an <%ae> %at").strip() == (
        "needlebench <needlebench@users.noreply.huggingface.co> 1720656000"
    )
    assert sorted(git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()) == [
        "README.md", "data/atc_en/test-00000-of-00001.parquet",
        "data/single_en_4k/test-00000-of-00001.parquet", "needlebench.json",
    ]  # fmt: skip
    assert _status(repo) == ""  # the work tree was updated too
    assert 'load_dataset("org/nb", "single_en_4k", split="test", revision="v1.0.0")' in (repo / "README.md").read_text()
    assert "olah" in result.how_to_load and 'revision="v1.0.0"' in result.how_to_load


def test_publish_to_git_is_deterministic(folder: Path, tmp_path: Path) -> None:
    first = publish_to_git(folder, tmp_path / "a" / "datasets" / "org" / "nb", version="1.0.0")
    second = publish_to_git(folder, tmp_path / "b" / "datasets" / "org" / "nb", version="1.0.0")
    assert first.revision == second.revision


def test_git_same_tag_same_data_is_a_no_op_and_other_data_is_refused(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    first = publish_to_git(folder, repo, version="1.0.0")
    again = publish_to_git(folder, repo, version="1.0.0")
    assert not again.created and again.revision == first.revision
    other = tmp_path / "other"
    make_dataset_folder(other, {"single_en_4k": 4}, salt="-changed")
    refs = git(repo, "show-ref")
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_to_git(other, repo, version="1.0.0")
    _one_line_error(excinfo, "v1.0.0", "different data")
    assert git(repo, "show-ref") == refs and _status(repo) == ""


def test_git_new_version_builds_on_the_branch_and_keeps_other_files(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    base = commit_files(repo, {".gitattributes": "*.parquet filter=lfs diff=lfs merge=lfs -text\n"})
    first = publish_to_git(folder, repo, version="1.0.0", repo_id="org/nb")
    newer = tmp_path / "newer"
    make_dataset_folder(newer, {"single_en_4k": 4}, salt="-v2")
    second = publish_to_git(newer, repo, version="1.1.0")
    assert git(repo, "rev-list", "--parents", "-n", "1", second.revision).split() == [second.revision, first.revision]
    assert git(repo, "rev-parse", f"{first.revision}^").strip() == base
    tree = git(repo, "ls-tree", "-r", "--name-only", "v1.1.0").split()
    assert ".gitattributes" in tree and not any(path.startswith("data/atc_en/") for path in tree)
    assert not (repo / "data" / "atc_en").exists() and _status(repo) == ""
    readme = (repo / "README.md").read_text()
    assert "**v1.1.0**: removed atc_en; regenerated single_en_4k" in readme and "**v1.0.0**" in readme


def test_git_same_data_new_version_tags_without_empty_data_change(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    publish_to_git(folder, repo, version="1.0.0")
    second = publish_to_git(folder, repo, version="1.0.1")
    assert second.created
    changed = git(repo, "diff", "--name-only", "v1.0.0", "v1.0.1").split()
    assert changed == ["README.md"]  # only the card (its version) differs
    assert "**v1.0.1**: no data changes" in (repo / "README.md").read_text()


def test_git_older_version_after_a_newer_one_is_refused(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    publish_to_git(folder, repo, version="1.0.0")
    newer = tmp_path / "newer"
    make_dataset_folder(newer, {"single_en_4k": 4}, salt="-v2")
    latest = publish_to_git(newer, repo, version="1.1.0")
    refs, readme = git(repo, "show-ref"), (repo / "README.md").read_text()
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_to_git(folder, repo, version="1.0.1")
    _one_line_error(excinfo, "version 1.0.1 is older than the newest release v1.1.0", str(repo.resolve()))
    assert git(repo, "show-ref") == refs and _head(repo) == latest.revision  # main was not moved back
    assert (repo / "README.md").read_text() == readme and _status(repo) == ""
    again = publish_to_git(newer, repo, version="1.1.0")
    assert not again.created and again.revision == latest.revision


def test_git_bare_repository(folder: Path, tmp_path: Path) -> None:
    repo = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(repo)], check=True, timeout=30)
    result = publish_to_git(folder, repo, version="2.0.0")
    assert git(repo, "rev-parse", "v2.0.0^{commit}").strip() == result.revision
    assert git(repo, "rev-parse", "refs/heads/main").strip() == result.revision


@pytest.mark.parametrize("kind", ["file", "plain-folder", "inside-repo", "dirty"])
def test_git_bad_targets_are_one_line_errors_and_change_nothing(folder: Path, tmp_path: Path, kind: str) -> None:
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("x")
        needle = "is a file"
    elif kind == "plain-folder":
        target.mkdir()
        (target / "notes.txt").write_text("x")
        needle = "not a git repository"
    elif kind == "inside-repo":
        commit_files(tmp_path / "outer", {"a.txt": "a"})
        target = tmp_path / "outer" / "sub"
        target.mkdir()
        (target / "b.txt").write_text("b")
        needle = "not a git repository"  # never the enclosing repository
    else:
        commit_files(target, {"a.txt": "a"})
        (target / "a.txt").write_text("changed")
        needle = "uncommitted changes"
    before = sorted(str(p) for p in tmp_path.rglob("*") if ".git" not in p.parts)
    with pytest.raises(NeedlebenchError) as excinfo:
        publish_to_git(folder, target, version="1.0.0")
    _one_line_error(excinfo, needle)
    assert sorted(str(p) for p in tmp_path.rglob("*") if ".git" not in p.parts) == before


def test_git_bad_input_creates_no_repository(folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "new" / "repo"
    with pytest.raises(NeedlebenchError):
        publish_to_git(folder, target, version="one")
    with pytest.raises(NeedlebenchError):
        publish_to_git(tmp_path / "missing", target, version="1.0.0")
    assert not (tmp_path / "new").exists()


def test_git_failure_after_init_removes_the_new_repository(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import needlebench.dataset.publish as publish

    def broken(*args: Any, **kwargs: Any) -> Iterator[Path]:
        raise NeedlebenchError("simulated failure")

    monkeypatch.setattr(publish, "staged_release", broken)
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (tmp_path / "fresh", empty):
        with pytest.raises(NeedlebenchError, match="simulated"):
            publish_to_git(folder, target, version="1.0.0")
    assert not (tmp_path / "fresh").exists() and list(empty.iterdir()) == []


@pytest.mark.slow
def test_cli_publish_to_git_prints_the_revision_and_rejects_bad_versions(folder: Path, tmp_path: Path) -> None:
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", "from needlebench.cli import main; main()", "publish", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    repo = tmp_path / "mirror" / "datasets" / "org" / "nb"
    result = cli(str(folder), "--to-git", str(repo), "--version", "1.0.0")
    assert result.returncode == 0, result.stderr
    assert _head(repo) in result.stdout and 'revision="v1.0.0"' in result.stdout
    result = cli(str(folder), "--to-git", str(repo), "--version", "1.0")
    assert result.returncode == 2 and "'1.0'" in result.stderr and len(result.stderr.strip().splitlines()) == 1
