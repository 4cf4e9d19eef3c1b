"""`needlebench eval`, `budget` and `report` as a newcomer meets them (issue 27): every mistake is one line on
stderr with exit status 2, naming the bad value and what is allowed; the length check reads a GGUF model as
lm-eval does; `--subset` merges into `--metadata` and a `--config` YAML's settings; `eval run --help` lists
needlebench's options first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support import build_data
from support.smollm import GGUF_NAME, gguf_path

ORACLE = ["eval", "run", "--model", "needlebench-oracle"]


def run(
    *args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )  # fmt: skip


def one_error(result: subprocess.CompletedProcess) -> str:
    """The run failed with status 2 and exactly one line on stderr, which is returned."""
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("needlebench: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k", "atc_en"], tmp_path_factory.mktemp("eval-errors") / "data")


# --------------------------------------------------------------------------------------------- eval: options


def test_task_typo_says_did_you_mean():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_singel_en_4k"))
    assert "unknown task 'needlebench_singel_en_4k'; did you mean needlebench_single_en_4k?" in line


def test_broken_metadata_json_is_one_line():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--metadata", "{data_dir: x}"))
    assert "--metadata" in line and "'{data_dir: x}' is not valid JSON" in line and "double quotes" in line


def test_unknown_metadata_key_is_refused_with_the_allowed_keys():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--metadata", '{"dir": "x"}'))
    assert "--metadata key 'dir'" in line
    assert "allowed: data_dir, data_repo, data_revision, release_seed, context_lengths, subset" in line


def test_model_args_keys_are_not_metadata_keys(data_dir: Path, tmp_path: Path):
    """lm-eval merges --model_args into the tasks' metadata; only keys the user wrote in --metadata are checked."""
    done = run(*ORACLE, "--model_args", "delay=0", "--tasks", "needlebench_atc_en", "--subset", "4",
               "--metadata", json.dumps({"data_dir": str(data_dir)}),
               "--output_path", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def test_output_path_that_is_a_file_is_one_line(tmp_path: Path):
    existing = tmp_path / "results.txt"
    existing.write_text("mine\n", encoding="utf-8")
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--output_path", str(existing)))
    assert f"--output_path {existing} is an existing file; give a folder" in line
    assert existing.read_text(encoding="utf-8") == "mine\n"


def test_unknown_option_and_bad_values_are_one_line():
    assert "unrecognized arguments: --sbuset" in one_error(
        run(*ORACLE, "--tasks", "needlebench_atc_en", "--sbuset", "4")
    )
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "four"))
    assert "--subset" in line and "'four' is not a whole number" in line
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "4", "--limit", "2"))
    assert "--subset and --limit both choose rows" in line
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--log_samples"))
    assert "Specify --output_path if providing --log_samples" in line


def test_model_typo_says_did_you_mean():
    line = one_error(run("eval", "run", "--model", "hff", "--tasks", "needlebench_single_en_4k"))
    assert "unknown model 'hff'; did you mean hf? allowed: " in line
    assert "needlebench-oracle" in line and "vllm" in line


def test_subset_edge_cases_are_one_line():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "0"))
    assert "--subset" in line and "'0' is not a positive number of rows per task" in line
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--metadata", '{"subset": 4}', "--limit", "2"))
    assert "--metadata subset and --limit both choose rows" in line
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--metadata", '{"subset": "four"}'))
    assert "--metadata subset 'four' is not a whole number" in line
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "4", "--metadata", '{"subset": "5"}'))
    assert "--subset 4 and --metadata subset='5' disagree" in line
    # the same number written as a string agrees (the tasks read it as a number); refused here only by --limit
    line = one_error(run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "4", "--metadata", '{"subset": "4"}',
                         "--limit", "2"))  # fmt: skip
    assert "--subset and --limit both choose rows" in line


def _config(tmp_path: Path, **settings: object) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"model": "needlebench-oracle", **settings}), encoding="utf-8")
    return str(path)


