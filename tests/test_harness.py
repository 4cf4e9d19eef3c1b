"""The lm-eval hooks (process_results, aggregations, data source), the oracle and the generated task folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.runner.evaluate import oracle_answers
from needlebench.tasks.grid import get_config, registry
from support import (
    KEYWORD,
    NEEDLE,
    STAR_COUNTS,
    WRONG_COUNTS,
    atc_rows,
    counting_stars_row,
    fixture_row,
    multi_reasoning_row,
    multi_retrieval_row,
    single_row,
)

REPO = Path(__file__).resolve().parent.parent
TASK_DIR = REPO / "harness_tasks" / "needlebench"


def _load_script():
    spec = importlib.util.spec_from_file_location("gen_harness_tasks", REPO / "scripts" / "gen_harness_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------- process_results


def test_single_scores_keyword_and_miss():
    row = single_row()
    assert harness.process_single(row, [f"The answer: {KEYWORD}."]) == {"score": 100.0, "score_reference": 100.0}
    miss = harness.process_single(row, ["I do not know."])["score"]
    assert 0.0 <= miss <= 20.0
    assert harness.process_single(row, [harness.oracle_answer(row)])["score"] == 100.0


def test_multi_retrieval_recall_and_hits():
    row = multi_retrieval_row()
    result = harness.process_multi_retrieval(row, ["Stardust Shard and Azure Key"])
    assert result["recall"] == pytest.approx(200 / 3)
    assert result["needle_hits"] == [100.0, 0.0, 100.0]
    assert harness.process_multi_retrieval(row, [harness.oracle_answer(row)])["recall"] == 100.0


def test_multi_reasoning_reference_and_strict():
    row = multi_reasoning_row(answer="the city of Paris")
    result = harness.process_multi_reasoning(row, ["It is Paris."])
    assert result["strict"] == 0.0
    assert 0.0 < result["reference"] < 100.0
    assert harness.process_multi_reasoning(row, [harness.oracle_answer(row)]) == {
        "reference": 100.0,
        "strict": 100.0,
        "reference_reference": 100.0,
    }


def test_atc_rows_and_circular_aggregation():
    rows = atc_rows()
    answers = [f"Answer: {row['answer_letter']}" for row in rows]
    results = [harness.process_atc(row, [answer]) for row, answer in zip(rows, answers, strict=True)]
    assert [r["acc"] for r in results] == [100.0] * 4
    assert harness.agg_perf_4([r["perf_4"] for r in results]) == 100.0
    # one wrong rotation fails the whole item
    wrong = harness.process_atc(rows[1], ["Answer: A" if rows[1]["answer_letter"] != "A" else "Answer: B"])
    assert wrong["acc"] == 0.0
    assert harness.agg_perf_4([results[0]["perf_4"], wrong["perf_4"], *[r["perf_4"] for r in results[2:]]]) == 0.0
    # tuples survive a JSON round trip (logged samples, gathered results)
    assert harness.agg_perf_4(json.loads(json.dumps([r["perf_4"] for r in results]))) == 100.0


def test_atc_reasoning_and_zh_oracle_answers():
    for config in ("atc_en_reasoning", "atc_zh", "atc_zh_reasoning", "atc_en_512"):
        for row in atc_rows(config):
            assert harness.process_atc(row, [harness.oracle_answer(row)])["acc"] == 100.0, config


def test_atc_open_score():
    row = fixture_row("atc_en_open", answer="Ann Smith", prompt_style="open", context_length=0)
    assert harness.process_atc_open(row, ["The eldest relative is Ann Smith."]) == {
        "score": 100.0,
        "score_reference": 100.0,
    }
    assert harness.process_atc_open(row, ["Bob"]) == {"score": 0.0, "score_reference": 0.0}
    # the reference scores open ATC with the S-RT evaluator: a near miss earns 0.2 x the similarity to the name
    near = harness.process_atc_open(row, ["Ann Smyth"])
    assert near["score"] == 0.0 and near["score_reference"] == pytest.approx(0.2 * 100 * (1 - 1 / 8))
    assert harness.process_atc_open(row, [harness.oracle_answer(row)]) == {"score": 100.0, "score_reference": 100.0}


def test_counting_stars_per_star_scores():
    acq = counting_stars_row()
    result = harness.process_counting_stars(acq, ['{"little_penguin": [15, 117, 1, 2]}'])
    assert result["per_star"] == [1.0, 1.0, 0.0, 0.0]
    assert result["star_score"] == 0.5
    rea = counting_stars_row("counting_stars_reasoning_zh_128k")
    wrong_only = json.dumps({"小企鹅": WRONG_COUNTS}, ensure_ascii=False)
    assert harness.process_counting_stars(rea, [wrong_only])["per_star"] == [0.25] * 4
    for row in (acq, rea):
        assert harness.process_counting_stars(row, [harness.oracle_answer(row)]) == {
            "star_score": 1.0,
            "per_star": [1.0] * 4,
            "star_score_reference": 1.0,
            "per_star_reference": [1.0] * 4,
        }
    assert json.loads(harness.oracle_answer(rea)) == {"小企鹅": STAR_COUNTS}


def test_perf_4_counts_only_items_with_all_four_rotations():
    rows = atc_rows()
    whole = [harness.process_atc(row, [f"Answer: {row['answer_letter']}"])["perf_4"] for row in rows]
    # a second item cut short by --limit: two rotations, both right (it would count as correct)
    partial = [("cut-item", rotation, True) for rotation in ("ABCD", "BCDA")]
    wrong = ("whole-wrong", "ABCD", False)
    others = [("whole-wrong", rotation, True) for rotation in ("BCDA", "CDAB", "DABC")]
    assert harness.agg_perf_4(whole + partial) == 100.0
    assert harness.agg_perf_4(whole + partial + [wrong, *others]) == 50.0  # 1 of 2 whole items
    assert harness.agg_perf_4(partial) == 0.0  # no whole item at all


def test_flat_mean_and_empty_aggregations():
    assert harness.agg_flat_mean([[1, 0], [1.0, 1.0]]) == 0.75
    assert harness.agg_flat_mean([]) == 0.0
    assert harness.agg_perf_4([]) == 0.0


@pytest.mark.slow
def test_oracle_answers_look_rows_up_by_prompt():
    rows = [single_row(prompt="first prompt"), multi_reasoning_row(prompt="second prompt")]

    def request(context, doc):
        return SimpleNamespace(args=(context, {"until": []}), doc=doc)

    plain = oracle_answers([request("first prompt", rows[0]), request("second prompt", rows[1])])
    assert plain == [NEEDLE.strip(), "Paris"]
    # a chat template wraps the prompt; the request's own doc is not needed to find the row
    wrapped = oracle_answers(
        [
            request("<|user|>second prompt<|assistant|>", rows[1]),
            request("<|user|>first prompt<|assistant|>", None),
            request("first prompt", rows[0]),
        ]
    )
    assert wrapped == ["Paris", NEEDLE.strip(), NEEDLE.strip()]
    with pytest.raises(NeedlebenchError):
        oracle_answers([request("unrelated", None)])


def test_oracle_finds_rows_of_loaded_splits(monkeypatch):
    row = counting_stars_row(prompt="stars prompt")
    monkeypatch.setattr(harness, "_LOADED_SPLITS", [[row]])
    answer = oracle_answers([SimpleNamespace(args=("[INST] stars prompt [/INST]", {}), doc=None)])
    assert json.loads(answer[0]) == {"little_penguin": STAR_COUNTS}


# --------------------------------------------------------------------------------------------- data source


def test_load_dataset_rejects_bad_input(tmp_path):
    with pytest.raises(NeedlebenchError, match="needlebench_config"):
        harness.load_dataset(version=1.0)
    with pytest.raises(NeedlebenchError, match="unknown config"):
        harness.load_dataset(needlebench_config="single_en_3k")
    with pytest.raises(NeedlebenchError, match="data_dir"):
        harness.load_dataset(needlebench_config="single_en_4k", data_dir=str(tmp_path / "missing"))
    with pytest.raises(NeedlebenchError, match="data_revision 'v1.0.0' given without data_repo"):
        harness.load_dataset(needlebench_config="single_en_4k", data_revision="v1.0.0")
    with pytest.raises(NeedlebenchError, match="'repo_id' was renamed to 'data_repo'"):
        harness.load_dataset(needlebench_config="single_en_4k", repo_id="org/needlebench", revision="v1.0.0")
    with pytest.raises(NeedlebenchError, match="allowed: 1000, 2000, 3000, 4000"):
        harness.load_dataset(needlebench_config="single_en_4k", context_lengths=1500)


def test_load_dataset_names_a_config_missing_from_the_folder(tmp_path):
    from hub_server import make_dataset_folder

    make_dataset_folder(tmp_path, {"atc_en": 2})
    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' is not built .* atc_en"):
        harness.load_dataset(needlebench_config="single_en_4k", data_dir=str(tmp_path))


def test_resolve_source_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv(harness.DATA_DIR_ENV, raising=False)
    assert harness.resolve_source({"pretrained": "x"}) == {
        "data_dir": None,
        "repo_id": None,
        "revision": None,
        "release_seed": None,
    }
    hub = harness.resolve_source({"data_repo": "org/needlebench", "data_revision": "v1.0.0", "release_seed": "7"})
    assert hub == {"data_dir": None, "repo_id": "org/needlebench", "revision": "v1.0.0", "release_seed": 7}
    monkeypatch.setenv(harness.DATA_DIR_ENV, str(tmp_path))
    assert harness.resolve_source({})["data_dir"] == str(tmp_path.resolve())
    assert harness.resolve_source({"data_repo": "org/x"})["data_dir"] is None  # explicit metadata wins


def test_model_args_do_not_change_the_data_source(monkeypatch):
    """lm-eval merges ``--model_args`` into the metadata: the hf/vllm ``pretrained`` and ``revision`` are ignored."""
    monkeypatch.delenv(harness.DATA_DIR_ENV, raising=False)
    model_args = {"pretrained": "org/model", "revision": "main", "dtype": "bfloat16"}
    assert harness.resolve_source(model_args) == {
        "data_dir": None,
        "repo_id": None,
        "revision": None,
        "release_seed": None,
    }
    merged = model_args | {"data_repo": "org/needlebench", "data_revision": "v1.0.0"}
    source = harness.resolve_source(merged)
    assert source["repo_id"] == "org/needlebench" and source["revision"] == "v1.0.0"
    assert harness.resolve_source(model_args | {"data_repo": "org/needlebench"})["revision"] is None


def test_load_split_errors_are_one_line(tmp_path):
    from hub_server import make_dataset_folder
    from needlebench.dataset.load import load_split

    folder = tmp_path / "built"
    make_dataset_folder(folder, {"atc_en": 4})
    assert len(load_split("atc_en", data_dir=str(folder))) == 4
    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' is not built .* atc_en") as built:
        load_split("single_en_4k", data_dir=str(folder))
    (folder / "needlebench.json").unlink()  # a plain dataset folder: datasets itself finds no such config
    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' could not be loaded from data_dir") as plain:
        load_split("single_en_4k", data_dir=str(folder))
    with pytest.raises(NeedlebenchError, match="HF_HUB_OFFLINE is set") as offline:  # conftest: offline
        load_split("single_en_4k", repo_id="org/no-such-dataset", revision="v1.0.0")
    for error in (built, plain, offline):
        assert "\n" not in str(error.value)


def test_context_length_filter_forms():
    spec = get_config("single_en_4k")
    assert harness._context_length_filter(None, spec) is None
    assert harness._context_length_filter(1000, spec) == {1000}
    assert harness._context_length_filter("1000|2000", spec) == {1000, 2000}
    assert harness._context_length_filter([3000, "4000"], spec) == {3000, 4000}


# --------------------------------------------------------------------------------------------- task folder


def test_committed_task_files_are_up_to_date():
    script = _load_script()
    assert script.main(["--check", "--out", str(TASK_DIR)]) == 0


def test_every_config_has_a_task_with_version_and_budget():
    files = harness.task_files()
    for name, spec in registry().items():
        cfg = yaml.safe_load(files[f"{name}.yaml"])
        assert cfg["task"] == f"needlebench_{name}"
        assert cfg["metadata"] == {"version": harness.TASK_VERSION, "needlebench_config": name}
        assert harness.max_gen_toks_for(spec) > 0
    assert harness.max_gen_toks_for(get_config("atc_en_reasoning")) == 1024
    assert harness.max_gen_toks_for(get_config("counting_stars_acquisition_en_128k")) == 8 * 32 + 64
    assert harness.max_gen_toks_for(get_config("counting_stars_reasoning_zh_1000k_m1024")) == 8 * 1024 + 64
    assert harness.max_gen_toks_for(get_config("multi_retrieval_en_4k")) > harness.max_gen_toks_for(
        get_config("single_en_4k")
    )


def test_base_templates_are_greedy_generate_until():
    for template in harness.TEMPLATES.values():
        text = harness.task_files()[harness.base_template_filename(template.key)]
        cfg = yaml.load(text, Loader=_FunctionLoader)
        assert cfg["output_type"] == "generate_until"
        assert cfg["doc_to_text"] == "prompt" and cfg["doc_to_target"] == "answer"
        assert cfg["generation_kwargs"]["do_sample"] is False and cfg["generation_kwargs"]["temperature"] == 0.0
        assert cfg["custom_dataset"] == "!function utils.load_dataset"
        assert cfg["metadata"]["version"] == harness.TASK_VERSION


class _FunctionLoader(yaml.SafeLoader):
    """Reads ``!function x`` as the string ``"!function x"``."""


_FunctionLoader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def test_groups_cover_families_and_sizes():
    files = harness.task_files()
    groups = {name: yaml.safe_load(text) for name, text in files.items() if name.startswith("_needlebench_")}
    by_name = {cfg["group"]: cfg for cfg in groups.values()}
    expected = {
        "needlebench_single",
        "needlebench_multi_retrieval",
        "needlebench_multi_reasoning",
        "needlebench_atc",
        "needlebench_counting_stars",
        "needlebench_4k",
        "needlebench_8k",
        "needlebench_32k",
        "needlebench_128k",
        "needlebench_200k",
        "needlebench_256k",
        "needlebench_1000k",
    }
    v2_expected = {f"needlebench_v2_{part}" for part in ("single", "multi_retrieval", "multi_reasoning", "atc")}
    v2_expected |= {f"needlebench_v2_{size}" for size in ("4k", "8k", "32k", "128k", "200k", "256k", "1000k")}
    assert set(by_name) == expected | v2_expected | {"needlebench_v2"}
    # v1 groups hold no v2 task; the v2 groups hold every v2 task once
    assert not any("_v2_" in task for group in expected for task in by_name[group]["task"])
    families = ("single", "multi_retrieval", "multi_reasoning", "atc")
    assert (
        len(by_name["needlebench_v2"]["task"])
        == 44
        == sum(len(by_name[f"needlebench_v2_{f}"]["task"]) for f in families)
    )
    assert by_name["needlebench_v2_atc"]["task"] == ["needlebench_v2_atc_en", "needlebench_v2_atc_zh"]
    assert len(by_name["needlebench_v2_4k"]["task"]) == 6
    assert [m["metric"] for m in by_name["needlebench_v2_atc"]["aggregate_metric_list"]] == [
        "accuracy",
        "weighted",
        "accuracy_reference",
        "weighted_reference",
    ]
    assert "needlebench_counting_stars_reasoning_zh_128k_m64" in by_name["needlebench_128k"]["task"]
    assert "needlebench_counting_stars_acquisition_en_1000k" in by_name["needlebench_1000k"]["task"]
    assert all(t.endswith("_4k") for t in by_name["needlebench_4k"]["task"])
    assert len(by_name["needlebench_atc"]["task"]) == 8
    for cfg in by_name.values():
        assert cfg["metadata"]["version"] == harness.TASK_VERSION
        assert cfg["aggregate_metric_list"]
    metrics_4k = [m["metric"] for m in by_name["needlebench_4k"]["aggregate_metric_list"]]
    assert metrics_4k == [
        "score",
        "score_reference",
        "recall",
        "recall_reference",
        "reference",
        "strict",
        "reference_reference",
    ]


def test_lm_eval_finds_and_parses_every_task():
    """The Python equivalent of ``lm-eval validate --tasks <all> --include_path harness_tasks``."""
    from lm_eval.config.task import TaskConfig
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    names = harness.all_task_names() + harness.all_group_names()
    assert sorted(manager.match_tasks(names)) == sorted(names)
    for name in registry():
        cfg = load_yaml(TASK_DIR / f"{name}.yaml", resolve_func=True)
        task_config = TaskConfig(**cfg)
        assert callable(task_config.custom_dataset) and callable(task_config.process_results)
        assert task_config.generation_kwargs["until"] == []
        for entry in task_config.metric_list:
            assert entry["aggregation"] == "mean" or callable(entry["aggregation"])


def test_eval_arguments_are_parsed_by_lm_eval_parser():
    """The legacy form (no sub-command) is a run; the user's --include_path is kept as given."""
    from needlebench.evaluation.runner.options import parse_eval

    command, namespace, args = parse_eval(["--model", "hf", "--tasks", "a,b", "--include_path=/y"])
    assert command == "run" and namespace.tasks == ["a", "b"] and args.user_include_path == "/y"
    command, namespace, args = parse_eval(["run", "--model", "hf", "--tasks", "t"])
    assert namespace.include_path is None and args.tasks == ["t"]  # run_eval adds the project's folder


def test_run_eval_returns_lm_eval_exit_status(capsys):
    from needlebench.evaluation.runner.evaluate import run_eval

    with pytest.raises(NeedlebenchError, match="unrecognized arguments: --no-such-option"):
        run_eval(["run", "--no-such-option"])
