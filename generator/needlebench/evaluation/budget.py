"""``needlebench budget``: which prompts would not fit a model's context window.

Lengths in the dataset are cl100k tokens; a model counts its own tokens, and its chat template adds more.
When ``prompt + max_gen_toks`` exceeds the model's maximum length, lm-eval truncates the prompt from the left
and only logs a warning, silently cutting needles (and the start of the frame) out of the context. This module
counts every prompt under the model's own tokenizer and chat template (as lm-eval's ``hf`` model encodes it)
and lists the rows that would be truncated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import max_gen_toks_for
from needlebench.safe_fs import Folder
from needlebench.tasks.grid import ConfigSpec, get_config

#: Prompts encoded per tokenizer call (fast tokenizers encode a batch in parallel).
ENCODE_BATCH = 64


def load_tokenizer(path: str, gguf_file: str | None = None) -> Any:
    """A transformers tokenizer as lm-eval loads it: a local folder, a ``.gguf`` file (or ``path`` plus
    ``gguf_file``), or a model name already in the local Hugging Face cache (see
    :mod:`needlebench.evaluation.model_tokenizer`). Nothing is downloaded; cached per source."""
    from needlebench.evaluation import model_tokenizer  # deferred: numpy, tokenizer readers; eval --help needs none

    return model_tokenizer.load_tokenizer(path, gguf_file)


def render_prompt(tokenizer: Any, prompt: str, chat_template: bool) -> str:
    """The text the model receives: the prompt as one user turn of the chat template, or the raw prompt."""
    if not chat_template:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise NeedlebenchError("the tokenizer has no chat template; drop --chat-template to count raw prompts")
    from needlebench.evaluation.chat_template import render  # deferred, as in load_tokenizer

    # bounded in time and memory, its errors one line: the template comes with the model folder
    return render(tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True)


def count_tokens(tokenizer: Any, texts: list[str]) -> list[int]:
    """Tokens of each text as lm-eval's ``hf`` model encodes it (no second BOS when a text starts with one)."""
    bos = getattr(tokenizer, "bos_token", None)
    counts = [0] * len(texts)
    for add_special in (True, False):
        indices = [i for i, text in enumerate(texts) if (not (bos and text.startswith(bos))) == add_special]
        for start in range(0, len(indices), ENCODE_BATCH):
            chunk = indices[start : start + ENCODE_BATCH]
            encoded = tokenizer([texts[i] for i in chunk], add_special_tokens=add_special)["input_ids"]
            for i, ids in zip(chunk, encoded, strict=True):
                counts[i] = len(ids)
    return counts


#: Lines longer than this are cut further, after sentence ends (". "), so their pieces repeat across prompts.
_LONG_CHUNK = 1024
#: Chunk counts kept before the memo is cleared (the distinct lines of the haystacks, plus the junctions).
_MEMO_SIZE = 1 << 20


def _split_line(line: str, lead: str) -> list[str]:
    """`lead + line` cut before the space of every ". " (a whitespace after a non-space character)."""
    parts = line.split(". ")
    if len(parts) == 1:
        return [lead + line]
    pieces = [lead + parts[0] + "."]
    pieces += [" " + part + "." for part in parts[1:-1]]
    pieces.append(" " + parts[-1])
    return pieces


def chunks(text: str) -> list[str]:
    """`text` cut right before whitespace that follows a non-whitespace character: before a line break, and in
    long lines before the space of ". ". The pieces concatenate to `text`; under a byte-level BPE tokenizer with
    the GPT-2 split regex each such cut is a boundary of the pre-tokeniser (no piece spans a non-space followed
    by a space, and the regex looks neither behind nor, there, ahead), so the tokens of `text` are the tokens of
    its pieces. Lines of the corpus repeat across prompts, so most pieces are counted once."""
    lines = text.split("\n")
    pieces: list[str] = []
    current, lead = lines[0], ""
    for line in lines[1:]:
        if current and not current[-1].isspace():
            pieces.extend(_split_line(current, lead) if len(current) > _LONG_CHUNK else [lead + current])
            current, lead = line, "\n"
        else:
            current = current + "\n" + line
    pieces.extend(_split_line(current, lead) if len(current) > _LONG_CHUNK else [lead + current])
    return pieces


