"""`needlebench eval`, `budget` and `report` as a newcomer meets them (issue 27): every mistake is one line on
stderr with exit status 2, naming the bad value and what is allowed; the length check reads a GGUF model as
lm-eval does; `--subset` merges into `--metadata` and a `--config` YAML's settings; `eval run --help` lists
needlebench's options first."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
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


@pytest.mark.slow
def test_task_typo_says_did_you_mean():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_singel_en_4k"))
    assert "unknown task 'needlebench_singel_en_4k'; did you mean needlebench_single_en_4k?" in line


@pytest.mark.slow
def test_broken_metadata_json_is_one_line():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--metadata", "{data_dir: x}"))
    assert "--metadata" in line and "'{data_dir: x}' is not valid JSON" in line and "double quotes" in line


@pytest.mark.slow
def test_unknown_metadata_key_is_refused_with_the_allowed_keys():
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--metadata", '{"dir": "x"}'))
    assert "--metadata key 'dir'" in line
    assert "allowed: data_dir, data_repo, data_revision, release_seed, context_lengths, subset" in line


@pytest.mark.slow
def test_model_args_keys_are_not_metadata_keys(data_dir: Path, tmp_path: Path):
    """lm-eval merges --model_args into the tasks' metadata; only keys the user wrote in --metadata are checked."""
    done = run(*ORACLE, "--model_args", "delay=0", "--tasks", "needlebench_atc_en", "--subset", "4",
               "--metadata", json.dumps({"data_dir": str(data_dir)}),
               "--output_path", str(tmp_path / "out"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_output_path_that_is_a_file_is_one_line(tmp_path: Path):
    existing = tmp_path / "results.txt"
    existing.write_text("mine\n", encoding="utf-8")
    line = one_error(run(*ORACLE, "--tasks", "needlebench_single_en_4k", "--output_path", str(existing)))
    assert f"--output_path {existing} is an existing file; give a folder" in line
    assert existing.read_text(encoding="utf-8") == "mine\n"


@pytest.mark.slow
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


@pytest.mark.slow
def test_model_typo_says_did_you_mean():
    line = one_error(run("eval", "run", "--model", "hff", "--tasks", "needlebench_single_en_4k"))
    assert "unknown model 'hff'; did you mean hf? allowed: " in line
    assert "needlebench-oracle" in line and "vllm" in line


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_run_help_lists_needlebench_options_first():
    done = run("eval", "run", "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    ours = text.index("needlebench options:")
    for option in ("--subset N", "--no-length-check", "--skip-too-long", "--resume", "--reasoning", "--think-end MARK"):
        assert ours < text.index(option) < text.index("model and tasks:"), option
    assert text.index("--think-end MARK") < text.index("--model_args")


# --------------------------------------------------------------------------------------------- eval: mistakes
# Each is refused before a model loads (the models named do not exist), in a few seconds, with the fix in the line.

#: Seconds a refusal may take on a busy 2-core machine (a model load, or lm-eval indexing its 12k task YAMLs,
#: takes longer; the issue measured 5-19 s before these checks).
QUICK = 30


def quick_error(*args: str) -> str:
    started = time.monotonic()
    line = one_error(run(*args))
    assert time.monotonic() - started < QUICK, line
    return line


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this environment")
def test_a_backend_not_installed_names_its_install_command(tmp_path: Path):
    line = quick_error("eval", "run", "--model", "vllm", "--model_args", f"pretrained={tmp_path / 'model'}",
                       "--tasks", "needlebench_single_en_4k")  # fmt: skip
    assert "--model vllm needs the package 'vllm', which is not installed" in line
    assert "pip install 'needlebench[vllm]'" in line


@pytest.mark.slow
def test_model_args_the_backend_does_not_take_are_named_with_the_keys_it_takes(tmp_path: Path):
    model = f"pretrained={tmp_path / 'model'}"
    line = quick_error("eval", "run", "--model", "hf", "--model_args", f"{model},max_model_len=8192",
                       "--tasks", "needlebench_single_en_4k")  # fmt: skip
    assert "--model_args key 'max_model_len' is not taken by --model hf (a vllm key); did you mean max_length?" in line
    assert "hf takes: pretrained, " in line and "gguf_file" in line
    line = quick_error("eval", "run", "--model", "hf", "--model_args", f"{model},max_lenght=8192",
                       "--tasks", "needlebench_single_en_4k")  # fmt: skip
    assert "--model_args key 'max_lenght' is not taken by --model hf; did you mean max_length?" in line
    line = quick_error("eval", "run", "--model", "local-completions", "--tasks", "needlebench_single_en_4k",
                       "--model_args", "base_url=http://127.0.0.1:9/v1/completions,num_concurent=2")  # fmt: skip
    assert "key 'num_concurent' is not taken by --model local-completions; did you mean num_concurrent?" in line
    assert "local-completions takes: " in line and "base_url" in line


@pytest.mark.slow
def test_keys_transformers_takes_pass_the_model_args_check(tmp_path: Path):
    """hf passes unknown keys on to transformers' from_pretrained (and the model config): those are not refused."""
    keys = "attn_implementation=sdpa,rope_theta=10000"
    done = run("eval", "run", "--model", "hf", "--tasks", "needlebench_single_en_4k",
               "--model_args", f"pretrained={tmp_path / 'model'},{keys}", env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]  # refused later, for the missing model, not for its keys
    assert "attn_implementation" not in done.stderr and "rope_theta" not in done.stderr


@pytest.mark.slow
def test_a_gguf_folder_without_gguf_file_names_the_files(tmp_path: Path):
    folder = tmp_path / "smol"
    folder.mkdir()
    for name in ("b.Q8_0.gguf", "a.Q4_1.gguf"):
        (folder / name).write_bytes(b"GGUF")
    line = quick_error("eval", "run", "--model", "hf", "--model_args", f"pretrained={folder}",
                       "--tasks", "needlebench_single_en_4k")  # fmt: skip
    assert f"pretrained={folder} holds no config.json, only GGUF files (a.Q4_1.gguf, b.Q8_0.gguf)" in line
    assert "gguf_file=a.Q4_1.gguf" in line
    line = quick_error("eval", "run", "--model", "hf", "--model_args", f"pretrained={folder},gguf_file=c.gguf",
                       "--tasks", "needlebench_single_en_4k")  # fmt: skip
    assert f"gguf_file=c.gguf is not in {folder}; the GGUF files there: a.Q4_1.gguf, b.Q8_0.gguf" in line


@pytest.mark.slow
def test_no_tasks_is_one_line():
    line = quick_error(*ORACLE)
    assert "no --tasks given; e.g. --tasks needlebench_single_en_4k" in line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("given", "meant"),
    [
        (["--output-path", "out"], "--output_path"),
        (["--model-args", "delay=0"], "--model_args"),
        (["--skip_too_long"], "--skip-too-long"),
    ],
)
def test_an_unknown_flag_gets_the_other_spelling(given: list[str], meant: str):
    line = quick_error(*ORACLE, "--tasks", "needlebench_single_en_4k", *given)
    assert f"unrecognized arguments: {' '.join(given)}; did you mean {meant}?" in line
    assert "see `needlebench eval run --help`" in line


@pytest.mark.slow
@pytest.mark.parametrize("command", [["eval", "--help"], ["eval", "run", "--help"], ["eval"]])
def test_eval_help_shows_the_run_options(command: list[str]):
    done = run(*command)
    assert done.returncode == 0, done.stderr[-3000:]
    for option in ("--skip-too-long", "--subset N", "--model_args", "--output_path", "--tasks"):
        assert option in done.stdout, option
    assert "needlebench eval ls" in done.stdout  # the other sub-commands are named too


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "meant"),
    [
        ("single_en_4k", "needlebench_single_en_4k"),
        ("single_cn_4k", "needlebench_single_zh_4k"),
        ("needlebench_single_cn_4k", "needlebench_single_zh_4k"),
        ("singel_en_4k", "needlebench_single_en_4k"),
    ],
)
def test_a_task_without_its_prefix_or_with_cn_gets_a_suggestion_at_once(task: str, meant: str):
    line = quick_error(*ORACLE, "--tasks", task)
    assert f"unknown task {task!r}; did you mean {meant}?" in line


