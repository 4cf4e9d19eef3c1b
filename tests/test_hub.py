"""The real Hub code paths against a local olah server: reference files, Hub haystacks, publish, load, verify."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hub_server import (
    ClientError,
    HubServer,
    client_env,
    commit_files,
    free_port,
    git,
    make_dataset_folder,
    olah_fixture,
    run_client,
)
from needlebench.dataset.publish import publish_to_git
from needlebench.errors import NeedlebenchError
from needlebench.sources.hub import (
    OPENCOMPASS_REPO,
    OPENCOMPASS_REVISION,
    HubSpec,
    opencompass_file,
    parse_corpus_option,
    parse_hub_spec,
)

hub = olah_fixture()

ESSAYS = [{"title": f"Essay {i}", "text": f"Essay number {i} is about startups and painting."} for i in range(3)]
FINANCE = [{"title": "财经", "text": f"第{i}篇财经新闻讲述了市场的变化。"} for i in range(2)]
NEEDLES = [{"needle": "Hidden on Emerald Island is the legendary Stardust Shard.",
            "retrieval_question": "What legendary item is hidden on Emerald Island?",
            "arg1": "", "arg2": "Stardust Shard", "language": "English"}]  # fmt: skip
TEXTS = {"train": ["first document", "second document", "  "], "validation": ["held out"]}


def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


@pytest.fixture(scope="module")
def opencompass(hub: HubServer) -> dict[str, str]:
    """A repo shaped like opencompass/NeedleBench (generated files) served at tag fixture-v1."""
    files = {
        "README.md": "---\nlicense: mit\n---\n# NeedleBench fixture\n",
        "PaulGrahamEssays.jsonl": _jsonl(ESSAYS),
        "zh_finance.jsonl": _jsonl(FINANCE),
        "needles.jsonl": _jsonl(NEEDLES),
        "names.json": json.dumps({"English": "Alice,Bob", "Chinese": "张三,李四"}, ensure_ascii=False),
        "multi_needle_reasoning_en.json": json.dumps([{"derivations": ["a", "b"], "derivation_count": 2,
                                                       "question": "q?", "answer": "a"}]),
        "multi_needle_reasoning_zh.json": json.dumps([]),
    }  # fmt: skip
    commit = commit_files(hub.repo_path(OPENCOMPASS_REPO), files, tag="fixture-v1")
    return {"commit": commit, **files}


@pytest.fixture(scope="module")
def texts(hub: HubServer) -> str:
    """A plain Hub text dataset (splits train and validation, columns text and body) at tag v1.0."""
    files = {"README.md": "---\nlicense: cc-by-4.0\n---\n# texts\n"}
    for split, documents in TEXTS.items():
        files[f"{split}.jsonl"] = _jsonl([{"text": d, "body": d.upper()} for d in documents])
    return commit_files(hub.repo_path("fixture/texts"), files, tag="v1.0")


@pytest.fixture(scope="module")
def published(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixture dataset folder published with publish_to_git into the served mirror as org/nb v1.0.0."""
    folder = tmp_path_factory.mktemp("published") / "ds"
    make_dataset_folder(folder, {"single_en_4k": 6, "atc_en": 3})
    result = publish_to_git(folder, hub.repo_path("org/nb"), version="1.0.0")
    assert result.created
    return folder


# --- parsing (no server) ------------------------------------------------------------------------------------------


def test_parse_corpus_option() -> None:
    assert parse_corpus_option("opencompass") == (OPENCOMPASS_REPO, OPENCOMPASS_REVISION)
    assert parse_corpus_option("opencompass@v2") == (OPENCOMPASS_REPO, "v2")
    for bad in ("opencompass@", "paulgraham", "opencompass@a b", "hub:opencompass"):
        with pytest.raises(NeedlebenchError) as excinfo:
            parse_corpus_option(bad)
        assert repr(bad) in str(excinfo.value) and "opencompass@REV" in str(excinfo.value)


def test_parse_hub_spec() -> None:
    assert parse_hub_spec("hub:org/name") == HubSpec("org/name")
    assert parse_hub_spec("hub:org/name@v1:wiki") == HubSpec("org/name", "v1", "wiki")
    assert parse_hub_spec("hub:org/name::validation:body") == HubSpec("org/name", None, None, "validation", "body")
    assert parse_hub_spec("hub:org/name@abc:cfg:test:content") == HubSpec("org/name", "abc", "cfg", "test", "content")
    for bad in ("org/name", "hub:name", "hub:org/name@", "hub:org/name:a:b:c:d", "hub:org/na me"):
        with pytest.raises(NeedlebenchError) as excinfo:
            parse_hub_spec(bad)
        assert "hub:ORG/NAME[@REV][:CONFIG][:SPLIT][:COLUMN]" in str(excinfo.value)


