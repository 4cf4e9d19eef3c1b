"""A model or tokenizer folder from anyone (a GGUF, a config.json, a tokenizer's files, its chat template) is read
with bounds: whatever is wrong with it is one line naming it (exit 2), never an internal error, a hang, or code of
the folder run.

Each attack runs the `needlebench` command (a subprocess) in the sandbox of :mod:`support.sandbox` and hashes the
fake HOME before and after. The GGUFs are SmolLM2's metadata (its vocabulary, merges and chat template, no tensors)
copied with one field changed, or the red team's hand-made file.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from support.sandbox import CLI, REAL_CONFIG, REAL_HF_HOME, run, snapshot
from support.sandbox import refused as refused_alone
from support.smollm import gguf_path

pytestmark = pytest.mark.slow

BUDGET = ("budget", "single_en_4k", "--max-length", "8192")
EVAL = ("eval", "run", "--model", "hf", "--tasks", "needlebench_single_en_4k", "--limit", "1")


def tokenizer_folder(folder: Path, config: dict | None = None, **files: str) -> Path:
    """A small byte-level BPE tokenizer folder (``tokenizer.json``, ``tokenizer_config.json`` = `config`), with
    `files` written over it."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder.mkdir(parents=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tokenizer.train_from_iterator(["hello world"] * 20, trainers.BpeTrainer(vocab_size=300, initial_alphabet=alphabet))
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast"} if config is None else config
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)
    return folder


def smollm_gguf(path: Path, **changes: tuple) -> Path:
    """SmolLM2's GGUF metadata without its tensors, each of `changes` (key with ``__`` for ``.`` -> (value, type))
    set: an honest file with one field made hostile."""
    from gguf import GGUFReader, GGUFWriter

    fields = {}
    for name, field in GGUFReader(str(gguf_path())).fields.items():
        if not name.startswith("GGUF.") and name != "general.architecture":
            fields[name] = (field.contents(), field.types[0], field.types[1] if len(field.types) > 1 else None)
    for key, (value, kind) in changes.items():
        fields[key.replace("__", ".")] = (value, kind, None)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), "llama")
    for name, (value, kind, sub_kind) in fields.items():
        writer.add_key_value(name, value, kind, sub_type=sub_kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def crafted_gguf(path: Path) -> Path:
    """The red team's GGUF: two tokens, a merge of four parts, a BOS id past the vocabulary (GGUF v3 layout)."""

    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value.encode())) + value.encode()

    def array(kind: int, items: list, pack) -> bytes:
        return struct.pack("<IIQ", 9, kind, len(items)) + b"".join(pack(item) for item in items)

    pairs = [
        (text("general.architecture"), struct.pack("<I", 8) + text("llama")),
        (text("tokenizer.ggml.model"), struct.pack("<I", 8) + text("gpt2")),
        (text("tokenizer.ggml.tokens"), array(8, ["a", "b"], text)),
        (text("tokenizer.ggml.scores"), array(6, [0.0, 0.0], lambda value: struct.pack("<f", value))),
        (text("tokenizer.ggml.token_type"), array(5, [1, 1], lambda value: struct.pack("<i", value))),
        (text("tokenizer.ggml.merges"), array(8, ["a b c d"], text)),
        (text("tokenizer.ggml.bos_token_id"), struct.pack("<II", 4, 99)),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    body = b"".join(key + value for key, value in pairs)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + body)
    return path


def refused(result: subprocess.CompletedProcess, *names: str) -> str:
    """:func:`support.sandbox.refused` once budget's progress bar (``counting: ...`` on stderr) is set aside."""
    lines = [line for line in result.stderr.splitlines() if not line.startswith("counting:")]
    return refused_alone(
        subprocess.CompletedProcess(result.args, result.returncode, result.stdout, "\n".join(lines)), *names
    )


def attacked(home: Path, *args: str, **options) -> tuple[subprocess.CompletedProcess, float]:
    """Run `args` in the sandbox; the HOME is unchanged; the result and the seconds it took."""
    before = snapshot(home, skip=home / "work")
    start = time.monotonic()
    result = run(home, *args, **options)
    seconds = time.monotonic() - start
    assert snapshot(home, skip=home / "work") == before
    return result, seconds


# --- GGUF ------------------------------------------------------------------------------------------------------


