"""Whole commands against a local Hub (olah): build from the paper's inputs with `--corpus opencompass`, and an
lm-eval task reading a published release by ``data_repo`` and ``data_revision``, and one-line errors for a missing
repo, revision or config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import ClientError, HubServer, commit_files, olah_fixture
from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.publish import publish_to_git
from needlebench.sources.hub import OPENCOMPASS_REPO

pytestmark = pytest.mark.slow

hub = olah_fixture()

ESSAYS = [f"Essay {i} says that startups grow when founders talk to users." for i in range(4)]
NEEDLE = {
    "needle": "Hidden on Emerald Island is the legendary Stardust Shard.",
    "retrieval_question": "What legendary item is hidden on Emerald Island? "
    "Please answer in the format 'The legendary item hidden on the Emerald Island is ______.'",
    "arg1": "Emerald Island",
    "arg2": "Stardust Shard",
    "language": "English",
}


def _needlebench(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_build_with_the_paper_inputs_from_the_hub(hub: HubServer, tmp_path: Path):
    files = {
        "README.md": "---\nlicense: mit\n---\n# fixture\n",
        "PaulGrahamEssays.jsonl": "".join(
            json.dumps({"title": str(i), "text": t}) + "\n" for i, t in enumerate(ESSAYS)
        ),
        "zh_finance.jsonl": json.dumps({"title": "财经", "text": "市场今天上涨了。"}, ensure_ascii=False) + "\n",
        "needles.jsonl": json.dumps(NEEDLE) + "\n",
        "names.json": json.dumps({"English": "Alice Reed,Bob Stone", "Chinese": "张三,李四"}, ensure_ascii=False),
        "multi_needle_reasoning_en.json": "[]",
        "multi_needle_reasoning_zh.json": "[]",
    }
    commit_files(hub.repo_path(OPENCOMPASS_REPO), files, tag="fixture-v1")
    out = tmp_path / "paper"
    result = _needlebench(
        ["build", "single_en_4k", "--corpus", "opencompass@fixture-v1", "--compat", "opencompass", "--out", str(out)],
        hub.env(),
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "data/single_en_4k/test-00000-of-00001.parquet").to_pylist()
    assert len(rows) == 800
    first = rows[0]  # depth 0, repeat 0: the needle opens the document, then the essays in shuffled order
    assert "Before answering, please consider" in first["question"]
    document = first["prompt"].split("The document given to you by the user is ", 1)[1]
    assert document.startswith("\n" + NEEDLE["needle"] + "\n")
    assert sorted(text for text in ESSAYS if text in document) == sorted(ESSAYS)
    recipe = json.loads((out / "needlebench.json").read_text())["recipe"]
    assert recipe["compat"] == "opencompass" and recipe["corpora"]["en"]["name"].endswith(".jsonl")
    # the recipe records the pinned Hub spec, not this machine's cache path
    assert recipe["haystack_en"] == recipe["needles"] == recipe["names"] == "opencompass@fixture-v1"


@pytest.fixture(scope="module")
def release(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``atc_en`` published to the local Hub as ``org/needlebench`` at tag ``v1.0.0``; returns the repo id."""
    folder = tmp_path_factory.mktemp("release") / "needlebench"
    build_dataset(["atc_en"], folder, BuildOptions(), progress=False)
    publish_to_git(folder, hub.repo_path("org/needlebench"), version="1.0.0")
    return "org/needlebench"


def test_lm_eval_task_reads_a_published_release_by_data_repo(hub: HubServer, release: str, tmp_path: Path):
    output = tmp_path / "results"
    code = "import sys; from needlebench.evaluation.runner.evaluate import run_eval; sys.exit(run_eval(sys.argv[1:]))"
    metadata = json.dumps({"data_repo": release, "data_revision": "v1.0.0"})
    # lm-eval merges --model_args into the task metadata: the model's revision must not reach the dataset
    model_args = "pretrained=org/some-model,revision=no-such-branch"
    # the fallback source is a missing folder: the run only passes when data_repo is what the rows come from
    env = {**hub.env(), "NEEDLEBENCH_DATA_DIR": str(tmp_path / "not-a-folder")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "--model",
            "needlebench-oracle",
            "--model_args",
            model_args,
            "--tasks",
            "needlebench_atc_en",
            "--metadata",
            metadata,
            "--limit",
            "8",
            "--output_path",
            str(output),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(sorted(output.rglob("results_*.json"))[-1].read_text())["results"]["needlebench_atc_en"]
    assert results["acc,none"] == pytest.approx(100.0) and results["perf_4,none"] == pytest.approx(100.0)


def test_hub_load_failures_are_one_line_errors(hub: HubServer, release: str):
    load = "needlebench.dataset.load:load_split"
    missing_repo, missing_revision, missing_config, renamed_key = hub.calls(
        [
            (load, ("atc_en",), {"repo_id": "org/no-such-dataset", "revision": "v1.0.0"}),
            (load, ("atc_en",), {"repo_id": release, "revision": "v9.9.9"}),
            (load, ("single_en_4k",), {"repo_id": release, "revision": "v1.0.0"}),
            (
                "needlebench.evaluation.harness.tasks:load_dataset",
                (),
                {"needlebench_config": "atc_en", "repo_id": release},
            ),
        ]
    )
    for error in (missing_repo, missing_revision, missing_config, renamed_key):
        assert isinstance(error, ClientError) and error.type_name == "NeedlebenchError", error
        assert "\n" not in error.message
    assert missing_repo.message.startswith("dataset org/no-such-dataset@v1.0.0: not found")
    # olah answers an unknown tag like an unknown repo (the Hub itself says "revision not found")
    assert missing_revision.message.startswith(f"dataset {release}@v9.9.9: ")
    assert "not found" in missing_revision.message
    assert missing_config.message.startswith(f"dataset {release}@v1.0.0 config 'single_en_4k': ")
    assert "data_repo" in renamed_key.message