def test_one_repo_id_rule_for_haystack_specs_and_publishing() -> None:
    from needlebench.dataset import verify
    from needlebench.sources import hub as hub_module

    assert verify.REPO_ID is hub_module.REPO_ID and not hasattr(verify, "_REPO_ID")
    for repo_id in ("org/name", "Org-1/data.set_2"):
        assert verify.check_repo_id(repo_id) == parse_hub_spec(f"hub:{repo_id}").repo_id
    for bad in ("name", "org/na me", "-org/name", "org/name/x"):
        with pytest.raises(NeedlebenchError):
            verify.check_repo_id(bad)
        with pytest.raises(NeedlebenchError):
            parse_hub_spec(f"hub:{bad}")


def test_opencompass_file_rejects_other_names() -> None:
    with pytest.raises(NeedlebenchError) as excinfo:
        opencompass_file("secrets.txt")
    assert "'secrets.txt'" in str(excinfo.value) and "PaulGrahamEssays.jsonl" in str(excinfo.value)


# --- against the server -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_opencompass_files_download_and_cache(hub: HubServer, opencompass: dict[str, str], tmp_path: Path) -> None:
    commit = opencompass["commit"]
    home = tmp_path / "hf-home"
    results = hub.calls(
        [
            ("hub_server:hub_settings", (), {}),
            ("needlebench.sources.hub:opencompass_file", ("needles.jsonl", commit), {}),
            ("needlebench.sources.hub:opencompass_file", ("PaulGrahamEssays.jsonl",), {"revision": "fixture-v1"}),
            ("needlebench.sources.hub:opencompass_file", ("names.json", "no-such-revision"), {}),
            ("needlebench.sources.corpus:load_corpus", (f"opencompass@{commit}", "zh"), {}),
        ],
        hf_home=home,
    )
    settings, needles_path, essays_path, missing_revision, corpus = results
    assert settings == {"hub": hub.url, "datasets": hub.url, "cache": str(home / "hub")}  # the env took effect
    assert Path(needles_path).read_text(encoding="utf-8") == opencompass["needles.jsonl"]
    assert Path(essays_path).read_text(encoding="utf-8") == opencompass["PaulGrahamEssays.jsonl"]
    assert str(home) in needles_path  # in the huggingface_hub cache
    assert isinstance(missing_revision, ClientError) and missing_revision.type_name == "NeedlebenchError"
    assert "no-such-revision" in missing_revision.message and "\n" not in missing_revision.message
    assert list(corpus["documents"]) == [record["text"] for record in FINANCE]
    # A pinned commit is read from the cache with the Hub unreachable and offline mode on.
    offline = client_env(f"http://127.0.0.1:{free_port()}", home) | {"HF_HUB_OFFLINE": "1"}
    (cached,) = run_client(
        [{"target": "needlebench.sources.hub:opencompass_file", "args": ["needles.jsonl", commit]}], offline
    )
    assert cached == needles_path


@pytest.mark.slow
def test_hub_text_datasets_as_haystacks(hub: HubServer, texts: str) -> None:
    results = hub.calls(
        [
            ("needlebench.sources.hub:load_hub_documents", ("hub:fixture/texts@v1.0",), {}),
            ("needlebench.sources.hub:load_hub_documents", ("hub:fixture/texts@v1.0::validation:body",), {}),
            ("needlebench.sources.hub:load_hub_documents", ("hub:fixture/texts",), {}),
            ("needlebench.sources.hub:load_hub_documents", ("hub:fixture/texts@v1.0::train:nope",), {}),
            ("needlebench.sources.hub:load_hub_documents", ("hub:fixture/absent@v1.0",), {}),
            ("needlebench.sources.corpus:load_corpus", ("hub:fixture/texts@v1.0",), {"language": "en"}),
        ]
    )
    (train, train_meta), (validation, _), (main, main_meta), bad_column, absent, corpus = results
    assert train == ["first document", "second document"]  # blank rows dropped
    assert train_meta["revision"] == texts and train_meta["requested_revision"] == "v1.0"
    assert train_meta | {"revision": None} == {
        "source": "hub:fixture/texts@v1.0", "repo": "fixture/texts", "revision": None, "requested_revision": "v1.0",
        "config": None, "split": "train", "column": "text", "license": "cc-by-4.0", "documents": 2,
    }  # fmt: skip
    assert validation == ["HELD OUT"]
    assert main == train and main_meta["revision"] == texts
    assert isinstance(bad_column, ClientError) and "'nope'" in bad_column.message and "body" in bad_column.message
    assert isinstance(absent, ClientError) and absent.type_name == "NeedlebenchError"
    assert "fixture/absent" in absent.message and "\n" not in absent.message
    assert corpus["revision"] == texts and corpus["documents"] == train


