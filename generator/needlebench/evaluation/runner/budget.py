"""``needlebench budget``: which prompts would not fit a model's context window.

Lengths in the dataset are cl100k tokens; a model counts its own tokens, and its chat template adds more.
When ``prompt + max_gen_toks`` exceeds the model's maximum length, lm-eval truncates the prompt from the left
and only logs a warning, silently cutting needles (and the start of the frame) out of the context. This module
counts every prompt under the model's own tokenizer and chat template (as lm-eval's ``hf`` model encodes it)
and lists the rows that would be truncated.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.tasks import max_gen_toks_for
from needlebench.safe_fs import Folder
from needlebench.tasks.grid import ConfigSpec, get_config

#: Prompts encoded per tokenizer call (fast tokenizers encode a batch in parallel).
ENCODE_BATCH = 64
#: Characters of prompt text held at once: rows are read and counted in batches of at most :data:`ENCODE_BATCH`
#: rows and about this many characters (at a million tokens a prompt is some 4 million characters, so such rows
#: go a few at a time); a tokenizer call encodes at most this many characters.
BATCH_CHARS = 16 * 1024 * 1024


def load_tokenizer(path: str, gguf_file: str | None = None) -> Any:
    """A transformers tokenizer as lm-eval loads it: a local folder, a ``.gguf`` file (or ``path`` plus
    ``gguf_file``), or a Hub model id, whose tokenizer files only are fetched through ``huggingface_hub`` (the
    cache and ``HF_HUB_OFFLINE`` respected; see :mod:`needlebench.evaluation.runner.model_tokenizer`). Cached per
    source."""
    from needlebench.evaluation.runner import (  # deferred: numpy, tokenizer readers; eval --help needs none
        model_tokenizer,
    )

    return model_tokenizer.load_tokenizer(path, gguf_file)


def render_prompt(tokenizer: Any, prompt: str, chat_template: bool) -> str:
    """The text the model receives: the prompt as one user turn of the chat template, or the raw prompt."""
    if not chat_template:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise NeedlebenchError("the tokenizer has no chat template; drop --chat-template to count raw prompts")
    from needlebench.evaluation.runner.chat_template import (  # deferred: a chat template only, as in load_tokenizer
        render,
    )

    # bounded in time and memory, its errors one line: the template comes with the model folder
    return render(tokenizer, [{"role": "user", "content": prompt}], add_generation_prompt=True)


def _batches(texts: list[str], indices: list[int]) -> Iterator[list[int]]:
    """``indices`` in runs of at most :data:`ENCODE_BATCH` texts and :data:`BATCH_CHARS` characters (a longer text
    alone): a tokenizer's batch holds every encoding at once, so 64 prompts of a million tokens would not fit."""
    run: list[int] = []
    size = 0
    for index in indices:
        if run and (len(run) >= ENCODE_BATCH or size + len(texts[index]) > BATCH_CHARS):
            yield run
            run, size = [], 0
        run.append(index)
        size += len(texts[index])
    if run:
        yield run


def count_tokens(tokenizer: Any, texts: list[str]) -> list[int]:
    """Tokens of each text as lm-eval's ``hf`` model encodes it (no second BOS when a text starts with one)."""
    bos = getattr(tokenizer, "bos_token", None)
    counts = [0] * len(texts)
    for add_special in (True, False):
        indices = [i for i, text in enumerate(texts) if (not (bos and text.startswith(bos))) == add_special]
        for chunk in _batches(texts, indices):
            encoded = tokenizer([texts[i] for i in chunk], add_special_tokens=add_special)["input_ids"]
            for i, ids in zip(chunk, encoded, strict=True):
                counts[i] = len(ids)
    return counts


