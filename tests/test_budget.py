"""``budget``: prompts that lm-eval would left-truncate under a model's own tokenizer and chat template."""

from __future__ import annotations

from pathlib import Path

import pytest
from needlebench.errors import NeedlebenchError
from needlebench.evaluation import budget
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
    monkeypatch.setattr(budget, "load_tokenizer", lambda path: WordTokenizer())

    def run(configs: list[str], max_length: int, max_gen_toks: int) -> list[dict]:
        return budget.run_budget(
            "words", max_length, configs, chat_template=False, max_gen_toks=max_gen_toks, data_dir=str(folder)
        )

    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' is not built in data_dir .* atc_en"):
        run(["single_en_4k"], 4096, 0)
    (folder / "needlebench.json").unlink()  # a plain dataset folder: datasets finds no such config either
    with pytest.raises(NeedlebenchError, match=r"'single_en_4k' could not be loaded from data_dir"):
        run(["single_en_4k"], 4096, 0)
    with pytest.raises(NeedlebenchError, match=r"unknown config 'atc_\*'"):  # the CLI expands globs, once
        run(["atc_*"], 4096, 0)
    # BOS + one word + 128 generated tokens fit 130 exactly; 129 generated tokens do not
    assert run(["atc_en"], 130, 128) == []
    assert [row["truncated_tokens"] for row in run(["atc_en"], 130, 129)] == [1, 1, 1, 1]


@pytest.fixture(scope="module")
def srt_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k"], tmp_path_factory.mktemp("budget") / "needlebench")


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
