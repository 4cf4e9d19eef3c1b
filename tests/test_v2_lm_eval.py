"""NeedleBench v2 end to end through lm-eval: the oracle scores full marks on one config of each v2 family."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.report import HEALTH
from support import build_data
from support.oracle import latest_results, run_oracle

pytestmark = pytest.mark.slow

V2_CONFIGS = ["v2_single_en_4k", "v2_multi_retrieval_zh_4k", "v2_multi_reasoning_en_4k", "v2_atc_zh"]
FULL_MARKS = {
    "score": 100.0,
    "recall": 100.0,
    "needle_hits": 100.0,
    "exact": 100.0,
    "accuracy": 100.0,
    "weighted": 100.0,
}
FULL_MARKS |= {harness.reference_metric(metric): value for metric, value in FULL_MARKS.items()}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(V2_CONFIGS, tmp_path_factory.mktemp("v2data") / "needlebench")


def test_oracle_scores_full_marks_on_every_v2_family(data_dir: Path, tmp_path: Path):
    output = run_oracle(tmp_path / "oracle", map(harness.task_name, V2_CONFIGS), data_dir=data_dir, limit=40)
    results = latest_results(output)["results"]
    expected = {
        "v2_single_en_4k": {"score"},
        "v2_multi_retrieval_zh_4k": {"recall", "needle_hits"},
        "v2_multi_reasoning_en_4k": {"exact"},
        "v2_atc_zh": {"accuracy", "weighted"},
    }
    expected = {
        config: names | {harness.reference_metric(name) for name in names} for config, names in expected.items()
    }
    for config in V2_CONFIGS:
        metrics = {
            key.split(",")[0]: value
            for key, value in results[harness.task_name(config)].items()
            if key.endswith(",none") and "_stderr" not in key and key.split(",")[0] not in HEALTH
        }
        assert set(metrics) == expected[config], config
        for metric, value in metrics.items():
            assert value == pytest.approx(FULL_MARKS[metric]), (config, metric, value)
    # the ATC sample covers all four question types (the first 40 rows: 2 relations x 4 types x 10 repeats)
    samples = sorted(output.rglob("samples_needlebench_v2_atc_zh_*.jsonl"))[-1].read_text(encoding="utf-8")
    types = {json.loads(line)["doc"]["question_type"] for line in samples.splitlines() if line.strip()}
    assert types == {"ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE"}