@pytest.mark.slow
def test_published_git_repo_loads_with_datasets_at_the_tag(hub: HubServer, published: Path) -> None:
    rows, default_rows = hub.calls(
        [
            ("hub_server:load_rows", ("org/nb", "atc_en", "v1.0.0"), {}),
            ("hub_server:load_rows", ("org/nb", None, "v1.0.0"), {}),
        ]
    )
    local = pq.read_table(published / "data/atc_en/test-00000-of-00001.parquet").to_pylist()
    assert rows == local
    assert [row["config"] for row in default_rows] == ["single_en_4k"] * 6


@pytest.mark.slow
def test_verify_repo_passes_then_fails_after_a_parquet_file_is_altered(hub: HubServer, published: Path) -> None:
    repo = hub.repo_path("org/nb")
    parquet = "data/atc_en/test-00000-of-00001.parquet"
    data = bytearray((repo / parquet).read_bytes())
    data[len(data) // 2] ^= 0xFF
    commit_files(repo, {parquet: bytes(data)}, tag="v1.0.1-altered", message="tamper")
    ok, ok_subset, altered, altered_other, bad_revision = hub.calls(
        [
            ("needlebench.dataset.verify:verify_repo", ("org/nb", "v1.0.0", None), {"rebuild": False}),
            ("needlebench.dataset.verify:verify_repo", ("org/nb", "v1.0.0", ["atc_en"]), {"rebuild": False}),
            ("needlebench.dataset.verify:verify_repo", ("org/nb", "v1.0.1-altered", None), {"rebuild": False}),
            (
                "needlebench.dataset.verify:verify_repo",
                ("org/nb", "v1.0.1-altered", ["single_en_4k"]),
                {"rebuild": False},
            ),
            ("needlebench.dataset.verify:verify_repo", ("org/nb", "v9.9.9", None), {"rebuild": False}),
        ]
    )
    assert ok == {} and ok_subset == {} and altered_other == {}
    assert altered == {"atc_en": "files on disk do not match the manifest fingerprint"}
    assert isinstance(bad_revision, ClientError) and bad_revision.type_name == "NeedlebenchError"
    assert "v9.9.9" in bad_revision.message and "\n" not in bad_revision.message


@pytest.mark.slow
def test_hub_publish_reads_existing_tags_through_the_real_api(hub: HubServer, published: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    make_dataset_folder(other, {"single_en_4k": 6, "atc_en": 3}, salt="-other")
    same, conflict = hub.calls(
        [
            (
                "needlebench.dataset.publish:publish_folder",
                (str(published),),
                {"repo_id": "org/nb", "version": "1.0.0"},
            ),
            ("needlebench.dataset.publish:publish_folder", (str(other),), {"repo_id": "org/nb", "version": "1.0.0"}),
        ]
    )
    tag_commit = git(hub.repo_path("org/nb"), "rev-parse", "v1.0.0^{commit}").strip()
    assert same["created"] is False and same["tag"] == "v1.0.0" and same["revision"] == tag_commit
    assert isinstance(conflict, ClientError) and "different data" in conflict.message


@pytest.mark.slow
def test_verify_repo_rebuilds_a_real_build(hub: HubServer, tmp_path: Path) -> None:
    from needlebench.dataset.build import BuildOptions, build_dataset

    folder = tmp_path / "real"
    build_dataset(["single_en_4k"], folder, BuildOptions(), progress=False)
    publish_to_git(folder, hub.repo_path("org/real"), version="0.1.0")
    assert (
        hub.call("needlebench.dataset.verify:verify_repo", "org/real", "v0.1.0", None) == {}
    )  # {config: reason} if not


@pytest.mark.slow
def test_unreachable_endpoint_fails_fast_with_one_line_errors(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    folder = tmp_path / "ds"
    make_dataset_folder(folder, {"atc_en": 2})
    started = time.monotonic()
    results = run_client(
        [
            {"target": "needlebench.sources.hub:opencompass_file", "args": ["needles.jsonl"]},
            {"target": "needlebench.sources.hub:load_hub_documents", "args": ["hub:org/texts@v1"]},
            {"target": "needlebench.dataset.verify:verify_repo", "args": ["org/nb", "v1.0.0", None]},
            {
                "target": "needlebench.dataset.publish:publish_folder",
                "args": [str(folder)],
                "kwargs": {"repo_id": "org/nb", "version": "1.0.0"},
            },
        ],
        client_env(endpoint, tmp_path / "hf"),
    )
    assert time.monotonic() - started < 45
    for result in results:
        assert isinstance(result, ClientError) and result.type_name == "NeedlebenchError", result
        assert "cannot reach the Hub" in result.message and endpoint in result.message
        assert "\n" not in result.message
    assert "publishing org/nb v1.0.0" in results[-1].message