def test_backend_keys_are_read_from_lm_evals_source():
    """The model-arg keys and packages of lm-eval's lazily registered backends, read without importing them."""
    import lm_eval.models  # noqa: F401
    from lm_eval.api.registry import model_registry

    from needlebench.evaluation.runner.backends import read_signature

    entries = dict(model_registry.items())
    hf, vllm, api = (read_signature(entries[name]) for name in ("hf", "vllm", "local-completions"))
    assert {"pretrained", "gguf_file", "max_length"} <= set(hf.params) and "max_model_len" not in hf.params
    assert {"torch", "transformers"} <= set(hf.packages) and hf.escapes  # **kwargs go on to from_pretrained
    assert {"pretrained", "max_model_len", "max_length"} <= set(vllm.params) and "vllm" in vllm.packages
    assert {"base_url", "num_concurrent", "max_length"} <= set(api.params) and not api.escapes
    assert {"aiohttp", "tenacity"} <= set(api.packages)  # TemplateAPI's find_spec check


# --------------------------------------------------------------------------------------------- eval: runs


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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
    from needlebench.evaluation.runner.guard import model_window
    from needlebench.evaluation.runner.options import parse_eval

    parsed = parse_eval(["run", "--model", "hf", "--model_args", f"pretrained={gguf.parent},gguf_file={GGUF_NAME}"])[2]
    assert model_window(parsed, parsed.model_args) == (8192, "the GGUF's context_length 8192")


# --------------------------------------------------------------------------------------------- budget


@pytest.mark.slow
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


@pytest.mark.slow
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
