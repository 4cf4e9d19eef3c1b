"""Experiment files: the CDME / Inspect NIAH knobs as a named config, built with the built-in configs' guarantees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from needlebench.dataset.build import BuildOptions
from needlebench.dataset.rows import iter_rows
from needlebench.errors import NeedlebenchError
from needlebench.tasks.experiment import (
    experiment_schema,
    generate_depth_percents,
    load_experiment,
    parse_experiment,
    register_experiment,
)
from needlebench.tasks.schema import columns_for

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "scripts" / "experiments"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def rows_of(folder: Path, config: str) -> list[dict]:
    files = sorted((folder / "data" / config).glob("*.parquet"))
    return [row for file in files for row in pq.read_table(file).to_pylist()]


def small(**changes) -> dict:
    base = {
        "name": "my_test",
        "kind": "single",
        "language": "en",
        "needles": [
            {
                "needle": "The secret code of the lighthouse is 4471.",
                "question": "What is the secret code of the lighthouse?",
                "keyword": "4471",
            }
        ],
        "lengths": [600, 900],
        "depths": [0, 50, 100],
    }
    base.update(changes)
    return {key: value for key, value in base.items() if value is not None}


def write(tmp_path: Path, data: dict, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_example_files_validate_against_the_shipped_schema():
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(experiment_schema())
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        jsonschema.validate(yaml.safe_load(path.read_text(encoding="utf-8")), experiment_schema())
    assert {p.name for p in EXPERIMENTS.glob("*.yaml")} >= {
        "cdme_zh_8k.yaml",
        "cdme_multi_needle_zh.yaml",
        "inspect_niah.yaml",
    }


def test_depth_spacing_matches_the_reference():
    assert [int(d) for d in generate_depth_percents(20, "linear")] == [
        0,
        5,
        10,
        15,
        21,
        26,
        31,
        36,
        42,
        47,
        52,
        57,
        63,
        68,
        73,
        78,
        84,
        89,
        94,
        100,
    ]
    sigmoid = generate_depth_percents(5, "sigmoid")
    assert sigmoid == (0.669, 7.586, 50.0, 92.414, 99.331)


def test_inspect_defaults_give_225_rows_and_build_exactly(cl100k):
    exp = load_experiment(EXPERIMENTS / "inspect_niah.yaml")
    assert exp.lengths[0] == 10_000 and exp.lengths[-1] == 120_000 and len(exp.lengths) == 15
    assert exp.depths == generate_depth_percents(15) and exp.num_rows == 225
    spec = register_experiment(exp)
    assert spec.num_rows == 225
    rows = list(iter_rows(spec, BuildOptions(), (10_000,)))  # the shortest context; the full build is a script
    assert len(rows) == 15 and [row["depth_percent"] for row in rows] == list(exp.depths)
    for row in rows:
        assert list(row) == list(columns_for("single")) or set(row) == set(columns_for("single"))
        assert row["prompt_tokens"] == len(cl100k.encode(row["prompt"]))
        assert row["haystack_tokens"] == 10_000 and row["buffer"] == 0
        assert row["prompt"].startswith("You are a helpful AI bot") and row["prompt"].endswith(exp.needles[0].question)
        assert abs(row["needle_depths"][0] - row["depth_percent"]) < 1.0
        assert "Dolores Park" in row["prompt"]


@pytest.mark.slow
def test_cdme_zh_8k_builds_exactly_and_verify_rebuilds_it(tmp_path, cl100k):
    out = tmp_path / "ds"
    result = run("build", "--experiment", str(EXPERIMENTS / "cdme_zh_8k.yaml"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "needlebench.json").read_text(encoding="utf-8"))
    assert manifest["configs"]["cdme_zh_8k"]["rows"] == 800
    assert manifest["experiments"]["cdme_zh_8k"]["needles"][0]["keyword"] == "上海人工智能实验室"
    rows = rows_of(out, "cdme_zh_8k")
    assert len(rows) == 800 and set(rows[0]) == set(columns_for("single"))
    assert {row["context_length"] for row in rows} == {5000, 6000, 7000, 8000}
    for row in rows[::7]:
        assert row["prompt_tokens"] == len(cl100k.encode(row["prompt"]))
        assert row["haystack_tokens"] == row["context_length"] - 200
        assert "小明最喜欢的实习的地点就是上海人工智能实验室。" in row["prompt"]
        assert abs(row["needle_depths"][0] - row["depth_percent"]) < 1.5
    assert len({row["seed"] for row in rows}) == 800
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "### cdme_zh_8k" in card and "上海人工智能实验室 |" in card and "runs: 10" in card
    from needlebench.dataset.verify import verify_folder

    assert verify_folder(out) == {}  # rebuilt from the manifest alone: same fingerprint, byte for byte


def test_cdme_multi_needle_places_the_chain_every_diff_percent(cl100k):
    exp = load_experiment(EXPERIMENTS / "cdme_multi_needle_zh.yaml")
    assert exp.diff == 25 and exp.keyword == "Jack" and len(exp.needles) == 3 and exp.num_rows == 800
    spec = register_experiment(exp)
    rows = list(iter_rows(spec, BuildOptions(), (5000,)))
    assert len(rows) == 200 and set(rows[0]) == set(columns_for("multi_reasoning"))
    for row in rows[::11]:
        depth = row["depth_percent"]
        assert row["requested_depths"] == [min(100.0, depth + 25 * i) for i in range(3)]
        assert all(abs(a - r) < 1.5 for a, r in zip(row["needle_depths"], row["requested_depths"]))
        assert row["keywords"] == ["Jack"] and row["num_needles"] == 3
        assert row["prompt_tokens"] == len(cl100k.encode(row["prompt"]))
        assert row["haystack_tokens"] == 4800


@pytest.mark.slow
def test_beside_builtin_configs_in_one_folder_and_byte_identical(tmp_path):
    out = tmp_path / "ds"
    assert run("build", "single_en_4k", "--out", str(out)).returncode == 0
    path = write(tmp_path, small(runs=2))
    result = run("build", "--experiment", str(path), "--out", str(out))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "needlebench.json").read_text(encoding="utf-8"))
    assert list(manifest["configs"]) == ["single_en_4k", "my_test"] and list(manifest["experiments"]) == ["my_test"]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "config_name: my_test" in card and "config_name: single_en_4k" in card
    again = tmp_path / "again"
    assert run("build", "--experiment", str(path), "--out", str(again)).returncode == 0
    first = (out / "data" / "my_test" / "test-00000-of-00001.parquet").read_bytes()
    assert (again / "data" / "my_test" / "test-00000-of-00001.parquet").read_bytes() == first
    assert len(rows_of(out, "my_test")) == 2 * 3 * 2


@pytest.mark.slow
def test_an_experiment_rebuilt_under_its_name_writes_the_new_rows_and_verifies(tmp_path):
    """Building a changed experiment file into the folder holding its earlier version writes the new rows (not
    those of the version the folder's manifest records), and `verify` rebuilds them."""
    out = tmp_path / "ds"
    assert run("build", "--experiment", str(write(tmp_path, small())), "--out", str(out)).returncode == 0
    changed = write(tmp_path, small(lengths=[700]), "changed.yaml")
    result = run("build", "--experiment", str(changed), "--out", str(out))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((out / "needlebench.json").read_text(encoding="utf-8"))
    assert manifest["experiments"]["my_test"]["lengths"] == [700]
    assert {row["context_length"] for row in rows_of(out, "my_test")} == {700}
    assert manifest["configs"]["my_test"]["rows"] == len(rows_of(out, "my_test")) == 3
    verified = run("verify", str(out))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_start_and_end_buffers_keep_needles_out_of_the_edges():
    exp = parse_experiment(small(name="buffered", lengths=[2000], start_buffer=400, end_buffer=400, depths=[0, 100]))
    rows = list(iter_rows(register_experiment(exp), BuildOptions()))
    first, last = rows
    assert first["requested_depths"] == [20.0] and last["requested_depths"] == [80.0]
    # as Inspect, the buffers are where the first and last positions aim (placement snaps to a sentence boundary)
    assert abs(first["needle_depths"][0] - 20) < 1.5 and abs(last["needle_depths"][0] - 80) < 1.5


def test_sampling_methods_and_custom_template():
    needles = [
        {
            "needle": f"The code of door {i} is {1000 + i}.",
            "question": f"What is the code of door {i}?",
            "keyword": str(1000 + i),
        }
        for i in range(4)
    ]
    sequential = parse_experiment(
        small(
            name="seq",
            needles=needles,
            sample_method="sequential",
            fixed_index=1,
            n_needles=3,
            lengths=[600],
            depths=[50],
        )
    )
    rows = list(iter_rows(register_experiment(sequential), BuildOptions()))
    assert [row["keywords"][0] for row in rows] == ["1001", "1002", "1003"]
    fixed = parse_experiment(
        small(
            name="fix",
            needles=needles,
            fixed_index=2,
            runs=2,
            lengths=[600],
            depths=[50],
            prompt="Q: {question}\n<doc>{context}</doc>\nA:",
        )
    )
    rows = list(iter_rows(register_experiment(fixed), BuildOptions()))
    assert [row["keywords"][0] for row in rows] == ["1002", "1002"]
    assert rows[0]["prompt"].startswith("Q: What is the code of door 2?") and rows[0]["prompt"].endswith("</doc>\nA:")
    random = parse_experiment(
        small(name="rnd", needles=needles, sample_method="random", n_needles=4, lengths=[600], depths=[50])
    )
    picks = [row["keywords"][0] for row in iter_rows(register_experiment(random), BuildOptions())]
    assert picks == [row["keywords"][0] for row in iter_rows(register_experiment(random), BuildOptions())]
    assert set(picks) <= {"1000", "1001", "1002", "1003"}


BAD = [
    # (change, words the one-line error must contain)
    ({"colour": "red"}, ["unknown key colour"]),
    ({"kind": "haystack"}, ["key kind", "'haystack'", "single, multi_retrieval, multi_reasoning"]),
    ({"language": "fr"}, ["key language", "'fr'", "en, zh"]),
    ({"name": "My Test"}, ["key name", "'My Test'"]),
    ({"name": "single_en_4k"}, ["single_en_4k", "built-in"]),
    ({"lengths": "4k"}, ["key lengths", "'4k'", "a list of an integer"]),
    ({"lengths": {"min": 9000, "max": 1000, "n": 3}}, ["key lengths.min", "9000", "lengths.max"]),
    ({"lengths": [600, 600]}, ["key lengths", "distinct"]),
    ({"depths": [0, 150]}, ["key depths", "150"]),
    ({"depths": {"n": 5, "spacing": "log"}}, ["key depths.spacing", "'log'", "linear, sigmoid"]),
    ({"start_buffer": -1}, ["key start_buffer", "-1", ">= 0"]),
    ({"length_buffer": 600}, ["key length_buffer", "600", "shortest length (600)"]),
    ({"runs": 0}, ["key runs", "0", ">= 1"]),
    ({"question_position": "middle"}, ["key question_position", "'middle'", "end, start"]),
    ({"prompt": "no slots here"}, ["key prompt", "{context}", "{question}"]),
    ({"sample_method": "shuffle"}, ["key sample_method", "'shuffle'", "fixed, sequential, random"]),
    ({"fixed_index": 3}, ["key fixed_index", "3", "below the 1 needle"]),
    ({"needles": None}, ["exactly one of the keys needles, needles_file"]),
    ({"needles": [{"needle": "x"}]}, ["key needles.0", "question"]),
    ({"needles_file": "missing.jsonl", "needles": None}, ["key needles_file", "missing.jsonl", "existing"]),
    ({"diff": 10}, ["key diff", "10", "nothing for kind single"]),
    ({"lengths": None}, ["missing key lengths"]),
]


@pytest.mark.parametrize("change,words", BAD, ids=[next(iter(change)) + f"-{i}" for i, (change, _) in enumerate(BAD)])
def test_bad_keys_are_one_line_errors(tmp_path, change, words):
    data = small()
    for key, value in change.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    with pytest.raises(NeedlebenchError) as error:
        exp = load_experiment(write(tmp_path, data))
        register_experiment(exp)
    message = str(error.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.slow
def test_cli_bad_experiment_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "ds"
    for text in ("kind: [unclosed", "- a\n- list\n", yaml.safe_dump(small(kind="weird"))):
        path = tmp_path / "bad.yaml"
        path.write_text(text, encoding="utf-8")
        result = run("build", "--experiment", str(path), "--out", str(out))
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "bad.yaml" in result.stderr
        assert not out.exists()
    path = write(tmp_path, small())
    result = run("build", "--experiment", str(path), "--seed", "7", "--out", str(out))
    assert result.returncode == 2 and "--seed does not apply with --experiment" in result.stderr and not out.exists()


def test_readme_example_is_a_valid_experiment():
    text = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")  # the experiment-file page
    block = text.split("```yaml\nname: my_test", 1)[1].split("```", 1)[0]
    data = yaml.safe_load("name: my_test" + block)
    data.pop("haystack")  # a folder of the reader's
    exp = parse_experiment(data)
    assert exp.lengths == (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000) and len(exp.depths) == 10
    assert exp.num_rows == 8 * 10 * 3


def test_multi_retrieval_experiment_places_every_needle(cl100k):
    needles = [
        {"needle": f"Locker {i} holds a {w} umbrella.", "question": f"What does locker {i} hold?", "keyword": w}
        for i, w in ((1, "red"), (2, "green"), (3, "blue"))
    ]
    exp = parse_experiment(
        small(
            name="lockers",
            kind="multi_retrieval",
            needles=needles,
            diff=30,
            lengths=[1500],
            depths=[10, 60],
            length_buffer=200,
        )
    )
    rows = list(iter_rows(register_experiment(exp), BuildOptions()))
    assert len(rows) == 2 and set(rows[0]) == set(columns_for("multi_retrieval"))
    assert rows[0]["requested_depths"] == [10.0, 40.0, 70.0] and rows[1]["requested_depths"] == [60.0, 90.0, 100.0]
    for row in rows:
        assert row["keywords"] == ["red", "green", "blue"] and row["num_needles"] == 3
        assert all(n in row["prompt"] for n in row["needles"]) and row["haystack_tokens"] == 1300
        assert row["prompt_tokens"] == len(cl100k.encode(row["prompt"]))
        assert all(abs(a - r) < 3 for a, r in zip(row["needle_depths"], row["requested_depths"]))
        assert "What does locker 1 hold?" in row["question"] and "What does locker 3 hold?" in row["question"]
