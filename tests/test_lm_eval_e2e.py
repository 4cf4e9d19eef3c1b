"""End to end through lm-evaluation-harness itself (CPU, offline).

* the oracle model scores full marks on one small real config of every family, run through ``needlebench
  eval`` (lm-eval's CLI with our model registered and the task folder included by default);
* SmolLM2-135M-Instruct (``--model hf``, chat template) on a few 1,000-token S-RT English prompts: every output
  is scored by the hook and the mean is above zero;
* ``report`` on those lm-eval outputs writes tables and PNG heatmaps.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from needlebench.evaluation import scoring
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import HEALTH, write_report
from needlebench.evaluation.report import SAMPLES_FILE_RE as SAMPLES_NAME
from needlebench.evaluation.runner.evaluate import ORACLE_MODEL, run_eval
from needlebench.tasks.grid import get_config
from support import build_data, results_with_health
from support.oracle import run_oracle
from support.smollm import smollm_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
TASK_DIR = REPO / "harness_tasks" / "needlebench"

#: One small config of every family (and both ATC prompt kinds).
ORACLE_CONFIGS = [
    "single_en_4k",
    "multi_retrieval_zh_4k",
    "multi_reasoning_en_4k",
    "atc_en",
    "atc_zh_reasoning",
    "atc_en_open",
    "counting_stars_acquisition_en_128k",
    "counting_stars_reasoning_zh_128k",
]
#: Full marks per metric (NeedleBench 0..100, Counting-Stars 0..1).
FULL_MARKS = {
    "score": 100.0,
    "recall": 100.0,
    "needle_hits": 100.0,
    "reference": 100.0,
    "strict": 100.0,
    "acc": 100.0,
    "perf_4": 100.0,
    "star_score": 1.0,
    "per_star": 1.0,
}
#: ... and on every reference-exact twin (the oracle's answer forms are ones the reference rules read too).
FULL_MARKS |= {harness.reference_metric(metric): value for metric, value in FULL_MARKS.items() if metric != "strict"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(ORACLE_CONFIGS, tmp_path_factory.mktemp("data") / "needlebench")


@pytest.fixture(scope="module")
def srt_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k"], tmp_path_factory.mktemp("srt") / "needlebench")


def _results_json(output: Path) -> dict[str, Any]:
    paths = sorted(output.rglob("results_*.json"))
    assert paths, f"lm-eval wrote no results under {output}"
    return results_with_health(paths[-1])


def _samples(output: Path, task: str) -> list[dict[str, Any]]:
    """The newest samples of `task` under `output` (whichever model folder holds them)."""
    paths = sorted(
        (match.group("date"), path)
        for path in output.rglob(f"samples_{task}_*.jsonl")
        if (match := SAMPLES_NAME.match(path.name)) and match.group("task") == task
    )
    assert paths, f"lm-eval logged no samples of {task}"
    return [json.loads(line) for line in paths[-1][1].read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def oracle_output(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tasks = map(harness.task_name, ORACLE_CONFIGS)
    return run_oracle(tmp_path_factory.mktemp("oracle"), tasks, data_dir=data_dir, limit=40)


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_oracle_scores_full_marks_through_the_cli(oracle_output: Path, tmp_path: Path):
    output = oracle_output
    results = _results_json(output)["results"]
    for config in ORACLE_CONFIGS:
        metrics = {
            key.split(",")[0]: value
            for key, value in results[harness.task_name(config)].items()
            if key.endswith(",none") and "_stderr" not in key and key.split(",")[0] not in HEALTH
        }
        assert results[harness.task_name(config)]["skipped_too_long,none"] == 0  # run health beside the scores
        assert results[harness.task_name(config)]["no_final_answer,none"] == 0.0
        assert metrics, config
        # every default metric has its reference twin beside it
        assert {harness.reference_metric(m) for m in metrics if m not in ("strict",) and "_reference" not in m} <= set(
            metrics
        ), config
        for metric, value in metrics.items():
            assert value == pytest.approx(FULL_MARKS[metric]), (config, metric, value)
    # ATC rows come as whole items (four rotations), so perf_4 covers complete items
    atc = _samples(output, "needlebench_atc_en")
    assert {sample["doc"]["rotation"] for sample in atc} == {"ABCD", "BCDA", "CDAB", "DABC"}
    stars = _samples(output, "needlebench_counting_stars_acquisition_en_128k")
    assert len(stars) == 32 and all(sample["per_star"] == [1.0] * 32 for sample in stars)

    report_dir = tmp_path / "oracle-report"
    write_report(output, report_dir)
    (row,) = _csv(report_dir / "needlebench_4k.csv")
    assert row["Model"] == ORACLE_MODEL and float(row["S-RT EN"]) == 100.0 and row["S-RT EN n"] == "40"
    assert row["Coverage"].startswith("partial: ")  # --limit 40 took the first 40 rows (length 1,000 only)
    assert (report_dir / f"heatmap_{ORACLE_MODEL}_needlebench_counting_stars_reasoning_zh_128k.png").is_file()
    reference_dir = tmp_path / "oracle-reference"
    write_report(output, reference_dir, scoring="reference", figures=False)
    (row,) = _csv(reference_dir / "needlebench_4k.csv")
    assert float(row["S-RT EN"]) == 100.0 and float(row["M-RT ZH"]) == 100.0 and float(row["M-RS EN"]) == 100.0
    (atc,) = _csv(reference_dir / "atc.csv")
    assert float(atc["EN-Direct-CE"]) == 100.0 and float(atc["ZH-Reasoning-CE"]) == 100.0
    assert all(float(line["Me-Acq EN"]) == 1.0 for line in _csv(reference_dir / "counting_stars.csv"))


def test_report_command_on_the_oracle_run(oracle_output: Path, tmp_path: Path):
    """The front door of the report: `needlebench report` on lm-eval's output writes the tables write_report does."""
    import subprocess
    import sys

    out = tmp_path / "cli-report"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from needlebench.cli import main; main()",
            "report",
            str(oracle_output),
            "--out",
            str(out),
            "--no-figures",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert str(out / "needlebench_4k.csv") in "".join(result.stdout.split())  # Rich wraps long paths when piped
    write_report(oracle_output, tmp_path / "library-report", figures=False)
    for name in ("needlebench_4k.csv", "needlebench_4k.md", "scores.csv"):
        assert (out / name).read_bytes() == (tmp_path / "library-report" / name).read_bytes(), name
    (row,) = _csv(out / "needlebench_4k.csv")
    assert row["Model"] == ORACLE_MODEL and float(row["S-RT EN"]) == 100.0


