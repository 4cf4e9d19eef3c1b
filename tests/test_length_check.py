"""The token counter shared by ``needlebench budget`` and the length check of ``needlebench eval``: streaming, with
memory bounded by rows and characters, exact, and stopping at the first rows that do not fit.

* :func:`budget.count_batches` pulls at most ``ENCODE_BATCH`` rows / about ``BATCH_CHARS`` characters of prompt
  from its rows before the first count comes out, and a tokenizer call never gets more than ``BATCH_CHARS``
  characters (several prompts of a million tokens are not batch-encoded together);
* the counter's memo stays under its character bound, and its counts stay exact when it is cleared;
* ``needlebench eval run`` refuses in one line (exit 2) at the first rows that do not fit, naming them with their
  exact prompt tokens, without counting the rest; with ``--skip-too-long`` every row is counted, and the rows
  left out are exactly those whose whole prompt, encoded as lm-eval's ``hf`` model encodes it, does not fit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from needlebench.evaluation.runner import budget
from support import build_data
from support.smollm import smollm_dir


class WordTokenizer:
    """One token per whitespace-separated word plus a BOS; records the characters of every call."""

    bos_token = "<s>"
    chat_template = None

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        self.calls.append(sum(len(text) for text in texts))
        prefix = [1] if add_special_tokens else []
        return {"input_ids": [prefix + list(range(len(text.split()))) for text in texts]}


class RecordingRows:
    """Rows of ``count`` prompts of ``words`` words each; remembers how many were pulled."""

    def __init__(self, count: int, words: int) -> None:
        self.count, self.words, self.pulled = count, words, 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(self.count):
            self.pulled += 1
            yield {"id": f"r{index}", "prompt": "word " * self.words}


def test_rows_are_pulled_in_batches_bounded_by_rows_and_characters(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(budget, "BATCH_CHARS", 1000)
    tokenizer = WordTokenizer()
    # long prompts (400 characters): a batch is closed once it holds 1000 characters, after the third row
    rows = RecordingRows(10, 80)
    batches = budget.count_batches(rows, tokenizer, chat_template=False)
    first = next(batches)
    assert rows.pulled == 3 and [tokens for _, tokens in first] == [81, 81, 81]
    assert [len(batch) for batch in batches] == [3, 3, 1] and rows.pulled == 10
    # a tokenizer call never gets more than BATCH_CHARS characters (one longer text alone)
    assert tokenizer.calls and max(tokenizer.calls) <= 1000
    # short prompts: at most ENCODE_BATCH rows a batch
    rows = RecordingRows(200, 1)
    first = next(budget.count_batches(rows, tokenizer, chat_template=False))
    assert len(first) == budget.ENCODE_BATCH == rows.pulled
    # a prompt longer than the bound is counted alone, whole
    tokenizer.calls.clear()
    assert budget.count_tokens(tokenizer, ["a " * 600, "b", "c " * 10]) == [601, 2, 11]
    assert tokenizer.calls == [1200, 21]


@pytest.mark.slow
def test_memo_is_bounded_by_characters_and_counts_stay_exact(monkeypatch: pytest.MonkeyPatch):
    tokenizer = budget.load_tokenizer(str(smollm_dir()))
    texts = [
        "\n".join(f"Line {n} of text {t}. It has two sentences, {n * t} apples." for n in range(40)) for t in range(30)
    ]
    expected = [len(tokenizer.encode(text)) for text in texts]
    limit = 8000
    monkeypatch.setattr(budget, "_MEMO_CHARS", limit)
    counter = budget.TokenCounter(tokenizer)
    assert counter.chunked
    one_text = max(len(budget.chunks(text)) * budget._MEMO_ENTRY + len(text) for text in texts)
    counts = []
    for text in texts:
        counts += counter.count([text])
        assert counter.memo_chars <= limit + one_text  # cleared before it passes the bound by more than one text
        assert counter.memo_chars == sum(len(piece) + budget._MEMO_ENTRY for piece in counter.memo)
    assert counts == expected
    assert counter.count(texts) == expected  # again, through a memo cleared on the way


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_data(["single_en_4k"], tmp_path_factory.mktemp("length") / "nb")


def _rows(data_dir: Path) -> list[dict[str, Any]]:
    from needlebench.dataset.load import load_split

    return [dict(row) for row in load_split("single_en_4k", data_dir=str(data_dir)).select_columns(["id", "prompt"])]


def _lm_eval_counts(prompts: list[str]) -> list[int]:
    """Whole rendered prompts encoded as lm-eval's ``hf`` model does (no second BOS)."""
    tokenizer = budget.load_tokenizer(str(smollm_dir()))
    texts = [budget.render_prompt(tokenizer, prompt, True) for prompt in prompts]
    bos = tokenizer.bos_token
    return [len(tokenizer.encode(text, add_special_tokens=not (bos and text.startswith(bos)))) for text in texts]