def test_a_crafted_gguf_tokenizer_is_one_line(sandbox: Path):
    gguf = crafted_gguf(sandbox / "work" / "gg" / "m.gguf")
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(gguf.parent))
    line = refused(result, "m.gguf", "IndexError")
    assert "internal error" not in line


@pytest.mark.parametrize(
    "change, shown",
    [
        ("string", "llama.context_length is a STRING value"),
        ("zero", "llama.context_length is 0,"),
        ("architecture", "general.architecture is not a name"),
    ],
)
def test_a_gguf_whose_context_length_is_not_a_number_is_one_line(sandbox: Path, change: str, shown: str):
    """eval reads the window from the GGUF's metadata (a string there was read as its first byte, and then
    transformers' config validation was an internal error); budget converts its tokenizer (the same validation)."""
    from gguf import GGUFValueType

    changes = {
        "string": {"llama__context_length": ("8192", GGUFValueType.STRING)},
        "zero": {"llama__context_length": (0, GGUFValueType.UINT32)},
        "architecture": {"general__architecture": ("llama\n", GGUFValueType.STRING)},
    }[change]
    gguf = smollm_gguf(sandbox / "work" / "gg" / "m.gguf", **changes)
    result, _ = attacked(sandbox, *EVAL, "--model_args", f"pretrained={gguf.parent},gguf_file=m.gguf")
    refused(result, "m.gguf", shown)
    if change == "string":
        result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(gguf))
        refused(result, "m.gguf", "could not be read", "max_position_embeddings")


# --- config.json, tokenizer_config.json, tokenizer.json ---------------------------------------------------------


@pytest.mark.parametrize(
    "config, files, shown",
    [
        (None, {"tokenizer_config__json": "[1]"}, "AttributeError"),
        (None, {"tokenizer_config__json": "[" * 100_000}, "RecursionError"),
        (None, {"tokenizer__json": "{}"}, "KeyError: 'added_tokens'"),
        (None, {"tokenizer__json": "[1]"}, "TypeError"),
        (None, {"special_tokens_map__json": "[1]"}, "AttributeError"),
        ({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": [1]}, {}, "bos_token"),
        ({"tokenizer_class": 5}, {}, "AttributeError"),
        ({}, {"config__json": "[1]"}, "must be a mapping"),
    ],
    ids=["config-list", "config-deep", "tokenizer-json-empty", "tokenizer-json-list", "special-tokens-list",
         "bos-list", "class-int", "config.json-list"],
)  # fmt: skip
def test_a_tokenizer_folder_transformers_cannot_read_is_one_line(sandbox: Path, config, files: dict, shown: str):
    folder = tokenizer_folder(sandbox / "work" / "tok", config, **files)
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(folder))
    refused(result, "tok", "could not be loaded", shown)


def test_a_huge_tokenizer_file_or_a_gguf_that_is_not_one_is_refused_before_it_is_read(sandbox: Path):
    """A sparse tokenizer_config.json of 600 MiB would be read whole (and parsed) by transformers; a sparse .gguf of
    50 GiB would be hashed whole before its header is looked at."""
    folder = tokenizer_folder(sandbox / "work" / "tok")
    os.truncate(folder / "tokenizer_config.json", 600 << 20)
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(folder))
    refused(result, "tokenizer_config.json", "is not read")
    gguf = sandbox / "work" / "gg" / "m.gguf"
    gguf.parent.mkdir()
    with gguf.open("wb") as handle:
        handle.truncate(50 << 30)
    result, seconds = attacked(sandbox, *BUDGET, "--tokenizer", str(gguf))
    refused(result, "m.gguf", "is not a GGUF file")
    assert seconds < 60


def test_eval_with_a_model_folder_whose_files_are_not_json_objects_is_one_line(sandbox: Path):
    """config.json read for the window, and config.json read by transformers for the tokenizer class (the window
    given as max_length, so only the tokenizer reads it)."""
    folder = tokenizer_folder(sandbox / "work" / "m1", {}, config__json="[1]")
    result, _ = attacked(sandbox, *EVAL, "--model_args", f"pretrained={folder}")
    refused(result, "config.json", "not a JSON object")
    result, _ = attacked(sandbox, *EVAL, "--model_args", f"pretrained={folder},max_length=8192")
    refused(result, "m1", "could not be loaded", "must be a mapping")
    (folder / "config.json").write_text("x")
    result, _ = attacked(sandbox, *EVAL, "--model_args", f"pretrained={folder}")
    refused(result, "config.json", "not valid JSON")