#: Lines longer than this are cut further, after sentence ends (". "), so their pieces repeat across prompts.
_LONG_CHUNK = 1024
#: Chunk counts kept before the memo is cleared (the distinct lines of the haystacks, plus the junctions), and
#: the characters they may hold together: a distinct chunk costs its text plus about :data:`_MEMO_ENTRY` bytes.
_MEMO_SIZE = 1 << 20
_MEMO_CHARS = 64 * 1024 * 1024
_MEMO_ENTRY = 160
#: Distinct chunks encoded per call of the tokenizer's batch encoder.
_PIECE_BATCH = ENCODE_BATCH * 16


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
    tokenizer's parallel batch encoder); otherwise whole texts are batch-encoded. Exact either way.

    Memory stays bounded whatever the prompts: the memo is cleared when it would pass :data:`_MEMO_SIZE` chunks or
    about :data:`_MEMO_CHARS` characters, and no tokenizer call gets more than :data:`BATCH_CHARS` characters."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.bos = getattr(tokenizer, "bos_token", None)
        self.chunked = splits_at_whitespace(tokenizer)
        self.memo: dict[str, int] = {}
        self.memo_chars = 0  # characters of the memo's chunks plus _MEMO_ENTRY a chunk
        if self.chunked:
            with_special, without = (
                len(tokenizer(["a"], add_special_tokens=flag)["input_ids"][0]) for flag in (True, False)
            )
            self.special_tokens = with_special - without

    def _remember(self, pieces: list[str]) -> None:
        """Encode the chunks ``pieces`` (distinct, not in the memo) and remember their counts."""
        backend = self.tokenizer.backend_tokenizer
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # no offsets: a third faster
        batch: list[str] = []
        size = 0
        for piece in [*pieces, None]:
            if batch and (piece is None or len(batch) >= _PIECE_BATCH or size + len(piece) > BATCH_CHARS):
                encoded = encode(batch, add_special_tokens=False)
                self.memo.update(zip(batch, (len(encoding.ids) for encoding in encoded)))
                batch, size = [], 0
            if piece is not None:
                batch.append(piece)
                size += len(piece)

    def _text_pieces(self, text: str) -> list[str]:
        """The chunks of ``text``, each counted in the memo (the memo cleared first when they would overflow it)."""
        pieces = chunks(text)
        missing = list({piece: None for piece in pieces if piece not in self.memo})
        cost = sum(len(piece) + _MEMO_ENTRY for piece in missing)
        if self.memo and (len(self.memo) + len(missing) > _MEMO_SIZE or self.memo_chars + cost > _MEMO_CHARS):
            self.memo.clear()
            self.memo_chars = 0
            missing = list(dict.fromkeys(pieces))
            cost = sum(len(piece) + _MEMO_ENTRY for piece in missing)
        self._remember(missing)
        self.memo_chars += cost
        return pieces

    def count(self, texts: list[str]) -> list[int]:
        if not self.chunked:
            return count_tokens(self.tokenizer, texts)
        counts = []
        for text in texts:  # one text's chunks at a time: a million-token prompt is some 100,000 chunks
            extra = 0 if self.bos and text.startswith(self.bos) else self.special_tokens
            counts.append(sum(map(self.memo.__getitem__, self._text_pieces(text))) + extra)
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


def count_batches(
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    *,
    chat_template: bool,
    counter: TokenCounter | None = None,
    progress: Any = None,
) -> Iterator[list[tuple[Mapping[str, Any], int]]]:
    """``(row, prompt tokens)`` of every row, a batch at a time, streaming: at most :data:`ENCODE_BATCH` rows and
    about :data:`BATCH_CHARS` characters of prompt are pulled from ``rows`` before they are counted, so neither a
    split nor a batch of million-token prompts is held in memory. ``progress`` (a tqdm bar) is advanced per row.
    A caller may stop after any batch (the first rows that do not fit) without the rest being read."""
    counter = counter or TokenCounter(tokenizer)
    batch: list[Mapping[str, Any]] = []
    size = 0

    def counted() -> list[tuple[Mapping[str, Any], int]]:
        texts = [render_prompt(tokenizer, str(row["prompt"]), chat_template) for row in batch]
        pairs = list(zip(batch, counter.count(texts), strict=True))
        if progress is not None:
            progress.update(len(batch))
        return pairs

    for row in rows:
        batch.append(row)
        size += len(row["prompt"])
        if len(batch) >= ENCODE_BATCH or size >= BATCH_CHARS:
            yield counted()
            batch, size = [], 0
    if batch:
        yield counted()


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
    """One budget dict per row (``fits`` True or False), streaming as :func:`count_batches`."""
    for pairs in count_batches(rows, tokenizer, chat_template=chat_template, counter=counter, progress=progress):
        for row, tokens in pairs:
            yield _over_row(row, tokens, max_gen_toks, max_length)


