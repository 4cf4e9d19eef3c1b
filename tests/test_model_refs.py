"""Model references as lm-eval and vLLM take them, in `needlebench eval run`'s length check: a Hub model id is read
through ``huggingface_hub`` from a local Hub (olah serving a git repository of SmolLM2-135M-Instruct's tokenizer and
config, with a stand-in weights file that must never be fetched), at the model's revision, from the cache under
``HF_HUB_OFFLINE``; a model that cannot be had, or whose window cannot be told, is one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hub_server import HubServer, commit_files, free_port, olah_fixture
from support import build_data
from support.sandbox import refused as one_error  # exit 2, one "needlebench: error:" line, returned
from support.smollm import gguf_path
from test_eval_guard import FakeOpenAI

pytestmark = pytest.mark.slow

hub = olah_fixture()

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
NO_WINDOW = "fixture/no-window"
#: A stand-in for the weights: served beside the tokenizer, it must never reach the cache.
WEIGHTS = "model.safetensors"
WEIGHTS_BYTES = 4 * 1024 * 1024
#: The files the length check may fetch (sources/hub.py MODEL_SMALL_FILES that this repository holds).
SMALL = {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}


def smollm_files(folder: Path) -> dict[str, bytes]:
    """SmolLM2-135M-Instruct's tokenizer (transformers' conversion of the GGUF, saved with ``save_pretrained``) and a
    config.json whose ``max_position_embeddings`` is the GGUF's context length."""
    from needlebench.evaluation.runner.model_tokenizer import gguf_context_length, load_tokenizer, resolve_source

    gguf = gguf_path()
    load_tokenizer(str(gguf)).save_pretrained(str(folder))
    window = gguf_context_length(resolve_source(str(gguf)))
    assert window == 8192
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": window}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def served(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model at tag ``short`` (config window 2048) and then on ``main`` (8192), a stand-in weights file in both,
    and a model whose config gives no window; returns a local folder holding the same small files as ``main``."""
    local = tmp_path_factory.mktemp("smollm") / "SmolLM2-135M-Instruct"
    local.mkdir()
    files = smollm_files(local)
    assert set(files) == SMALL
    # transformers 5 lists additional_chat_templates/ of a Hub model; olah answers a missing folder with 401 (the Hub:
    # 404, which transformers takes as none), so the folder exists here with a file no pattern fetches
    files_served = {**files, "additional_chat_templates/README.md": b"none here\n", WEIGHTS: b"\0" * WEIGHTS_BYTES}
    short = {**files_served, "config.json": files["config.json"].replace(b"8192", b"2048")}
    commit_files(hub.repo_path(MODEL, "models"), short, tag="short")
    commit_files(hub.repo_path(MODEL, "models"), files_served)
    no_window = {**files, "config.json": json.dumps({"model_type": "llama"})}
    commit_files(hub.repo_path(NO_WINDOW, "models"), no_window)
    return local


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k"], tmp_path_factory.mktemp("model-refs") / "data")


def needlebench(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        capture_output=True, text=True, timeout=600, cwd=cwd, env=env, check=False,
    )  # fmt: skip


def check(model_args: str, data_dir: Path, *extra: str, model: str = "hf") -> list[str]:
    """`needlebench eval run` of 4 rows of single_en_4k with the chat template and 32 new tokens."""
    metadata = json.dumps({"data_dir": str(data_dir)})
    return ["eval", "run", "--model", model, "--device", "cpu", "--apply_chat_template",
            "--model_args", model_args, "--tasks", "needlebench_single_en_4k", "--subset", "4",
            "--gen_kwargs", "max_gen_toks=32", "--metadata", metadata, *extra]  # fmt: skip


def cached_files(hf_home: Path, repo_id: str) -> tuple[set[str], int]:
    """(names under the model's snapshots, bytes of its blobs) in the Hugging Face cache under ``hf_home``."""
    folder = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    names = {path.relative_to(snap).as_posix() for snap in folder.glob("snapshots/*") for path in snap.rglob("*")}
    size = sum(path.stat().st_size for path in folder.glob("blobs/*"))
    return names, size


def test_hub_id_is_checked_like_its_folder_fetching_only_small_files(
    hub: HubServer, served: Path, data_dir: Path, tmp_path: Path
):
    """A window too small for the 4k rows: the same refusal from the folder and from the Hub id (before any model
    loads), with only the tokenizer and config in the cache; then the same from the cache with HF_HUB_OFFLINE=1."""
    hf_home = tmp_path / "hf-home"
    env = hub.env(hf_home)
    from_folder = one_error(
        needlebench(*check(f"pretrained={served},max_length=2048", data_dir), env=env, cwd=tmp_path)
    )
    assert "row(s) do not fit the window of 2048 tokens (max_length 2048)" in from_folder
    assert "needlebench_single_en_4k " in from_folder and "/4;" in from_folder
    assert not (hf_home / "hub").exists()  # a folder is read as it is
    from_hub = one_error(needlebench(*check(f"pretrained={MODEL},max_length=2048", data_dir), env=env, cwd=tmp_path))
    assert from_hub == from_folder
    names, size = cached_files(hf_home, MODEL)
    assert names == SMALL  # no weights
    assert size < sum(path.stat().st_size for path in served.iterdir()) + 1024
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    again = one_error(needlebench(*check(f"pretrained={MODEL},max_length=2048", data_dir), env=offline, cwd=tmp_path))
    assert again == from_folder
    # offline and never fetched: one line naming the model, the cache and the fixes
    empty = {**offline, "HF_HOME": str(tmp_path / "empty-home")}
    line = one_error(needlebench(*check(f"pretrained={MODEL},max_length=2048", data_dir), env=empty, cwd=tmp_path))
    assert f"pretrained '{MODEL}' is not a local folder, and model {MODEL} is not in the Hugging Face cache" in line
    assert str(tmp_path / "empty-home") in line and "HF_HUB_OFFLINE" in line and f"`hf download {MODEL}`" in line


def test_window_of_a_hub_id_comes_from_its_config_at_the_revision(
    hub: HubServer, served: Path, data_dir: Path, tmp_path: Path
):
    """No max_length: the window is the config.json of the revision asked for (tag ``short``: 2048)."""
    env = hub.env(tmp_path / "hf-home")
    line = one_error(needlebench(*check(f"pretrained={MODEL},revision=short", data_dir), env=env, cwd=tmp_path))
    assert "row(s) do not fit the window of 2048 tokens (the model config's 2048)" in line
    assert cached_files(tmp_path / "hf-home", MODEL)[0] == SMALL


def test_hub_tokenizer_of_a_server_model_passes_the_check_and_runs(
    hub: HubServer, served: Path, data_dir: Path, tmp_path: Path
):
    """The same Hub id as an OpenAI-compatible server's model: the rows fit 8192, the run goes through (lm-eval
    reads the tokenizer from the same Hub and cache), and still no weights were fetched."""
    hf_home = tmp_path / "hf-home"
    output = tmp_path / "out"
    with FakeOpenAI("Stardust Shard") as server:
        model_args = (
            f"model={MODEL},base_url={server.url},tokenizer_backend=huggingface,tokenized_requests=False,"
            "max_length=8192,max_retries=1"
        )
        done = needlebench(
            *check(model_args, data_dir, "--output_path", str(output), model="local-completions"),
            env=hub.env(hf_home),
            cwd=tmp_path,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(server.requests) == 4
    results = json.loads(sorted(output.rglob("results_*.json"))[-1].read_text(encoding="utf-8"))
    assert "needlebench_single_en_4k" in results["results"]
    assert WEIGHTS not in cached_files(hf_home, MODEL)[0]


def test_a_model_that_cannot_be_had_is_one_line(hub: HubServer, served: Path, data_dir: Path, tmp_path: Path):
    env = hub.env(tmp_path / "hf-home")
    line = one_error(needlebench(*check("pretrained=HuggingFaceTB/NoSuchModel", data_dir), env=env, cwd=tmp_path))
    assert (
        f"pretrained 'HuggingFaceTB/NoSuchModel' is not a local folder, and the Hub at {hub.url} has no model" in line
    )
    assert "HF_TOKEN" in line
    line = one_error(needlebench(*check(f"pretrained={MODEL},revision=v9.9", data_dir), env=env, cwd=tmp_path))
    # olah answers an unknown tag like an unknown repo (the Hub itself says "revision not found")
    assert f"pretrained '{MODEL}'" in line and (f"no model {MODEL}@v9.9" in line or "no revision 'v9.9'" in line)
    # nothing listens at the endpoint (and nothing cached): one line naming the endpoint to check
    dead = f"http://127.0.0.1:{free_port()}"
    line = one_error(
        needlebench(*check(f"pretrained={MODEL}", data_dir), env={**env, "HF_ENDPOINT": dead}, cwd=tmp_path)
    )
    assert (
        f"pretrained '{MODEL}' (model {MODEL} on the Hub; not a local folder): cannot reach the Hub at {dead}" in line
    )
    assert "check HF_ENDPOINT and the network" in line
    missing = tmp_path / "no-such-folder"
    line = one_error(needlebench(*check(f"pretrained={missing},max_length=2048", data_dir), env=env, cwd=tmp_path))
    assert f"pretrained '{missing}' is not a local folder" in line and "not a Hub model id (ORG/NAME)" in line


def test_unknown_window_names_the_model_arg_and_no_length_check(
    hub: HubServer, served: Path, data_dir: Path, tmp_path: Path
):
    env = hub.env(tmp_path / "hf-home")
    line = one_error(needlebench(*check(f"pretrained={NO_WINDOW}", data_dir), env=env, cwd=tmp_path))
    assert "cannot tell the context window of --model hf" in line and f"config.json of {NO_WINDOW}" in line
    assert "pass max_length=N in --model_args, or --no-length-check to skip the check" in line
    # vLLM's window is max_model_len (a folder whose config gives none, read in this process: no vLLM needed)
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.runner.guard import model_window
    from needlebench.evaluation.runner.options import parse_eval

    folder = tmp_path / "no-window"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "tokenizer.json").write_bytes((served / "tokenizer.json").read_bytes())
    parsed = parse_eval(["run", "--model", "vllm", "--model_args", f"pretrained={folder}"])[2]
    with pytest.raises(NeedlebenchError) as error:
        model_window(parsed, parsed.model_args)
    assert "pass max_model_len=N in --model_args, or --no-length-check" in str(error.value)


GGUF_REPO = "fixture/smollm2-gguf"


@pytest.fixture(scope="module")
def served_gguf(hub: HubServer) -> str:
    """SmolLM2's GGUF alone (no tokenizer or config files) as a Hub model, as GGUF repositories are published."""
    from hub_server import git

    gguf = gguf_path()
    path = hub.repo_path(GGUF_REPO, "models")
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "core.compression", "0")  # 94 MiB of quantised weights: storing beats compressing
    commit_files(path, {gguf.name: gguf.read_bytes(), "README.md": "# SmolLM2 GGUF\n"})
    return gguf.name


