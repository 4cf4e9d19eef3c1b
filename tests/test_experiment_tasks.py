"""`needlebench tasks`: lm-eval tasks for a dataset folder's configs (experiments included), run with the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from needlebench.dataset.experiment import build_experiment
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.task_export import write_task_folder
from support.oracle import latest_results, run_oracle

ROOT = Path(__file__).resolve().parents[1]

INSPECT_STYLE = {
    "name": "inspect_style_3x7x3",
    "kind": "single",
    "language": "en",
    "needles": [
        {
            "needle": f"The access code for vault {c} is {n}.",
            "question": f"What is the access code for vault {c}?",
            "keyword": str(n),
        }
        for c, n in (("A", 7301), ("B", 5512), ("C", 9048))
    ],
    "sample_method": "random",
    "n_needles": 1,
    "lengths": {"min": 1000, "max": 3000, "n": 3},
    "depths": {"n": 7, "spacing": "linear"},
    "start_buffer": 50,
    "end_buffer": 50,
    "runs": 3,
    "guide": False,
    "prompt": "Read the document and answer.\n\n{context}\n\nQuestion: {question}",
}

CHAIN = {
    "name": "chain_zh",
    "kind": "multi_reasoning",
    "language": "zh",
    "needles": ["小红的老师是王明。", "王明的女儿叫李静。", "李静最喜欢的城市是杭州。"],
    "question": "小红的老师的女儿最喜欢哪个城市?",
    "answer": "杭州",
    "keyword": "杭州",
    "diff": 20,
    "lengths": [1500],
    "depths": [10, 50],
    "runs": 2,
    "length_buffer": 200,
}


RETRIEVAL = {
    "name": "three_facts_en",
    "kind": "multi_retrieval",
    "language": "en",
    "needles": [
        {
            "needle": "Mira's favourite fruit is the quince.",
            "question": "What is Mira's favourite fruit?",
            "keyword": "quince",
        },
        {
            "needle": "Tomas keeps his boat in Valparaiso.",
            "question": "Where does Tomas keep his boat?",
            "keyword": "Valparaiso",
        },
        {
            "needle": "The orchard gate is painted teal.",
            "question": "What colour is the orchard gate?",
            "keyword": "teal",
        },
    ],
    "diff": 30,
    "lengths": [1200],
    "depths": [0, 40],
    "runs": 2,
    "length_buffer": 300,
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("exp")
    out = base / "data"
    for data in (INSPECT_STYLE, CHAIN, RETRIEVAL):
        path = base / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
        build_experiment(path, out, progress=False)
    return out


def test_tasks_folder_lists_every_config_and_a_group_per_experiment(folder, tmp_path):
    tasks = tmp_path / "tasks"
    files = write_task_folder(folder, tasks)
    assert {
        "inspect_style_3x7x3.yaml",
        "chain_zh.yaml",
        "utils.py",
        "_default_single_template_yaml",
        "_default_multi_reasoning_template_yaml",
        "_needlebench_experiment_inspect_style_3x7x3.yaml",
        "_needlebench_experiment_chain_zh.yaml",
        "three_facts_en.yaml",
        "_default_multi_retrieval_template_yaml",
        "_needlebench_experiment_three_facts_en.yaml",
    } == set(files)
    task = yaml.safe_load((tasks / "chain_zh.yaml").read_text(encoding="utf-8").replace("!function", ""))
    assert task["task"] == "needlebench_chain_zh" and task["metadata"]["data_dir"] == str(folder.resolve())
    write_task_folder(folder, tasks)  # rerunning replaces its own files
    (tasks / "mine.txt").write_text("user file")
    with pytest.raises(NeedlebenchError, match="did not write"):
        write_task_folder(folder, tasks)
    assert (tasks / "mine.txt").read_text() == "user file"


@pytest.mark.slow
def test_oracle_scores_full_marks_on_experiments_through_lm_eval(folder, tmp_path):
    tasks = tmp_path / "tasks"
    write_task_folder(folder, tasks)
    names = ("inspect_style_3x7x3", "chain_zh", "three_facts_en")
    output = run_oracle(tmp_path / "oracle", (f"needlebench_experiment_{name}" for name in names), include_path=tasks)
    results = latest_results(output)
    single = results["results"]["needlebench_inspect_style_3x7x3"]
    chain = results["results"]["needlebench_chain_zh"]
    assert single["score,none"] == pytest.approx(100.0)
    assert chain["reference,none"] == pytest.approx(100.0) and chain["strict,none"] == pytest.approx(100.0)
    samples = sorted(output.rglob("samples_needlebench_inspect_style_3x7x3_*.jsonl"))[-1]
    docs = [json.loads(line)["doc"] for line in samples.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(docs) == 63  # 3 lengths x 7 depths x 3 runs
    assert {doc["context_length"] for doc in docs} == {1000, 2000, 3000}
    assert sorted({doc["repeat"] for doc in docs}) == [0, 1, 2]
    assert results["n-samples"]["needlebench_chain_zh"]["effective"] == 4
    retrieval = results["results"]["needlebench_three_facts_en"]
    assert retrieval["recall,none"] == pytest.approx(100.0) and retrieval["needle_hits,none"] == pytest.approx(100.0)
    assert results["n-samples"]["needlebench_three_facts_en"]["effective"] == 4


@pytest.mark.slow
def test_tasks_cli_writes_the_folder_and_refuses_a_non_dataset(folder, tmp_path):
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    result = cli("tasks", str(folder), "--out", str(tmp_path / "t"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "t" / "chain_zh.yaml").is_file()
    result = cli("tasks", str(tmp_path), "--out", str(tmp_path / "u"))
    assert result.returncode == 2 and "not a needlebench dataset" in result.stderr and not (tmp_path / "u").exists()


@pytest.mark.slow
def test_show_prints_an_experiment_row_of_the_folder(folder):
    """`needlebench show DIR ID` finds an experiment's row: the folder's experiment configs are looked up by name."""
    import subprocess
    import sys

    import pyarrow.parquet as pq

    manifest = json.loads((folder / "needlebench.json").read_text(encoding="utf-8"))
    rows = pq.read_table(folder / manifest["configs"]["chain_zh"]["files"][0]).to_pylist()
    result = subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", "show", str(folder), rows[1]["id"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.split("\n--- prompt ---\n")[0])["id"] == rows[1]["id"]
    assert result.stdout.split("\n--- prompt ---\n")[1] == rows[1]["prompt"] + (
        "" if rows[1]["prompt"].endswith("\n") else "\n"
    )