def test_a_tokenizer_folder_with_code_never_runs_it(sandbox: Path, tmp_path: Path):
    """A tokenizer_config.json naming a class of the folder (``auto_map``): transformers asked on the terminal
    whether to run it, and a 'y' ran the folder's Python file. needlebench loads with trust_remote_code=False."""
    code = "import pathlib\npathlib.Path.home().joinpath('pwned').write_text('ran')\n"
    code += "from transformers import PreTrainedTokenizerFast\nclass Tok(PreTrainedTokenizerFast):\n    pass\n"
    folder = tokenizer_folder(
        sandbox / "work" / "tok", {"auto_map": {"AutoTokenizer": [None, "tok.Tok"]}}, tok__py=code
    )
    environment = {
        **os.environ,
        "HOME": str(sandbox),
        "XDG_CONFIG_HOME": REAL_CONFIG,
        "HF_HOME": REAL_HF_HOME,
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
    }
    before = snapshot(sandbox, skip=sandbox / "work")
    result = subprocess.run(
        [*CLI, *BUDGET, "--tokenizer", str(folder)],
        input="y\n", capture_output=True, text=True, env=environment, cwd=sandbox / "work", timeout=600, check=False,
    )  # fmt: skip
    assert not (sandbox / "pwned").exists()
    assert snapshot(sandbox, skip=sandbox / "work") == before
    refused(result, "tok", "custom code")


# --- chat templates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, shown",
    [
        ("{{ raise_exception('boom') }}", "its chat template failed: TemplateError: boom"),
        ("{{ 1/0 }}", "its chat template failed: ZeroDivisionError: division by zero"),
        ("{{ messages[0].nothing.deeper }}", "its chat template failed: UndefinedError"),
        ("{{ raise_exception('x' * 5000 + '\x1b[2J') }}", "its chat template failed: TemplateError: xxx"),
    ],
    ids=["raise_exception", "zero-division", "undefined", "long-message"],
)
def test_a_chat_template_that_fails_is_one_line(sandbox: Path, template: str, shown: str):
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    folder = tokenizer_folder(sandbox / "work" / "tok", config)
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(folder), "--chat-template")
    line = refused(result, "tokenizer", str(folder), shown)
    assert len(line) < 600 and "\x1b" not in line


def test_a_chat_template_that_loops_or_fills_memory_is_stopped(sandbox: Path):
    """Two nested loops of 100,000 (10**10 steps) stop after 10 s; a string of 10**11 characters fails its
    allocation (4 GiB of address space) instead of waking the OOM killer; one of 10**8 is not tokenized."""
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x"
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": loop}
    folder = tokenizer_folder(sandbox / "work" / "loop", config)
    result, seconds = attacked(sandbox, *BUDGET, "--tokenizer", str(folder), "--chat-template")
    refused(result, "loop", "its chat template did not finish in 10 s")
    assert seconds < 120
    config["chat_template"] = "{{ 'x' * 100000 * 100000 * 10 }}"
    folder = tokenizer_folder(sandbox / "work" / "bomb", config)
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(folder), "--chat-template")
    refused(result, "bomb", "its chat template needed more than 4 GiB")
    config["chat_template"] = "{{ 'x' * 100000 * 1000 }}"  # 100 MB: within the memory bound, too long to count
    folder = tokenizer_folder(sandbox / "work" / "long", config)
    result, _ = attacked(sandbox, *BUDGET, "--tokenizer", str(folder), "--chat-template")
    refused(result, "long", "its chat template made 100000000 characters")


def test_eval_length_check_renders_the_chat_template_with_the_same_bounds(sandbox: Path):
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{{ raise_exception('boom') }}"}
    folder = tokenizer_folder(sandbox / "work" / "tok", config)
    args = ("--model_args", f"pretrained={folder},max_length=8192", "--apply_chat_template")
    result, _ = attacked(sandbox, *EVAL, *args)
    refused(result, str(folder), "its chat template failed: TemplateError: boom")


def test_an_honest_chat_template_still_counts(sandbox: Path):
    template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"
    folder = tokenizer_folder(
        sandbox / "work" / "tok", {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template}
    )
    result, _ = attacked(
        sandbox, "budget", "single_en_4k", "--max-length", "100000", "--tokenizer", str(folder), "--chat-template"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "All prompts fit" in result.stdout