def test_gguf_of_a_hub_model_is_checked_like_the_local_gguf(
    hub: HubServer, served_gguf: str, data_dir: Path, tmp_path: Path
):
    """pretrained=ORG/NAME,gguf_file=NAME (lm-eval's form): the GGUF is the tokenizer, fetched into the cache lm-eval
    reads next; the refusal is the local GGUF's, and a gguf_file the repository lacks is one line."""
    hf_home = tmp_path / "hf-home"
    env = hub.env(hf_home)
    local = gguf_path().parent
    args = f"gguf_file={served_gguf},max_length=2048"
    from_folder = one_error(needlebench(*check(f"pretrained={local},{args}", data_dir), env=env, cwd=tmp_path))
    from_hub = one_error(needlebench(*check(f"pretrained={GGUF_REPO},{args}", data_dir), env=env, cwd=tmp_path))
    assert "row(s) do not fit the window of 2048 tokens (max_length 2048)" in from_hub and from_hub == from_folder
    assert cached_files(hf_home, GGUF_REPO)[0] == {served_gguf}
    line = one_error(
        needlebench(*check(f"pretrained={GGUF_REPO},gguf_file=nope.gguf", data_dir), env=env, cwd=tmp_path)
    )
    assert f"gguf_file 'nope.gguf' is not in model {GGUF_REPO} on {hub.url}" in line
    # a GGUF repository without gguf_file: one line naming the GGUF files there
    line = one_error(needlebench(*check(f"pretrained={GGUF_REPO},max_length=2048", data_dir), env=env, cwd=tmp_path))
    assert f"model {GGUF_REPO} on {hub.url} holds no tokenizer or config files" in line
    assert f"pass gguf_file=NAME in --model_args (GGUF files there: {served_gguf})" in line


def test_budget_reads_a_hub_id_too(hub: HubServer, served: Path, data_dir: Path, tmp_path: Path):
    """`needlebench budget --tokenizer ORG/NAME` counts with the same tokenizer, fetched the same way."""
    common = ["budget", "single_en_4k", "--max-length", "2048", "--chat-template", "--data-dir", str(data_dir)]
    env = hub.env(tmp_path / "hf-home")
    from_folder = needlebench(*common, "--tokenizer", str(served), env=env, cwd=tmp_path)
    from_hub = needlebench(*common, "--tokenizer", MODEL, env=env, cwd=tmp_path)
    assert from_folder.returncode == from_hub.returncode == 1, from_hub.stderr[-3000:]  # 1: some row does not fit
    assert "would be left-truncated" in from_hub.stdout and from_hub.stdout == from_folder.stdout
    assert cached_files(tmp_path / "hf-home", MODEL)[0] == SMALL