def test_config_yaml_is_checked_like_the_command_line(tmp_path: Path):
    """A --config YAML's tasks, metadata and keys get the same checks as the command line's, before lm-eval runs."""
    line = one_error(run("eval", "run", "--config", _config(tmp_path, tasks=["needlebench_singel_en_4k"])))
    assert "unknown task 'needlebench_singel_en_4k'; did you mean needlebench_single_en_4k?" in line
    config = _config(tmp_path, tasks="needlebench_single_en_4k", metadata={"dir": "x"})
    assert "--metadata key 'dir' is not read by the needlebench tasks" in one_error(
        run("eval", "run", "--config", config)
    )
    line = one_error(run("eval", "run", "--config", _config(tmp_path, modle="hf", tasks=["needlebench_atc_en"])))
    assert "key 'modle' is not an lm-eval option; did you mean model? allowed: model, model_args, tasks" in line
    line = one_error(run("eval", "run", "--config", _config(tmp_path, tasks=["needlebench_atc_en"], limit=2),
                         "--subset", "4"))  # fmt: skip
    assert "--subset and --limit both choose rows" in line
    line = one_error(run("eval", "run", "--config", str(tmp_path / "missing.yaml")))
    assert "--config" in line and "Config file not found" in line


def test_config_yaml_include_path_gets_the_projects_tasks_beside_it(tmp_path: Path):
    """The project's task folder is added beside a YAML include_path, which the task-name check reads too."""
    mine = tmp_path / "mytasks"
    mine.mkdir()
    task = {"task": "needlebench_custom", "dataset_path": "json", "output_type": "generate_until",
            "doc_to_text": "q", "doc_to_target": "a"}  # fmt: skip
    (mine / "custom.yaml").write_text(yaml.safe_dump(task), encoding="utf-8")
    config = _config(tmp_path, tasks=["needlebench_custm"], include_path=str(mine))
    assert "did you mean needlebench_custom?" in one_error(run("eval", "run", "--config", config))
    config = _config(tmp_path, tasks=["needlebench_custom", "needlebench_singel_en_4k"], include_path=str(mine))
    assert "did you mean needlebench_single_en_4k?" in one_error(run("eval", "run", "--config", config))


def test_run_help_lists_needlebench_options_first():
    done = run("eval", "run", "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    ours = text.index("needlebench options:")
    for option in ("--subset N", "--no-length-check", "--skip-too-long", "--resume", "--reasoning", "--think-end MARK"):
        assert ours < text.index(option) < text.index("model and tasks:"), option
    assert text.index("--think-end MARK") < text.index("--model_args")


# --------------------------------------------------------------------------------------------- eval: runs


def test_subset_merges_into_metadata(data_dir: Path, tmp_path: Path):
    out = tmp_path / "out"
    done = run(*ORACLE, "--tasks", "needlebench_single_en_4k,needlebench_atc_en", "--subset", "4",
               "--metadata", json.dumps({"data_dir": str(data_dir)}),
               "--output_path", str(out), "--log_samples")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))
    assert results["n-samples"]["needlebench_single_en_4k"]["effective"] == 4
    assert results["n-samples"]["needlebench_atc_en"]["effective"] == 4  # one whole item of 4 rotations
    assert results["config"]["model"] == "needlebench-oracle"


