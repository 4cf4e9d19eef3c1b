"""Quiet, named output (issue 34): what `needlebench eval run`, `report`, `tasks` and `judge` print and name.

* an oracle run prints neither lm-eval's ``max_seq_lengths`` advice nor git's ``fatal: not a git repository``, its
  results land in ``needlebench-oracle/``, and its printed table has no ``per_star`` / ``needle_hits`` rows (they
  stay in the samples, where the report reads them);
* a haystack too short for the windows of a build is one warning, however many configs cycle it;
* piped ``report`` / ``tasks`` print each path on one line;
* the models-compared figure of an ATC run with one needle count has whole-number ticks;
* ``judge`` sends no ATC or Counting-Stars row and counts as "from cache" only verdicts it took from its cache.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import figures as report_figures
from needlebench.evaluation.report.load import load_results
from support import atc_rows, build_data, single_row, write_samples

#: One small config of each family with a diagnostic metric (or none), and ATC (several needle counts).
CONFIGS = ["atc_en", "counting_stars_acquisition_en_128k", "multi_retrieval_en_4k"]


def needlebench(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """An oracle run through `needlebench eval run`, from a folder outside any git repository."""
    root = tmp_path_factory.mktemp("oracle")
    data = build_data(CONFIGS, root / "data")
    work = root / "work"
    work.mkdir()
    result = needlebench(
        "eval",
        "run",
        "--model",
        "needlebench-oracle",
        "--tasks",
        ",".join(harness.task_name(config) for config in CONFIGS),
        "--metadata",
        json.dumps({"data_dir": str(data)}),
        "--output_path",
        str(root / "out"),
        "--log_samples",
        cwd=work,
        env={"GIT_CEILING_DIRECTORIES": str(root)},  # git never looks above: no repository around the run
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result, root / "out"


@pytest.mark.slow
def test_eval_prints_no_advice_meant_for_other_tasks(oracle_run) -> None:
    result, _out = oracle_run
    assert "max_seq_lengths" not in result.stdout + result.stderr  # RULER's metadata key; needlebench refuses it


@pytest.mark.slow
def test_eval_outside_a_git_repository_prints_no_git_error(oracle_run) -> None:
    result, out = oracle_run
    output = result.stdout + result.stderr
    assert "not a git repository" not in output and "fatal:" not in output
    (results,) = (out / "needlebench-oracle").glob("results_*.json")
    assert json.loads(results.read_text(encoding="utf-8"))["git_hash"] is None  # lm-eval's value there, as before


@pytest.mark.slow
def test_oracle_results_land_in_a_folder_named_after_it(oracle_run) -> None:
    _result, out = oracle_run
    assert [path.name for path in out.iterdir()] == ["needlebench-oracle"]
    (results,) = (out / "needlebench-oracle").glob("results_*.json")
    data = json.loads(results.read_text(encoding="utf-8"))
    assert data["model_name"] == "needlebench-oracle"
    assert len(list((out / "needlebench-oracle").glob("samples_*.jsonl"))) == len(CONFIGS)


def _table_metrics(stdout: str) -> list[str]:
    """The Metric column of lm-eval's printed results table."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    column = header.index("Metric")
    return [line.strip("|").split("|")[column].strip() for line in lines[2:]]


@pytest.mark.slow
def test_diagnostics_stay_out_of_the_printed_table_and_in_the_samples(oracle_run) -> None:
    result, out = oracle_run
    metrics = _table_metrics(result.stdout)
    assert {"star_score", "recall", "perf_4", "acc"} <= set(metrics)
    assert not [metric for metric in metrics if metric.startswith(("per_star", "needle_hits"))]
    # the samples keep them: the report's heatmaps read them there
    (stars,) = (out / "needlebench-oracle").glob("samples_needlebench_counting_stars_*.jsonl")
    row = json.loads(stars.read_text(encoding="utf-8").splitlines()[0])
    assert isinstance(row["per_star"], list) and "per_star" in row["metrics"]
    (hits,) = (out / "needlebench-oracle").glob("samples_needlebench_multi_retrieval_*.jsonl")
    assert isinstance(json.loads(hits.read_text(encoding="utf-8").splitlines()[0])["needle_hits"], list)
    # and lm-eval's results file is its own, aggregates included
    (results,) = (out / "needlebench-oracle").glob("results_*.json")
    scores = json.loads(results.read_text(encoding="utf-8"))["results"]
    assert "per_star,none" in scores["needlebench_counting_stars_acquisition_en_128k"]


# --------------------------------------------------------------------------------------------- one warning per cause