def test_subset_keeps_project_tasks_with_include_path_and_models_share_a_table(
    oracle_output: Path, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """lm-eval's ``dummy`` model beside the oracle in one folder; ``--subset`` covers the grid; a custom task from
    the user's ``--include_path`` runs beside the project's task of the same config and stays apart."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the dummy model names a Hub tokenizer it never needs here
    results = tmp_path / "results"
    shutil.copytree(oracle_output, results)
    mine = tmp_path / "mytasks"
    mine.mkdir()
    (mine / "my_single.yaml").write_text(
        f"include: {TASK_DIR / 'single_en_4k.yaml'}\ntask: my_single_en_4k\ntask_alias: my_single_en_4k\n",
        encoding="utf-8",
    )
    status = run_eval(
        [
            "run",
            "--model",
            "dummy",
            "--tasks",
            "needlebench_single_en_4k,my_single_en_4k",
            "--include_path",
            str(mine),
            "--subset",
            "20",
            "--metadata",
            json.dumps({"data_dir": str(data_dir)}),
            "--output_path",
            str(results),
            "--log_samples",
        ]
    )
    assert status == 0
    dummy = [s for s in _samples(results, "needlebench_single_en_4k") if s["resps"][0][0] == "lol"]
    assert len(dummy) == 20
    assert {s["doc"]["context_length"] for s in dummy} == {1000, 2000, 3000, 4000}
    assert {s["doc"]["depth_percent"] for s in dummy} == {float(d) for d in get_config("single_en_4k").depths}

    write_report([results], tmp_path / "report")
    rows = {row["Model"]: row for row in _csv(tmp_path / "report" / "needlebench_4k.csv")}
    assert set(rows) == {ORACLE_MODEL, "dummy", "dummy (my_single_en_4k)"}
    assert float(rows[ORACLE_MODEL]["S-RT EN"]) == 100.0
    assert float(rows["dummy"]["S-RT EN"]) < 100.0 and rows["dummy"]["S-RT EN n"] == "20"
    assert "all 4 lengths, 20/20 depths" in rows["dummy"]["Coverage"]
    assert rows["dummy (my_single_en_4k)"]["S-RT EN n"] == "20"


def test_subset_of_a_real_split_covers_every_cell(data_dir: Path):
    for config, cells in (("single_en_4k", 80), ("multi_reasoning_en_4k", 320)):
        split = harness.load_dataset(needlebench_config=config, data_dir=str(data_dir), subset=cells)["test"]
        spec = get_config(config)
        assert len(split) == cells
        assert {
            (row["context_length"], row["depth_percent"], row["num_needles"] if "num_needles" in row else 1)
            for row in split
        } == {(length, float(depth), n) for length in spec.lengths for depth in spec.depths for n in spec.needle_counts}
        again = harness.load_dataset(needlebench_config=config, data_dir=str(data_dir), subset=cells)["test"]
        assert again["id"] == split["id"]  # fixed seed


@pytest.fixture(scope="module")
def smollm_run(srt_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 with lm-eval's ``hf`` model and its chat template on four 1,000-token S-RT prompts."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    output = tmp_path_factory.mktemp("smollm")
    manager = TaskManager(
        include_path=str(TASK_DIR),
        include_defaults=False,
        metadata={"data_dir": str(srt_data_dir), "context_lengths": 1000},
    )
    tracker = EvaluationTracker(output_path=str(output))
    results = simple_evaluate(
        model="hf",
        model_args={"pretrained": str(smollm_dir()), "dtype": "float32", "max_length": 2048},
        tasks=["needlebench_single_en_4k"],
        limit=4,
        batch_size=4,
        device="cpu",
        apply_chat_template=True,
        log_samples=True,
        task_manager=manager,
        evaluation_tracker=tracker,
        gen_kwargs={"max_gen_toks": 48},  # the needle sentence is about 20 tokens; keeps the CPU run short
    )
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    return output


def _request_text(arguments: Any) -> str:
    """The context of a logged request (a list of argument tuples, or lm-eval's ``gen_args_N`` dict form)."""
    first = arguments[0] if isinstance(arguments, list) else next(iter(arguments.values()))
    return first[0] if isinstance(first, list) else first["arg_0"]


def test_smollm_outputs_are_scored_by_the_hook(smollm_run: Path):
    samples = _samples(smollm_run, "needlebench_single_en_4k")
    assert len(samples) == 4
    for sample in samples:
        doc = sample["doc"]
        assert doc["context_length"] == 1000
        prompt = _request_text(sample["arguments"])
        assert doc["prompt"] in prompt and prompt != doc["prompt"]  # the chat template wraps the prompt
        response = sample["filtered_resps"][0]
        expected = scoring.single_retrieval_score(response, doc["needles"][0], doc["keywords"][0])
        assert sample["score"] == pytest.approx(expected)
    score = _results_json(smollm_run)["results"]["needlebench_single_en_4k"]["score,none"]
    assert score > 0.0


def test_report_on_lm_eval_output_writes_tables_and_images(smollm_run: Path, tmp_path: Path):
    written = write_report(smollm_run, tmp_path / "report")
    names = {path.name for path in written}
    model = smollm_dir().name  # named after --model_args pretrained
    heatmap = f"heatmap_{model}_needlebench_single_en_4k.png"
    assert {
        "needlebench_4k.md",
        "needlebench_4k.csv",
        "scores.csv",
        "lm_eval_results.csv",
        heatmap,
        "README.md",
        "report.html",
    } <= names
    with Image.open(tmp_path / "report" / heatmap) as image:
        image.verify()
        assert image.format == "PNG"
    (row,) = _csv(tmp_path / "report" / "needlebench_4k.csv")
    assert row["Model"] == model and row["S-RT EN n"] == "4"


def test_plain_dataset_path_task_reads_a_pinned_folder(srt_data_dir: Path, tmp_path: Path):
    """The README's plain ``dataset_path``/``dataset_name`` form: our task included, lm-eval's own loader."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from needlebench.evaluation.runner.evaluate import oracle_model

    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "plain.yaml").write_text(
        "\n".join(
            [
                f"include: {TASK_DIR / 'single_en_4k.yaml'}",
                "task: plain_single_en_4k",
                "task_alias: plain_single_en_4k",
                "custom_dataset: null",
                f"dataset_path: {srt_data_dir}",
                "dataset_name: single_en_4k",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    results = simple_evaluate(model=oracle_model(), tasks=["plain_single_en_4k"], limit=5, task_manager=manager)
    assert results["results"]["plain_single_en_4k"]["score,none"] == 100.0
