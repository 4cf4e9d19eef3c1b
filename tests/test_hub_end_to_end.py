"""Whole commands against a local Hub (olah): build from the paper's inputs with `--corpus opencompass`, and an
lm-eval task reading a published release by repo id and tag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import HubServer, commit_files, olah_fixture

from needlebench.build import build_dataset
from needlebench.hub import OPENCOMPASS_REPO
from needlebench.options import BuildOptions
from needlebench.publish import publish_to_git

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
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
    )


def test_build_with_the_paper_inputs_from_the_hub(hub: HubServer, tmp_path: Path):
    files = {
        "README.md": "---\nlicense: mit\n---\n# fixture\n",
        "PaulGrahamEssays.jsonl": "".join(json.dumps({"title": str(i), "text": t}) + "\n" for i, t in enumerate(ESSAYS)),
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
        hub.env(), tmp_path,
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


def test_lm_eval_task_reads_a_published_release_by_repo_id(hub: HubServer, tmp_path: Path):
    folder = tmp_path / "release"
    build_dataset(["atc_en"], folder, BuildOptions(), progress=False)
    publish_to_git(folder, hub.repo_path("org/needlebench"), version="1.0.0")
    output = tmp_path / "results"
    code = (
        "import sys; from needlebench.evaluate import run_eval; sys.exit(run_eval(sys.argv[1:]))"
    )
    metadata = json.dumps({"repo_id": "org/needlebench", "revision": "v1.0.0"})
    result = subprocess.run(
        [sys.executable, "-c", code, "run", "--model", "needlebench-oracle", "--tasks", "needlebench_atc_en",
         "--metadata", metadata, "--limit", "8", "--output_path", str(output)],
        env=hub.env(), cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(sorted(output.rglob("results_*.json"))[-1].read_text())["results"]["needlebench_atc_en"]
    assert results["acc,none"] == pytest.approx(100.0) and results["perf_4,none"] == pytest.approx(100.0)