@pytest.mark.slow
def test_refusal_stops_at_the_first_rows_that_do_not_fit(data_dir: Path, tmp_path: Path):
    """single_en_4k in length order (1k, 2k, 3k, 4k; 200 rows each) under a window of 1700 tokens: the short rows
    fit, and the run is refused after the batch holding the first that do not, naming them with their exact counts
    (the whole prompt encoded as lm-eval's hf model encodes it), the later rows never counted."""
    rows = _rows(data_dir)
    window, gen = 1700, 64
    counts = _lm_eval_counts([row["prompt"] for row in rows])
    over = [index for index, tokens in enumerate(counts) if tokens + gen > window]
    assert 0 < over[0] and len(over) < len(rows) - budget.ENCODE_BATCH
    command = [
        sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run", "--model", "hf",
        "--model_args", f"pretrained={smollm_dir()},max_length={window}", "--apply_chat_template",
        "--tasks", "needlebench_single_en_4k", "--gen_kwargs", f"max_gen_toks={gen}",
        "--metadata", json.dumps({"data_dir": str(data_dir)}), "--output_path", str(tmp_path / "out"),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    counted = int(line.split("counting stopped at the first that do not fit (")[1].split(" row(s) counted")[0])
    assert over[0] < counted <= over[0] + budget.ENCODE_BATCH  # the batch holding the first over-long row
    found = [index for index in over if index < counted]
    assert f"{len(found)} row(s) do not fit the window of {window} tokens (max_length {window})" in line
    assert f"needlebench_single_en_4k {len(found)}/{counted};" in line
    named = ", ".join(f"{rows[index]['id']} ({counts[index]} prompt tokens)" for index in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    assert f"; first: {named}{more}; raise max_model_len" in line and "--skip-too-long" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_skip_too_long_counts_every_row_exactly(data_dir: Path):
    """With --skip-too-long every selected row is counted; the rows kept are exactly those whose whole rendered
    prompt (encoded as lm-eval's hf model encodes it) plus max_gen_toks fits."""
    from needlebench.evaluation.runner.guard import preflight
    from needlebench.evaluation.runner.options import parse_eval

    rows = _rows(data_dir)
    selected = list(range(0, len(rows), 7))  # every 7th row, across all lengths
    window, gen = 2700, 64
    argv = [
        "run", "--model", "hf", "--model_args", f"pretrained={smollm_dir()},max_length={window}",
        "--apply_chat_template", "--tasks", "needlebench_single_en_4k", "--gen_kwargs", f"max_gen_toks={gen}",
        "--samples", json.dumps({"needlebench_single_en_4k": selected}), "--skip-too-long",
        "--metadata", json.dumps({"data_dir": str(data_dir)}),
    ]  # fmt: skip
    check = preflight(parse_eval(argv)[2])
    assert check is not None and not check.stopped
    counts = _lm_eval_counts([rows[index]["prompt"] for index in selected])
    fits = [index for index, tokens in zip(selected, counts, strict=True) if tokens + gen <= window]
    assert 0 < len(fits) < len(selected)
    assert check.checked == {"needlebench_single_en_4k": len(selected)}
    assert check.keep == {"needlebench_single_en_4k": fits}
    assert check.too_long == {"needlebench_single_en_4k": [rows[i]["id"] for i in selected if i not in set(fits)]}


def _mapped_rss(path: str) -> int:
    """Resident kB of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split(maxsplit=5)
        if fields and "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
            inside = len(fields) == 6 and fields[5] == path
        elif inside and fields[:1] == ["Rss:"]:
            total += int(fields[1])
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise and /proc/self/smaps are Linux's")
def test_counted_pages_of_the_map_leave_the_resident_set(data_dir: Path):
    """The length check reads prompts through the split's memory map; once a batch is counted its pages are
    dropped from the process (a read of every prompt would otherwise keep the whole file resident)."""
    from needlebench.dataset.load import load_split

    split = load_split("single_en_4k", data_dir=str(data_dir))
    path = os.path.realpath(split.cache_files[0]["filename"])
    prompts = [row["prompt"] for row in split.select_columns(["prompt"])]
    assert _mapped_rss(path) > sum(map(len, prompts)) // 1024 // 2  # the prompts' pages are resident
    assert budget.release_mapped_pages(split) >= os.path.getsize(path) - 4096
    assert _mapped_rss(path) == 0
    assert [row["prompt"] for row in split.select_columns(["prompt"])] == prompts  # read again from the file
    assert budget.release_mapped_pages([{"prompt": "a list, not a mapped split"}]) == 0


class FakeTerminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("tty", [True, False])
def test_progress_bar_only_on_a_terminal_and_only_when_the_count_takes_long(tty: bool, monkeypatch: pytest.MonkeyPatch):
    import time

    stream = FakeTerminal(tty)
    monkeypatch.setattr(sys, "stderr", stream)
    with budget.progress_bar(10, "length check") as bar:
        bar.update(5)  # quick: nothing shown yet
        assert stream.text == ""
        time.sleep(1.2)
        bar.update(5)
    assert ("length check" in stream.text and "10/10" in stream.text) == tty
    shown = stream.text
    with budget.progress_bar(10, "counting", enabled=False) as bar:  # budget_report(progress=False)
        time.sleep(1.2)
        bar.update(10)
    assert stream.text == shown
