"""``budget``: prompts that lm-eval would left-truncate under a model's own tokenizer and chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import budget
from support import build_data, single_row
from support.smollm import smollm_dir


class WordTokenizer:
    """A stand-in tokenizer: one token per whitespace-separated word, a BOS token, a two-token chat frame."""

    bos_token = "<s>"
    chat_template = "{{ messages }}"

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        prefix = [1] if add_special_tokens else []
        return {"input_ids": [prefix + list(range(len(text.split()))) for text in texts]}

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        return "<s> USER: " + messages[0]["content"] + " ASSISTANT:"


def test_budget_rows_flags_prompt_plus_generation_over_the_limit():
    rows = [single_row(prompt="word " * n, context_length=n, id=f"r{n}") for n in (10, 50, 90)]
    tokenizer = WordTokenizer()
    plain = budget.budget_rows(rows, tokenizer, 100, chat_template=False, max_gen_toks=20)
    # raw prompt: words + BOS; 50 + 1 + 20 = 71 fits, 90 + 1 + 20 = 111 does not
    assert [row["id"] for row in plain] == ["r90"]
    assert plain[0]["prompt_tokens"] == 91 and plain[0]["truncated_tokens"] == 11
    chat = budget.budget_rows(rows, tokenizer, 72, chat_template=True, max_gen_toks=20)
    # chat frame: "<s>" (no second BOS), "USER:", "ASSISTANT:" -> words + 3; 50 + 3 + 20 = 73 > 72
    assert [row["id"] for row in chat] == ["r50", "r90"]


def test_format_budget_summarises_per_config():
    assert "no row would be truncated" in budget.format_budget([])
    rows = budget.budget_rows(
        [single_row(prompt="w " * 40, id="only")], WordTokenizer(), 30, chat_template=False, max_gen_toks=5
    )
    text = budget.format_budget(rows)
    assert "1 row(s) would be left-truncated" in text and "single_en_4k" in text and "only" in text


@pytest.mark.slow
def test_bad_input_is_a_user_error(tmp_path: Path):
    with pytest.raises(NeedlebenchError, match="not a local folder nor a model in the local"):
        budget.run_budget(
            str(tmp_path / "missing"), 4096, ["single_en_4k"], chat_template=False, max_gen_toks=0, data_dir=None
        )
    with pytest.raises(NeedlebenchError, match="positive"):
        budget.run_budget(str(tmp_path), 0, ["single_en_4k"], chat_template=False, max_gen_toks=0, data_dir=None)
    with pytest.raises(NeedlebenchError, match="unknown config"):
        budget.run_budget(str(tmp_path), 4096, ["single_en_5k"], chat_template=False, max_gen_toks=0, data_dir=None)
    with pytest.raises(NeedlebenchError, match="could not be loaded"):
        budget.run_budget(str(tmp_path), 4096, ["single_en_4k"], chat_template=False, max_gen_toks=0, data_dir=None)


def test_configs_are_names_and_a_folder_lacking_one_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from hub_server import make_dataset_folder

    folder = tmp_path / "data"
    make_dataset_folder(folder, {"atc_en": 4})  # prompts "prompt-0" ... : one word each
    monkeypatch.setattr(budget, "load_tokenizer", lambda path, gguf_file=None: WordTokenizer())

    def run(configs: list[str], max_length: int, max_gen_toks: int) -> list[dict]:
        return budget.run_budget(
            "words", max_length, configs, chat_template=False, max_gen_toks=max_gen_toks, data_dir=str(folder)
        )

    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' is not built in data_dir .* atc_en"):
        run(["single_en_4k"], 4096, 0)
    manifest = (folder / "needlebench.json").read_bytes()
    (folder / "needlebench.json").unlink()  # a folder without a manifest: never read by its card
    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' could not be loaded from data_dir"):
        run(["single_en_4k"], 4096, 0)
    (folder / "needlebench.json").write_bytes(manifest)
    with pytest.raises(NeedlebenchError, match=r"unknown config 'atc_\*'"):  # the CLI expands globs, once
        run(["atc_*"], 4096, 0)
    # BOS + one word + 128 generated tokens fit 130 exactly; 129 generated tokens do not
    assert run(["atc_en"], 130, 128) == []
    assert [row["truncated_tokens"] for row in run(["atc_en"], 130, 129)] == [1, 1, 1, 1]


@pytest.fixture(scope="module")
def srt_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k"], tmp_path_factory.mktemp("budget") / "needlebench")


@pytest.mark.slow
def test_smollm_tokenizer_flags_rows_a_small_window_would_cut(srt_data: Path):
    model = str(smollm_dir())
    flagged = budget.run_budget(
        model, 1200, ["single_en_4k"], chat_template=True, max_gen_toks=256, data_dir=str(srt_data)
    )
    lengths = {row["context_length"] for row in flagged}
    assert 1000 not in lengths and {3000, 4000} <= lengths
    assert sum(row["context_length"] == 4000 for row in flagged) == 200  # every 4k-length row (20 depths x 10)
    assert all(row["total"] > 1200 and row["max_gen_toks"] == 256 and row["fits"] is False for row in flagged)
    # the chat template costs tokens: the same prompts counted raw are shorter
    tokenizer = budget.load_tokenizer(model)
    prompts = [f"{row['id']} prompt" for row in flagged[:1]] + ["The document given to you by the user is short."]
    raw = budget.count_tokens(tokenizer, [budget.render_prompt(tokenizer, p, False) for p in prompts])
    chat = budget.count_tokens(tokenizer, [budget.render_prompt(tokenizer, p, True) for p in prompts])
    assert all(c > r for c, r in zip(chat, raw, strict=True))
    # the model's own 8k window fits everything; 0 uses the task's own max_gen_toks
    assert (
        budget.run_budget(model, 8192, ["single_en_4k"], chat_template=True, max_gen_toks=None, data_dir=str(srt_data))
        == []
    )


def _tricky_texts() -> list[str]:
    """Texts whose cuts need care: blank lines, trailing spaces before a break, long lines cut at ". ",
    contractions, digits, Chinese, special tokens of the chat template."""
    return [
        "",
        "\n",
        "a \nb",
        "end.\n\n  indented\n\tTab",
        "Sentence one. Sentence two. " * 400 + "\n" + "x. y" * 700,
        "don't\n's\n'stop'. 's 12345\n678 9. 10",
        "中文。\n第二行 \n\t第三行。第四",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    ]


@pytest.mark.slow
def test_counter_is_exact_under_the_smollm_tokenizer(srt_data: Path):
    """The chunked count equals encoding the whole rendered prompt, on sampled rows and tricky texts."""
    import random

    import pyarrow.parquet as pq

    tokenizer = budget.load_tokenizer(str(smollm_dir()))
    assert budget.splits_at_whitespace(tokenizer)
    prompts = pq.read_table(next(srt_data.glob("data/single_en_4k/*.parquet")), columns=["prompt"])["prompt"]
    sampled = random.Random(7).sample(prompts.to_pylist(), 12)
    texts = [budget.render_prompt(tokenizer, p, True) for p in sampled] + sampled + _tricky_texts()
    for text in texts:
        assert "".join(budget.chunks(text)) == text
    counter = budget.TokenCounter(tokenizer)
    expected = [len(tokenizer.encode(text, add_special_tokens=not text.startswith("<|im_start|>"))) for text in texts]
    assert counter.count(texts) == expected
    assert counter.count(texts) == expected  # again, from the memo
    assert budget.count_tokens(tokenizer, texts) == expected  # the batch-encoding fallback agrees


def test_counter_falls_back_to_batch_encoding_when_cuts_are_unsafe():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE(unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert budget.splits_at_whitespace(PreTrainedTokenizerFast(tokenizer_object=backend))
    backend.normalizer = normalizers.Lowercase()  # a normalizer may change text across a cut
    assert not budget.splits_at_whitespace(PreTrainedTokenizerFast(tokenizer_object=backend))
    backend.normalizer = None
    backend.pre_tokenizer = pre_tokenizers.Metaspace()  # not the GPT-2 split regex
    assert not budget.splits_at_whitespace(PreTrainedTokenizerFast(tokenizer_object=backend))
    assert not budget.TokenCounter(WordTokenizer()).chunked  # no backend: whole texts, batch-encoded
    assert budget.TokenCounter(WordTokenizer()).count(["a b", "c"]) == [3, 2]


def test_report_summarises_per_config_and_length(srt_data: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(budget, "load_tokenizer", lambda path, gguf_file=None: WordTokenizer())
    report = budget.budget_report(
        "words", 1000, ["single_en_4k"], chat_template=False, max_gen_toks=16, data_dir=str(srt_data), progress=False
    )
    lengths = [item.context_length for item in report.summaries]
    assert lengths == sorted(lengths) and len(lengths) == 4  # 1k, 2k, 3k, 4k
    assert sum(item.rows for item in report.summaries) == 800
    assert all(item.over == 0 for item in report.summaries if item.max_prompt_tokens + 16 <= 1000)
    over_ids = {row["id"] for row in report.over}
    assert sum(item.over for item in report.summaries) == len(over_ids) > 0
    assert all(row["prompt_tokens"] + 16 > 1000 for row in report.over)
    text = budget.format_budget(report)
    assert "max tokens" in text and "list them with --rows" in text and report.over[0]["id"] not in text
    assert report.over[0]["id"] in budget.format_budget(report, rows=True)


def test_a_config_of_many_lengths_is_summarised_in_bins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """ATC rows each have their own length (~140 distinct in atc_en): the summary bins them; --rows lists the rows."""
    data = build_data(["atc_en"], tmp_path / "atc")
    monkeypatch.setattr(budget, "load_tokenizer", lambda path, gguf_file=None: WordTokenizer())
    report = budget.budget_report(
        "words", 480, ["atc_en"], chat_template=False, max_gen_toks=16, data_dir=str(data), progress=False
    )
    lengths = sorted(item.context_length for item in report.summaries)
    assert len(lengths) > 100 and 0 < len(report.over) < sum(item.rows for item in report.summaries)
    text = budget.format_budget(report)
    table = [line for line in text.splitlines() if line.startswith("atc_en ")]
    assert len(text.splitlines()) <= budget.MAX_LENGTH_LINES + 6 and len(table) == budget.MAX_LENGTH_LINES
    ranges = [line.split()[1] for line in table]
    assert ranges[0].startswith(f"{lengths[0]}-") and ranges[-1].endswith(f"-{lengths[-1]}")
    assert sum(int(line.split()[2]) for line in table) == 720  # every row in some bin
    assert sum(int(line.split()[-1]) for line in table) == len(report.over)
    assert f"atc_en: {len(lengths)} lengths, in bins" in text
    listed = budget.format_budget(report, rows=True)
    assert all(row["id"] in listed for row in report.over)


@pytest.mark.slow
def test_budget_finds_an_experiment_config_of_the_data_dir(tmp_path: Path):
    """``needlebench budget EXPCONFIG --data-dir DIR``: the folder's experiment configs are looked up by name (as
    ``show`` and ``tasks`` do), so the prompts built from the experiment are counted."""
    import subprocess
    import sys

    import yaml

    spec = {
        "name": "myexp",
        "kind": "single",
        "language": "en",
        "lengths": [1000],
        "depths": [10, 50],
        "needles": [{"needle": "The vault code is 4711.", "question": "What is the vault code?", "keyword": "4711"}],
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    cli = [sys.executable, "-c", "from needlebench.cli import main; main()"]
    built = subprocess.run(
        [*cli, "build", "--experiment", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    from needlebench.dataset.manifest import read_manifest

    (config,) = read_manifest(tmp_path / "ds")["configs"]
    args = [
        "budget",
        config,
        "--tokenizer",
        str(smollm_dir()),
        "--max-length",
        "8192",
        "--data-dir",
        str(tmp_path / "ds"),
    ]
    result = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert config in result.stdout and "unknown config" not in result.stderr