def progress_bar(total: int, description: str, enabled: bool = True) -> Any:
    """A tqdm bar of ``total`` rows on stderr, shown only on an interactive stderr and only once the count has
    taken a second (a short count prints nothing)."""
    from tqdm import tqdm

    from needlebench.terminal import progress_enabled  # deferred: progress output, for a long count only

    return tqdm(total=total, unit="row", desc=description, disable=not (enabled and progress_enabled()), delay=1.0)


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
    from needlebench.dataset.load import ensure_built, load_split  # deferred: builders (0.2 s); eval --help needs none
    from needlebench.dataset.manifest import read_manifest  # deferred: as the line above

    folder = Path(data_dir).expanduser().resolve() if data_dir else ensure_built(config)
    manifest = read_manifest(folder, missing_ok=True)
    files = ((manifest or {}).get("configs", {}).get(config) or {}).get("files")
    if not files:
        return load_split(config, data_dir=data_dir)
    from needlebench.dataset.verify import shard_size_problem  # deferred: as the lines above

    handles: list[IO[bytes]] = []
    try:  # each listed file opened once, as a regular file inside the folder (never a link, FIFO or device)
        with Folder.open(folder) as root:
            for name in files:
                handles.append(root.open_read(name, what=f" (listed by {folder / 'needlebench.json'})"))
        entry = manifest["configs"][config]  # type: ignore[index]
        too_large = shard_size_problem(
            zip(files, handles, strict=True), config, entry, "its manifest", get_config(config)
        )
        if too_large is not None:  # before a byte is read
            raise NeedlebenchError(f"data_dir {folder}: {too_large}")
    except FileNotFoundError:
        for handle in handles:
            handle.close()
        return load_split(config, data_dir=data_dir)
    except BaseException:
        for handle in handles:
            handle.close()
        raise
    return _parquet_rows(handles, [folder / name for name in files], config)


#: Columns a budget row must have a value in (``depth_percent`` is null where a row has no single depth).
_REQUIRED = ("id", "config", "context_length", "prompt")


def _parquet_rows(handles: list[IO[bytes]], paths: list[Path], config: str) -> Iterator[dict[str, Any]]:
    """The rows of the open Parquet files, read through those descriptors only, in record batches of at most
    :data:`ENCODE_BATCH` rows and about :data:`BATCH_CHARS` bytes (from each row group's uncompressed size); a file
    that is not Parquet, lacks a column, has a column of another type or a null where a row needs a value is a
    one-line error naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from needlebench.tasks.schema import BASE_COLUMNS  # deferred: pyarrow

    try:
        for handle, path in zip(handles, paths, strict=True):
            what = f"{path} (a file of config {config})"
            try:
                parquet = pq.ParquetFile(handle)
                schema = parquet.schema_arrow
                for column in _COLUMNS:
                    index = schema.get_field_index(column)
                    if index < 0:
                        raise NeedlebenchError(f"{what} has no column {column}; it is not a needlebench shard")
                    if schema.field(index).type != BASE_COLUMNS[column]:
                        raise NeedlebenchError(
                            f"{what} has the column {column} of type {schema.field(index).type}; expected "
                            f"{BASE_COLUMNS[column]}"
                        )
                metadata = parquet.metadata
                for group in range(metadata.num_row_groups):
                    info = metadata.row_group(group)
                    per_row = info.total_byte_size // max(info.num_rows, 1)
                    size = max(1, min(ENCODE_BATCH, BATCH_CHARS // max(per_row, 1)))
                    for batch in parquet.iter_batches(batch_size=size, row_groups=[group], columns=_COLUMNS):
                        for column in _REQUIRED:
                            if batch.column(column).null_count:
                                raise NeedlebenchError(f"{what} has a row with no {column} (null)")
                        yield from batch.to_pylist()
            except (OSError, ValueError, pa.ArrowException) as error:  # ArrowInvalid is a ValueError
                reason = " ".join(str(error).split())[:160] or type(error).__name__
                raise NeedlebenchError(f"{what} is not a readable Parquet file ({reason})") from None
    finally:
        for handle in handles:
            handle.close()


#: madvise(2) advice MADV_DONTNEED (Linux): the pages leave this process; a read-only file mapping reads them again
#: from the page cache when touched.
_MADV_DONTNEED = 4


def release_mapped_pages(rows: Any) -> int:
    """Drop the pages of the memory-mapped Arrow files of ``rows`` (a `datasets.Dataset`: its ``cache_files``) from
    this process's resident memory, and return the bytes of mapping advised. Reading every prompt of a split
    through its map (the length check) would otherwise keep the whole file resident (2 GB at ``single_en_1000k``)
    although each batch is dropped once counted. Only read-only mappings of exactly those files, as
    ``/proc/self/maps`` lists them, are advised (Linux; elsewhere nothing is done), so no other memory is touched;
    the rows stay readable."""
    files = {os.path.realpath(item["filename"]) for item in getattr(rows, "cache_files", None) or []}
    if not files or not sys.platform.startswith("linux"):
        return 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.readlines()
    except OSError:
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advised = 0
    for line in lines:
        fields = line.rstrip("\n").split(maxsplit=5)  # address perms offset dev inode path
        if len(fields) < 6 or "w" in fields[1] or fields[5] not in files:
            continue
        start, end = (int(value, 16) for value in fields[0].split("-"))
        if madvise(start, end - start, _MADV_DONTNEED) == 0:
            advised += end - start
    return advised


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
    report = BudgetReport(max_length)
    total = sum(spec.num_rows for spec in specs)
    with progress_bar(total, "counting", progress) as bar:
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