def splits_at_whitespace(tokenizer: Any) -> bool:
    """True when the tokens of a text are the tokens of its :func:`chunks`: a fast tokenizer with byte-level BPE,
    no normalizer, the GPT-2 split regex (``ByteLevel(use_regex=True)``, optionally after single-digit
    splitting), and added tokens that hold no whitespace and do not strip it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    try:
        spec = json.loads(backend.to_str())
    except (AttributeError, TypeError, ValueError):
        return False
    steps = spec.get("pre_tokenizer") or {}
    steps = steps.get("pretokenizers", []) if steps.get("type") == "Sequence" else [steps]
    byte_level = [step for step in steps if step.get("type") == "ByteLevel"]
    others = [step for step in steps if step.get("type") != "ByteLevel"]
    if len(byte_level) != 1 or not byte_level[0].get("use_regex", True) or steps[-1] is not byte_level[0]:
        return False
    if any(step.get("type") != "Digits" or not step.get("individual_digits") for step in others):
        return False
    if spec.get("normalizer") is not None or (spec.get("model") or {}).get("type") != "BPE":
        return False
    for token in spec.get("added_tokens", []):
        content = str(token.get("content", ""))
        if token.get("lstrip") or token.get("rstrip") or token.get("single_word") or not content:
            return False
        if any(character.isspace() for character in content):
            return False
    return True


class TokenCounter:
    """Counts prompts as :func:`count_tokens` does. With a tokenizer that :func:`splits_at_whitespace`, a text is
    cut into :func:`chunks` whose counts are remembered, and only new chunks are encoded (in batches, by the
    tokenizer's parallel batch encoder); otherwise whole texts are batch-encoded. Exact either way."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.bos = getattr(tokenizer, "bos_token", None)
        self.chunked = splits_at_whitespace(tokenizer)
        self.memo: dict[str, int] = {}
        if self.chunked:
            with_special, without = (
                len(tokenizer(["a"], add_special_tokens=flag)["input_ids"][0]) for flag in (True, False)
            )
            self.special_tokens = with_special - without

    def count(self, texts: list[str]) -> list[int]:
        if not self.chunked:
            return count_tokens(self.tokenizer, texts)
        pieces = [chunks(text) for text in texts]
        missing = list({piece for text_pieces in pieces for piece in text_pieces if piece not in self.memo})
        if len(self.memo) + len(missing) > _MEMO_SIZE:
            self.memo.clear()
            missing = list({piece for text_pieces in pieces for piece in text_pieces})
        backend = self.tokenizer.backend_tokenizer
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # no offsets: a third faster
        for start in range(0, len(missing), ENCODE_BATCH * 16):
            batch = missing[start : start + ENCODE_BATCH * 16]
            encoded = encode(batch, add_special_tokens=False)
            self.memo.update(zip(batch, (len(encoding.ids) for encoding in encoded)))
        counts = []
        for text, text_pieces in zip(texts, pieces, strict=True):
            extra = 0 if self.bos and text.startswith(self.bos) else self.special_tokens
            counts.append(sum(map(self.memo.__getitem__, text_pieces)) + extra)
        return counts


def _over_row(row: Mapping[str, Any], tokens: int, max_gen_toks: int, max_length: int) -> dict[str, Any]:
    total = tokens + max_gen_toks
    return {
        "config": row["config"],
        "id": row["id"],
        "context_length": int(row["context_length"]),
        "depth_percent": row.get("depth_percent"),
        "prompt_tokens": tokens,
        "max_gen_toks": max_gen_toks,
        "total": total,
        "max_length": max_length,
        "truncated_tokens": total - max_length,
        "fits": total <= max_length,
    }


def count_rows(
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    max_length: int,
    *,
    chat_template: bool,
    max_gen_toks: int,
    counter: TokenCounter | None = None,
    progress: Any = None,
) -> Iterator[dict[str, Any]]:
    """One budget dict per row (``fits`` True or False), streaming: rows are rendered and counted in small
    batches, so no split is held in memory. ``progress`` (a tqdm bar) is advanced per row."""
    counter = counter or TokenCounter(tokenizer)
    batch: list[Mapping[str, Any]] = []

    def flush() -> Iterator[dict[str, Any]]:
        texts = [render_prompt(tokenizer, str(row["prompt"]), chat_template) for row in batch]
        for row, tokens in zip(batch, counter.count(texts), strict=True):
            yield _over_row(row, tokens, max_gen_toks, max_length)
        if progress is not None:
            progress.update(len(batch))

    for row in rows:
        batch.append(row)
        if len(batch) >= ENCODE_BATCH:
            yield from flush()
            batch = []
    if batch:
        yield from flush()


def budget_rows(
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    max_length: int,
    *,
    chat_template: bool,
    max_gen_toks: int,
) -> list[dict[str, Any]]:
    """The rows whose rendered prompt plus ``max_gen_toks`` exceeds ``max_length`` (one dict per row)."""
    counted = count_rows(rows, tokenizer, max_length, chat_template=chat_template, max_gen_toks=max_gen_toks)
    return [row for row in counted if not row["fits"]]


def _task_budget(spec: ConfigSpec, max_gen_toks: int | None, max_length: int) -> int:
    """The generation budget of a config: ``max_gen_toks`` when positive, else its task's own; below the window."""
    budget = max_gen_toks if max_gen_toks is not None and max_gen_toks > 0 else max_gen_toks_for(spec)
    if budget >= max_length:
        raise NeedlebenchError(
            f"max_gen_toks {budget} of {spec.name} is not below max length {max_length}; raise the max length"
        )
    return budget


#: The columns a budget reads.
_COLUMNS = ["id", "config", "context_length", "depth_percent", "prompt"]


def split_rows(config: str, data_dir: str | None) -> Iterable[Mapping[str, Any]]:
    """The rows of ``config`` (its budget columns), streamed from the Parquet files a needlebench manifest lists
    (``data_dir``, or the on-the-fly build); any other folder is read with `datasets` (`load_split`)."""
    from needlebench.dataset.build import read_manifest  # deferred: card, builders (0.2 s); eval --help needs none
    from needlebench.dataset.load import ensure_built, load_split  # deferred: as the line above

    folder = Path(data_dir).expanduser().resolve() if data_dir else ensure_built(config)
    manifest = read_manifest(folder) if folder.is_dir() else None
    files = ((manifest or {}).get("configs", {}).get(config) or {}).get("files")
    if not files:
        return load_split(config, data_dir=data_dir)
    handles: list[IO[bytes]] = []
    try:  # each listed file opened once, as a regular file inside the folder (never a link, FIFO or device)
        with Folder.open(folder) as root:
            for name in files:
                handles.append(root.open_read(name, what=f" (listed by {folder / 'needlebench.json'})"))
    except FileNotFoundError:
        for handle in handles:
            handle.close()
        return load_split(config, data_dir=data_dir)
    except BaseException:
        for handle in handles:
            handle.close()
        raise
    return _parquet_rows(handles)


def _parquet_rows(handles: list[IO[bytes]]) -> Iterator[dict[str, Any]]:
    """The rows of the open Parquet files, read through those descriptors only."""
    import pyarrow.parquet as pq

    try:
        for handle in handles:
            for batch in pq.ParquetFile(handle).iter_batches(batch_size=ENCODE_BATCH, columns=_COLUMNS):
                yield from batch.to_pylist()
    finally:
        for handle in handles:
            handle.close()


@dataclass
class LengthSummary:
    """The budget of one (config, context length): rows, the longest prompt and the rows that do not fit."""

    config: str
    context_length: int
    rows: int = 0
    max_prompt_tokens: int = 0
    max_gen_toks: int = 0
    over: int = 0


@dataclass
class BudgetReport:
    max_length: int
    summaries: list[LengthSummary] = field(default_factory=list)
    over: list[dict] = field(default_factory=list)  # the rows that do not fit, in row order


def run_budget(
    tokenizer: str,
    max_length: int,
    configs: list[str],
    *,
    chat_template: bool,
    max_gen_toks: int | None,
    data_dir: str | None,
) -> list[dict]:
    """Rows of ``configs`` (config names; the CLI expands globs) that lm-eval would left-truncate (each with
    ``fits: False``); see :func:`budget_report`."""
    return budget_report(
        tokenizer,
        max_length,
        configs,
        chat_template=chat_template,
        max_gen_toks=max_gen_toks,
        data_dir=data_dir,
        progress=False,
    ).over


def budget_report(
    tokenizer: str,
    max_length: int,
    configs: list[str],
    *,
    chat_template: bool,
    max_gen_toks: int | None,
    data_dir: str | None,
    progress: bool = True,
    gguf_file: str | None = None,
) -> BudgetReport:
    """Count every prompt of ``configs`` under the model's tokenizer: a summary per (config, length) and the rows
    lm-eval would left-truncate.

    ``max_gen_toks`` None (or <= 0) uses each task's own budget (the ``max_gen_toks`` of its YAML). A
    ``data_dir`` lacking a config is a one-line error. ``progress`` shows a bar over all rows (on stderr).
    ``gguf_file`` names the GGUF file inside the ``tokenizer`` folder (as lm-eval's ``gguf_file`` model arg).
    """
    if max_length <= 0:
        raise NeedlebenchError(f"max length {max_length} must be a positive number of tokens")
    if not configs:
        raise NeedlebenchError("no configs given; name at least one, e.g. single_en_4k")
    specs = [get_config(name) for name in configs]
    budgets = [_task_budget(spec, max_gen_toks, max_length) for spec in specs]
    tok = load_tokenizer(tokenizer, gguf_file)
    counter = TokenCounter(tok)
    from tqdm import tqdm

    report = BudgetReport(max_length)
    total = sum(spec.num_rows for spec in specs)
    with tqdm(total=total, unit="row", desc="counting", disable=not progress) as bar:
        for spec, budget in zip(specs, budgets, strict=True):
            rows = split_rows(spec.name, data_dir)
            summaries: dict[int, LengthSummary] = {}
            for row in count_rows(
                rows, tok, max_length, chat_template=chat_template, max_gen_toks=budget, counter=counter, progress=bar
            ):
                length = row["context_length"]
                summary = summaries.setdefault(length, LengthSummary(spec.name, length, max_gen_toks=budget))
                summary.rows += 1
                summary.max_prompt_tokens = max(summary.max_prompt_tokens, row["prompt_tokens"])
                if not row["fits"]:
                    summary.over += 1
                    report.over.append(row)
            report.summaries.extend(summaries[length] for length in sorted(summaries))
    return report


#: Lengths of one config shown one a line up to this many; beyond it (ATC: every row its own length) the lengths
#: are grouped into this many bins of neighbouring lengths.
MAX_LENGTH_LINES = 12


def length_bins(summaries: list[LengthSummary]) -> list[tuple[str, LengthSummary]]:
    """(length or length range, summary) lines of one config's summaries (sorted by length): one per length, or
    at most :data:`MAX_LENGTH_LINES` bins of neighbouring lengths, each summed (rows, longest prompt, rows over)."""
    if len(summaries) <= MAX_LENGTH_LINES:
        return [(str(item.context_length), item) for item in summaries]
    size = -(-len(summaries) // MAX_LENGTH_LINES)  # ceiling: at most MAX_LENGTH_LINES bins
    lines = []
    for start in range(0, len(summaries), size):
        part = summaries[start : start + size]
        merged = LengthSummary(
            part[0].config,
            part[0].context_length,
            rows=sum(item.rows for item in part),
            max_prompt_tokens=max(item.max_prompt_tokens for item in part),
            max_gen_toks=part[0].max_gen_toks,
            over=sum(item.over for item in part),
        )
        lines.append((f"{part[0].context_length}-{part[-1].context_length}", merged))
    return lines


def format_budget(report: BudgetReport | list[dict], rows: bool = False) -> str:
    """A text report: a table per config and length (rows, longest prompt, rows that do not fit; a config of many
    lengths in bins of neighbouring lengths), then, with ``rows``, every row that does not fit. A plain list of
    rows (from :func:`run_budget`) lists its rows."""
    if isinstance(report, list):
        return _format_rows(report)
    over, summaries = report.over, report.summaries
    lines = []
    if summaries:
        lines.append(f"{'config':<40} {'length':>13} {'rows':>6} {'max tokens':>11} {'+gen':>6} {'do not fit':>11}")
        by_config: dict[str, list[LengthSummary]] = {}
        for item in summaries:
            by_config.setdefault(item.config, []).append(item)
        for items in by_config.values():
            for length, item in length_bins(items):
                lines.append(
                    f"{item.config:<40} {length:>13} {item.rows:>6} {item.max_prompt_tokens:>11} "
                    f"{item.max_gen_toks:>6} {item.over:>11}"
                )
        for config, items in by_config.items():
            if len(items) > MAX_LENGTH_LINES:
                lines.append(f"{config}: {len(items)} lengths, in bins of neighbouring lengths")
        lines.append("")
    if not over:
        return "\n".join(lines + ["All prompts fit: no row would be truncated."])
    hint = "." if rows else "; list them with --rows."
    lines.append(f"{len(over)} row(s) would be left-truncated by lm-eval (needles may be cut out){hint}")
    if rows:
        lines += [""] + _row_lines(over)
    return "\n".join(lines)


def _format_rows(over: list[dict]) -> str:
    """The rows of :func:`run_budget`: a per-config count, then the rows."""
    if not over:
        return "All prompts fit: no row would be truncated."
    lines = [f"{len(over)} row(s) would be left-truncated by lm-eval (needles may be cut out):", ""]
    by_config: dict[str, list[dict]] = {}
    for row in over:
        by_config.setdefault(row["config"], []).append(row)
    lines.append(f"{'config':<40} {'rows':>6} {'shortest cut':>13} {'longest cut':>12}")
    for config, items in by_config.items():
        cuts = [item["truncated_tokens"] for item in items]
        lines.append(f"{config:<40} {len(items):>6} {min(cuts):>13} {max(cuts):>12}")
    return "\n".join(lines + [""] + _row_lines(over))


def _row_lines(over: list[dict]) -> list[str]:
    lines = [f"{'id':<48} {'length':>8} {'depth':>6} {'prompt':>8} {'+gen':>6} {'max':>8} {'cut':>7}"]
    for row in over:
        depth = "" if row.get("depth_percent") is None else f"{float(row['depth_percent']):g}"
        lines.append(
            f"{row['id']:<48} {row['context_length']:>8} {depth:>6} {row['prompt_tokens']:>8} "
            f"{row['max_gen_toks']:>6} {row['max_length']:>8} {row['truncated_tokens']:>7}"
        )
    return lines