@pytest.mark.slow
def test_a_short_haystack_is_one_warning_naming_the_longest_window(tmp_path: Path) -> None:
    """A Chinese haystack too short for two configs (each cycling it a different number of times): one warning,
    for the longest window, as the 1000k configs of the default haystack get."""
    from needlebench.sources.corpus import load_corpus

    haystack = tmp_path / "short_zh.txt"
    haystack.write_text(load_corpus(None, "zh").text[:3000], encoding="utf-8")
    result = needlebench(
        "build", "single_zh_4k", "single_zh_8k", "--depths", "50", "--haystack-zh", str(haystack),
        "--out", str(tmp_path / "data"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.replace("\r", "\n").splitlines() if "warning:" in line]
    assert len(warnings) == 1, warnings
    assert "the zh haystack short_zh.txt" in warnings[0] and "the 12,096 its longest window needs" in warnings[0]


# --------------------------------------------------------------------------------------------- piped paths

#: A folder name long enough that its path passes 80 columns (rich's width when stdout is not a terminal).
LONG = "a_folder_name_long_enough_to_pass_eighty_columns_when_printed_with_its_parents"


@pytest.mark.slow
def test_piped_tasks_and_report_print_whole_paths(tmp_path: Path) -> None:
    data = build_data(["atc_en"], tmp_path / "data")
    tasks_out = tmp_path / LONG / "tasks"
    result = needlebench("tasks", str(data), "--out", str(tasks_out))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1 and f"--include_path {tasks_out} " in result.stdout

    results = tmp_path / "results" / "model"
    write_samples(results, harness.task_name("atc_en"), _atc_records("m", needles=(2, 3)))
    report_out = tmp_path / LONG / "report"
    result = needlebench("report", str(tmp_path / "results"), "--out", str(report_out), "--no-figures")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(len(line) > 80 for line in lines)
    assert all(Path(line).is_file() and Path(line).parent == report_out for line in lines)


# --------------------------------------------------------------------------------------------- needle axis


def _atc_records(model: str, needles: tuple[int, ...], right: int = 4) -> list[dict]:
    """Samples of one ATC item per needle count, its first `right` rotations answered right."""
    records = []
    for count in needles:
        for index, row in enumerate(atc_rows("atc_en", item_id=f"{model}-{count}", num_needles=count)):
            correct = index < right
            records.append({"doc": row, "acc": 100.0 * correct, "perf_4": [row["item_id"], row["rotation"], correct]})
    return records


@pytest.mark.slow
def test_one_needle_count_is_one_whole_tick(tmp_path: Path) -> None:
    results = tmp_path / "results"
    write_samples(results / "model-a", harness.task_name("atc_en"), _atc_records("a", needles=(3,)))
    write_samples(results / "model-b", harness.task_name("atc_en"), _atc_records("b", needles=(3,), right=2))
    report = needlebench("report", str(results / "model-a"), str(results / "model-b"), "--out", str(tmp_path / "r"))
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "r" / "compare_models_by_length.png").is_file()
    # the same figure, drawn here to read its axis
    planned = report_figures.plan_figures(load_results([results / "model-a", results / "model-b"]))
    (compare,) = [figure for figure in planned if figure.name == "compare_models_by_length"]
    (axes,) = report_figures.draw(compare).axes
    assert list(axes.get_xticks()) == [3]
    low, high = axes.get_xlim()
    assert low <= 2.5 and high >= 3.5


# --------------------------------------------------------------------------------------------- judge


class _CountingJudge(BaseHTTPRequestHandler):
    prompts: list[str] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _CountingJudge.prompts.append(body["messages"][0]["content"])
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": "Rating: [[7]]"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def _judge_folder(root: Path) -> Path:
    """S-RT rows (four with the same texts, two distinct others) and one ATC item, as an lm-eval run logs them."""
    results = root / "results" / "model"
    srt = [
        {"doc": single_row(context_length=1000, depth_percent=float(depth), question="Q?"), "resp": "A", "score": 0.0}
        for depth in (0, 25, 50, 75)
    ]
    srt += [
        {"doc": single_row(question="Other?", repeat=repeat), "resp": answer, "score": 100.0}
        for repeat, answer in ((1, "B"), (2, "C"))
    ]
    write_samples(results, harness.task_name("single_en_4k"), srt)
    write_samples(results, harness.task_name("atc_en"), _atc_records("m", needles=(2,), right=3))
    return root / "results"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_judge_without_a_server_takes_nothing_from_its_cache(tmp_path: Path) -> None:
    results = _judge_folder(tmp_path)
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = needlebench("judge", str(results), "--base-url", url, "--model", "j", "--retries", "0", "--timeout", "5")
    assert result.returncode == 1
    assert "(3 requested, 0 from cache" in result.stdout  # three distinct texts; the repeats are no cache hits
    assert "4 ATC and Counting-Stars rows not sent" in result.stdout
    assert "6 of 6 rows got no verdict" in result.stderr


@pytest.mark.slow
def test_judge_sends_only_rows_the_report_scores_with_it(tmp_path: Path) -> None:
    results = _judge_folder(tmp_path)
    before = needlebench("report", str(results), "--out", str(tmp_path / "before"), "--no-figures")
    assert before.returncode == 0, before.stderr
    _CountingJudge.prompts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CountingJudge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        result = needlebench("judge", str(results), "--base-url", url, "--model", "j")
        assert result.returncode == 0, result.stderr
        assert "(3 requested, 0 from cache, 3 rows repeating the texts of another" in result.stdout
        assert len(_CountingJudge.prompts) == 3 and all("Ann" not in prompt for prompt in _CountingJudge.prompts)
        again = needlebench("judge", str(results), "--base-url", url, "--model", "j")
        assert "(0 requested, 3 from cache" in again.stdout and len(_CountingJudge.prompts) == 3
    finally:
        server.shutdown()
        server.server_close()
    folder = results / "model"
    assert [path.name.split("_needlebench_")[1].split("_2")[0] for path in folder.glob("judged_samples_*.jsonl")] == [
        "single_en_4k"
    ]
    after = needlebench("report", str(results), "--out", str(tmp_path / "after"), "--no-figures")
    assert after.returncode == 0, after.stderr
    # ATC is scored by rule either way; S-RT now by the judge's rating
    assert (tmp_path / "after" / "atc.csv").read_bytes() == (tmp_path / "before" / "atc.csv").read_bytes()
    assert (tmp_path / "after" / "scores.csv").read_bytes() != (tmp_path / "before" / "scores.csv").read_bytes()
