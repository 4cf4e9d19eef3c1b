"""The reasoning policy (``--think-end`` / ``--think-unclosed``) travels as task metadata, not as environment variables.

The oracle answers a single-needle row with its needle sentence, which ends with ``.``; with the end marker ``.``
the default metric scores the text after the last ``.`` (nothing), so the score drops from 100 to 0. That is the
same through ``needlebench eval --think-end .``, through plain ``lm_eval --metadata '{"think_end": "."}'`` and through
the task loader called directly, and an environment variable ``NEEDLEBENCH_THINK_END`` changes nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.runner.evaluate import ORACLE_MODEL, run_eval
from needlebench.evaluation.scoring import thinking
from support import build_data

CONFIG = "single_en_4k"
TASK = harness.task_name(CONFIG)
REPO = Path(__file__).resolve().parent.parent
REPLAY = Path(__file__).resolve().parent / "support" / "replay_lm.py"
ROWS = 3


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data([CONFIG], tmp_path_factory.mktemp("think") / "needlebench")


def _env(**extra: str) -> dict[str, str]:
    """The test's environment without any ``NEEDLEBENCH_THINK_*`` variable, plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("NEEDLEBENCH_THINK")}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


def _newest(output: Path, pattern: str) -> Path:
    paths = sorted(output.rglob(pattern))
    assert paths, f"nothing like {pattern} under {output}"
    return paths[-1]


def _score(output: Path) -> float:
    return json.loads(_newest(output, "results_*.json").read_text(encoding="utf-8"))["results"][TASK]["score,none"]


def _samples(output: Path) -> list[dict[str, Any]]:
    text = _newest(output, f"samples_{TASK}_*.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_loader_records_the_metadata_policy_for_the_hooks(data_dir: Path):
    rows = harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir))["test"]
    row = dict(rows[0])
    answer = harness.oracle_answer(row)
    assert answer.rstrip().endswith(".")
    assert harness.process_single(row, [answer])["score"] == 100.0
    loaded = harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir), think_end=".")["test"]
    assert dict(loaded[0]) == row  # the rows lm-eval logs are unchanged
    assert harness.process_single(row, [answer]) == {"score": 0.0, "score_reference": 0.0}
    # think_unclosed: an output that opened <think> and never closed it
    unclosed = f"<think>{answer}"
    harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir), think_unclosed="empty")
    assert harness.process_single(row, [unclosed]) == {"score": 0.0, "score_reference": 100.0}
    harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir))  # a load without: the defaults again
    assert harness.process_single(row, [unclosed])["score"] == 100.0
    with pytest.raises(NeedlebenchError, match="^metadata think_unclosed 'drop' is not allowed; allowed: keep, empty$"):
        harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir), think_unclosed="drop")


def test_bad_or_clashing_policy_is_one_line_before_the_run(data_dir: Path, tmp_path: Path):
    common = ["run", "--model", ORACLE_MODEL, "--tasks", TASK, "--limit", "1", "--output_path", str(tmp_path / "o")]
    bad = {"data_dir": str(data_dir), "think_unclosed": "drop"}
    with pytest.raises(
        NeedlebenchError, match="^--metadata think_unclosed 'drop' is not allowed; allowed: keep, empty$"
    ):
        run_eval([*common, "--metadata", json.dumps(bad)])
    clash = {"data_dir": str(data_dir), "think_end": "</r>"}
    with pytest.raises(NeedlebenchError, match="^--think-end '.' and --metadata think_end='</r>' disagree"):
        run_eval([*common, "--metadata", json.dumps(clash), "--think-end", "."])
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_think_end_reaches_the_scores_through_needlebench_eval_without_environment(data_dir: Path, tmp_path: Path):
    def run(name: str, *extra: str, env: dict[str, str]) -> float:
        done = subprocess.run(
            [sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run", "--model", ORACLE_MODEL,
             "--tasks", TASK, "--limit", str(ROWS), "--metadata", json.dumps({"data_dir": str(data_dir)}),
             "--output_path", str(tmp_path / name), "--log_samples", *extra],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return _score(tmp_path / name)

    assert run("plain", env=_env()) == 100.0
    assert run("marked", "--think-end", ".", env=_env()) == 0.0
    # the former environment variables are no channel any more: the run scores under the defaults
    assert run("environment", env=_env(NEEDLEBENCH_THINK_END=".", NEEDLEBENCH_THINK_UNCLOSED="empty")) == 100.0


@pytest.mark.slow
def test_plain_lm_eval_metadata_scores_like_needlebench_eval(data_dir: Path, tmp_path: Path):
    rows = harness.load_dataset(needlebench_config=CONFIG, data_dir=str(data_dir))["test"]
    outputs = tmp_path / "outputs.json"
    answers = {str(rows[i]["id"]): harness.oracle_answer(rows[i]) for i in range(ROWS)}
    outputs.write_text(json.dumps({TASK: answers}), encoding="utf-8")

    def run(name: str, metadata: dict[str, Any]) -> Path:
        done = subprocess.run(
            [sys.executable, str(REPLAY), str(outputs), "run", "--model", "replay", "--tasks", TASK,
             "--include_path", str(REPO / "harness_tasks" / "needlebench"), "--limit", str(ROWS),
             "--metadata", json.dumps({"data_dir": str(data_dir), **metadata}),
             "--output_path", str(tmp_path / name), "--log_samples"],
            capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return tmp_path / name

    plain = run("plain", {})
    marked = run("marked", {thinking.THINK_END_KEY: "."})
    assert _score(plain) == 100.0 and _score(marked) == 0.0
    # the logged samples differ only in the scores: rows, their hashes, prompts and responses are those of the plain run
    volatile = {"score", "score_reference"}
    for left, right in zip(_samples(plain), _samples(marked), strict=True):
        assert right["score"] == 0.0
        assert {k: v for k, v in left.items() if k not in volatile} == {
            k: v for k, v in right.items() if k not in volatile
        }
