"""``needlebench budget``: which prompts would not fit a model's context window.

Lengths in the dataset are cl100k tokens; a model counts its own tokens, and its chat template adds more.
When ``prompt + max_gen_toks`` exceeds the model's maximum length, lm-eval truncates the prompt from the left
and only logs a warning, silently cutting needles (and the start of the frame) out of the context. This module
counts every prompt under the model's own tokenizer and chat template (as lm-eval's ``hf`` model encodes it)
and lists the rows that would be truncated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import max_gen_toks_for
from needlebench.tasks.grid import ConfigSpec, get_config

#: Prompts encoded per tokenizer call (fast tokenizers encode a batch in parallel).
ENCODE_BATCH = 64


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Any:
    """A transformers tokenizer from a local folder, or a model name already in the local Hugging Face cache.

    Nothing is downloaded (``local_files_only``); cached per path.
    """
    folder = Path(path).expanduser()
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise NeedlebenchError(
            "tokenizer counting needs transformers; install it with `pip install 'needlebench[hf-tokenizer]'`"
        ) from None
    source = str(folder) if folder.is_dir() else path
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except (OSError, ValueError) as exc:
        if not folder.is_dir():
            raise NeedlebenchError(
                f"tokenizer {path!r} is not a local folder nor a model in the local Hugging Face cache; "
                "pass the path of a model or tokenizer directory"
            ) from None
        raise NeedlebenchError(f"tokenizer folder {path!r} could not be loaded: {str(exc).splitlines()[0]}") from None


def render_prompt(tokenizer: Any, prompt: str, chat_template: bool) -> str:
    """The text the model receives: the prompt as one user turn of the chat template, or the raw prompt."""
    if not chat_template:
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise NeedlebenchError("the tokenizer has no chat template; drop --chat-template to count raw prompts")
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


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


def budget_rows(
    rows: Iterable[Mapping[str, Any]],
    tokenizer: Any,
    max_length: int,
    *,
    chat_template: bool,
    max_gen_toks: int,
) -> list[dict[str, Any]]:
    """The rows whose rendered prompt plus ``max_gen_toks`` exceeds ``max_length`` (one dict per row)."""
    rows = list(rows)
    texts = [render_prompt(tokenizer, str(row["prompt"]), chat_template) for row in rows]
    over = []
    for row, tokens in zip(rows, count_tokens(tokenizer, texts), strict=True):
        total = tokens + max_gen_toks
        if total > max_length:
            over.append(
                {
                    "config": row["config"],
                    "id": row["id"],
                    "context_length": int(row["context_length"]),
                    "depth_percent": row.get("depth_percent"),
                    "prompt_tokens": tokens,
                    "max_gen_toks": max_gen_toks,
                    "total": total,
                    "max_length": max_length,
                    "truncated_tokens": total - max_length,
                    "fits": False,
                }
            )
    return over


def _task_budget(spec: ConfigSpec, max_gen_toks: int | None, max_length: int) -> int:
    """The generation budget of a config: ``max_gen_toks`` when positive, else its task's own; below the window."""
    budget = max_gen_toks if max_gen_toks is not None and max_gen_toks > 0 else max_gen_toks_for(spec)
    if budget >= max_length:
        raise NeedlebenchError(
            f"max_gen_toks {budget} of {spec.name} is not below max length {max_length}; raise the max length"
        )
    return budget


def run_budget(
    tokenizer: str,
    max_length: int,
    configs: list[str],
    *,
    chat_template: bool,
    max_gen_toks: int | None,
    data_dir: str | None,
) -> list[dict]:
    """Rows of ``configs`` (config names; the CLI expands globs) that lm-eval would left-truncate.

    Each row dict has ``fits: False``. ``max_gen_toks`` None (or <= 0) uses each task's own budget (the
    ``max_gen_toks`` of its YAML). A ``data_dir`` lacking a config is a one-line error.
    """
    if max_length <= 0:
        raise NeedlebenchError(f"max length {max_length} must be a positive number of tokens")
    if not configs:
        raise NeedlebenchError("no configs given; name at least one, e.g. single_en_4k")
    specs = [get_config(name) for name in configs]
    budgets = [_task_budget(spec, max_gen_toks, max_length) for spec in specs]
    tok = load_tokenizer(tokenizer)
    from needlebench.dataset.load import (
        load_split,  # imported lazily: it pulls in the builders
    )

    flagged: list[dict] = []
    for spec, budget in zip(specs, budgets, strict=True):
        rows = load_split(spec.name, data_dir=data_dir)
        flagged.extend(budget_rows(rows, tok, max_length, chat_template=chat_template, max_gen_toks=budget))
    return flagged


def format_budget(rows: list[dict]) -> str:
    """A text report of :func:`run_budget`'s rows: a per-config summary, then the rows."""
    if not rows:
        return "All prompts fit: no row would be truncated."
    lines = [f"{len(rows)} row(s) would be left-truncated by lm-eval (needles may be cut out):", ""]
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["config"], []).append(row)
    lines.append(f"{'config':<40} {'rows':>6} {'shortest cut':>13} {'longest cut':>12}")
    for config, items in by_config.items():
        cuts = [item["truncated_tokens"] for item in items]
        lines.append(f"{config:<40} {len(items):>6} {min(cuts):>13} {max(cuts):>12}")
    lines += ["", f"{'id':<48} {'length':>8} {'depth':>6} {'prompt':>8} {'+gen':>6} {'max':>8} {'cut':>7}"]
    for row in rows:
        depth = "" if row.get("depth_percent") is None else f"{float(row['depth_percent']):g}"
        lines.append(
            f"{row['id']:<48} {row['context_length']:>8} {depth:>6} {row['prompt_tokens']:>8} "
            f"{row['max_gen_toks']:>6} {row['max_length']:>8} {row['truncated_tokens']:>7}"
        )
    return "\n".join(lines)