def test_subset_keeps_the_config_yaml_metadata(data_dir: Path, tmp_path: Path):
    """--subset adds to a --config YAML's metadata instead of replacing it (lm-eval replaces whole keys): its
    data_dir is used, not data built on the fly."""
    config = _config(tmp_path, tasks=["needlebench_single_en_4k"], metadata={"data_dir": str(tmp_path / "none")})
    done = run("eval", "run", "--config", config, "--subset", "4", "--output_path", str(tmp_path / "bad"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"data_dir '{tmp_path / 'none'}' is not a directory" in done.stderr.splitlines()[-1]
    out, mine = tmp_path / "out", tmp_path / "mytasks"
    mine.mkdir()  # a YAML include_path: the project's tasks stay available beside it
    config = _config(tmp_path, tasks=["needlebench_single_en_4k"], metadata={"data_dir": str(data_dir)},
                     include_path=str(mine), output_path=str(out))  # fmt: skip
    done = run("eval", "run", "--config", config, "--subset", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text(encoding="utf-8"))
    assert results["n-samples"]["needlebench_single_en_4k"]["effective"] == 4


def test_gguf_model_is_length_checked_as_lm_eval_reads_it(data_dir: Path, tmp_path: Path):
    """The README's model args (pretrained=DIR,gguf_file=NAME): the check reads the GGUF's tokenizer and, with a
    window too small for the 4k rows, refuses before loading the model (one line naming the rows)."""
    gguf = gguf_path()
    cache = tmp_path / "cache"
    args = ["eval", "run", "--model", "hf", "--device", "cpu", "--apply_chat_template",
            "--model_args", f"pretrained={gguf.parent},gguf_file={GGUF_NAME},max_length=2048",
            "--tasks", "needlebench_single_en_4k", "--subset", "4", "--gen_kwargs", "max_gen_toks=32",
            "--metadata", json.dumps({"data_dir": str(data_dir)})]  # fmt: skip
    line = one_error(run(*args, env={"NEEDLEBENCH_CACHE": str(cache)}))
    assert "row(s) do not fit the window of 2048 tokens (max_length 2048)" in line
    assert "needlebench_single_en_4k" in line and "/4" in line
    cached = list((cache / "gguf-tokenizers").glob("*/tokenizer.json"))
    assert len(cached) == 1  # converted once, keyed by the GGUF's sha256
    # without max_length the window is the GGUF's context_length, as transformers reads it into the model config
    from needlebench.evaluation.eval_args import parse_eval
    from needlebench.evaluation.eval_guard import model_window

    parsed = parse_eval(["run", "--model", "hf", "--model_args", f"pretrained={gguf.parent},gguf_file={GGUF_NAME}"])[2]
    assert model_window(parsed, parsed.model_args) == (8192, "the GGUF's context_length 8192")


# --------------------------------------------------------------------------------------------- budget


def test_budget_reads_gguf_forms(data_dir: Path, tmp_path: Path):
    gguf = gguf_path()
    env = {"NEEDLEBENCH_CACHE": str(tmp_path / "cache")}
    common = ["budget", "atc_en", "--max-length", "8192", "--chat-template", "--data-dir", str(data_dir)]
    outputs = []
    for form in (["--tokenizer", str(gguf)], ["--tokenizer", str(gguf.parent)],
                 ["--tokenizer", str(gguf.parent), "--gguf-file", GGUF_NAME]):  # fmt: skip
        done = run(*common, *form, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "All prompts fit" in done.stdout
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]  # the same counts, from the cache after the first
    line = one_error(run(*common, "--tokenizer", str(gguf.parent), "--gguf-file", "nope.gguf", env=env))
    assert "gguf_file 'nope.gguf' is not in" in line and GGUF_NAME in line
    other = tmp_path / "notes.txt"
    other.write_text("x", encoding="utf-8")
    line = one_error(run(*common, "--tokenizer", str(other), env=env))
    assert "is a file but not a .gguf" in line


# --------------------------------------------------------------------------------------------- report


def test_report_name_matching_nothing_is_refused(data_dir: Path, tmp_path: Path):
    out = tmp_path / "results"
    done = run(*ORACLE, "--tasks", "needlebench_atc_en", "--subset", "4",
               "--metadata", json.dumps({"data_dir": str(data_dir)}),
               "--output_path", str(out), "--log_samples")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = one_error(run("report", str(out), "--out", str(tmp_path / "report"), "--name", "llm_smollm=Smol"))
    assert "--name llm_smollm=Smol matches no model or results path" in line
    assert "needlebench-oracle" in line and str(out) in line
    assert not (tmp_path / "report").exists()
    done = run("report", str(out), "--out", str(tmp_path / "report"), "--name", "needlebench-oracle=Oracle")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Oracle" in (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
