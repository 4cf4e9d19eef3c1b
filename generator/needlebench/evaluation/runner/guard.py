"""What ``needlebench eval`` adds around lm-eval's CLI: no silent truncation, reasoning budgets, resume, health.

* **Length check.** lm-eval left-truncates a prompt that does not fit ``window - max_gen_toks`` and only logs a
  warning, cutting the haystack and the needle positions. Before starting, :func:`preflight` counts every
  selected row (``--limit`` / ``--samples`` respected) in the model's own tokenizer, with the chat template when
  ``--apply_chat_template`` is given, plus the task's ``max_gen_toks``, against the model's window
  (``max_model_len`` / ``max_length`` model args, the server's ``max_model_len`` for API models, else the
  model config). If a row does not fit, it refuses with one line giving the count per task (exit 2);
  ``--skip-too-long`` runs the rest (the run gets an explicit ``--samples`` selection) and records the skipped
  counts; a task none of whose selected rows fit is left out of ``--tasks`` (lm-eval cannot run a task without
  rows), said so in one line and counted in the results; when nothing is left the run refuses (exit 2).
* **Reasoning budgets.** ``--reasoning`` doubles every task's ``max_gen_toks``; ``--reasoning=N`` sets it to N.
  The run then reads a generated task folder whose YAMLs include ours and override only
  ``generation_kwargs``. ``--think-end MARK`` sets the end-of-reasoning marker stripped before scoring
  (default ``</think>``) and ``--think-unclosed keep|empty`` what the default metrics score of a reasoning block
  never closed (default ``keep``: the whole output); see :mod:`needlebench.evaluation.scoring.thinking`.
* **Resume.** ``--resume`` adds lm-eval's ``--use_cache`` with a database in this user's private cache keyed by
  the output folder, the model and its arguments (lm-eval keys each entry by the request: prompt and generation
  settings), so a killed run, started again with the same command, only computes the rows it had not finished.
* **Health.** After the run, ``needlebench_health_<date>.json`` beside the ``results_<date>.json`` this run wrote
  (read from the run's own folder, :mod:`needlebench.evaluation.runner.run_output`, never from other files of the output
  folder) gives
  every needlebench task ``output_truncated`` (rows whose output used all of ``max_gen_toks``),
  ``no_final_answer`` (share of rows whose reasoning block was never closed) and ``skipped_too_long``, and the
  tasks not run because none of their rows fit (``not_run``); lm-eval's results file is left as lm-eval wrote it.
  ``needlebench report`` shows them (and reads older results that carry them inline).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import stat
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.lm_eval_files import (
    RESULTS_PREFIX,
    SAMPLES_FILE_RE,
    SAMPLES_SUFFIX,
    health_path,
    raw_response,
    samples_prefix,
)
from needlebench.evaluation.harness.task_yaml import dump_yaml
from needlebench.evaluation.harness.tasks import (
    TASK_PREFIX,
    all_task_names,
    generation_kwargs,
    load_dataset,
    max_gen_toks_for,
    task_groups,
    task_name,
)
from needlebench.evaluation.runner.budget import TokenCounter, count_batches, progress_bar, release_mapped_pages
from needlebench.evaluation.runner.model_tokenizer import (
    TokenizerSource,
    gguf_context_length,
    load_source,
    resolve_source,
)
from needlebench.evaluation.runner.run_output import RunOutput
from needlebench.evaluation.scoring.thinking import has_final_answer, policy_from
from needlebench.safe_fs import Folder
from needlebench.sources.cache import cache_folder, cache_root
from needlebench.tasks.grid import get_config, registry

#: Models with no context window (answers do not depend on the prompt length).
WINDOWLESS_MODELS = ("needlebench-oracle", "dummy")
#: lm-eval models that talk to an OpenAI-compatible server (window: the server's, and ``max_length`` when the
#: client tokenizes and truncates).
API_MODELS = ("local-completions", "local-chat-completions")
#: API models that tokenize the prompt client-side (lm-eval truncates to ``max_length - 1`` there).
CLIENT_TOKENIZED = ("local-completions",)
#: lm-eval's default ``max_length`` of the API models.
API_DEFAULT_MAX_LENGTH = 2048

#: File written into the output folder with the skipped rows.
SKIPPED_FILE = "needlebench_skipped.json"
#: Keys added to each needlebench task of lm-eval's results JSON.
HEALTH_KEYS = ("output_truncated", "no_final_answer", "skipped_too_long")


# --------------------------------------------------------------------------------------------- argv


@dataclass
class EvalArgs:
    """A parsed ``needlebench eval`` command: lm-eval's options as lm-eval's own parser read them (``namespace``,
    see :mod:`needlebench.evaluation.runner.options`) and needlebench's own options."""

    namespace: argparse.Namespace
    skip_too_long: bool = False
    length_check: bool = True
    resume: bool = False
    think_end: str | None = None
    think_unclosed: str | None = None  # "keep" or "empty"
    reasoning: str | None = None  # "double" or an integer string
    subset: int | None = None
    chunk_rows: int | None = None  # --chunk-rows N (see needlebench.evaluation.runner.chunked)
    chunked: bool = True  # False: --no-chunk
    full_samples: bool = False
    shard: tuple[int, int] | None = None  # --shard i/N (see needlebench.evaluation.runner.chunked)
    merge_shards: list[str] | None = None  # --merge-shards OUT...: the shards' output folders
    user_include_path: str | None = None  # the user's own --include_path (ours is added beside it)

    def value(self, name: str) -> Any:
        """lm-eval's option ``name`` (its ``dest``, e.g. ``"output_path"``), None when not given."""
        return getattr(self.namespace, name, None)

    def given(self, name: str) -> bool:
        """Whether lm-eval's option ``name`` was given (flags whose default is ``argparse.SUPPRESS``)."""
        return hasattr(self.namespace, name) and getattr(self.namespace, name) is not None

    @property
    def tasks(self) -> list[str]:
        return [str(task).strip() for task in self.value("tasks") or [] if str(task).strip()]

    @property
    def model_args(self) -> dict[str, Any]:
        value = self.value("model_args")
        return dict(value) if isinstance(value, Mapping) else {}

    @property
    def metadata(self) -> dict[str, Any]:
        value = self.value("metadata")
        return dict(value) if isinstance(value, Mapping) else {}


def samples_option(args: EvalArgs) -> dict[str, Any]:
    """``--samples`` as lm-eval reads it: a JSON object, or the path of a JSON file."""
    value = args.value("samples")
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value:
        path = Path(value)
        if not path.is_file():
            raise NeedlebenchError(f"--samples {value!r} is neither a JSON object nor a JSON file")
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise NeedlebenchError(f"--samples file {value!r} is not a JSON object ({error})") from None
        if not isinstance(loaded, dict):
            raise NeedlebenchError(f"--samples file {value!r} is not a JSON object of task: [indices]")
        return loaded
    return {}


def gen_max_tokens(args: EvalArgs) -> int | None:
    """``max_gen_toks`` from ``--gen_kwargs`` (overrides every task's), or None."""
    value = (args.value("gen_kwargs") or {}).get("max_gen_toks")
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NeedlebenchError(f"--gen_kwargs max_gen_toks={value!r} is not a whole number of tokens") from None


# --------------------------------------------------------------------------------------------- tasks


def needlebench_configs(tasks: Sequence[str] | str | None) -> list[str]:
    """Configs of the needlebench tasks and groups named in ``--tasks`` (other tasks are ignored)."""
    if not tasks:
        return []
    names = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    groups = task_groups()
    configs: list[str] = []
    known = registry()
    for name in (part.strip() for part in names):
        if not name.startswith(TASK_PREFIX):
            continue
        stem = name.removeprefix(TASK_PREFIX)
        if stem in known:
            members = [stem]
        elif name in groups:
            members = list(groups[name].members)
        else:
            continue
        configs += [member for member in members if member not in configs]
    return configs


def task_budget(config: str, args: EvalArgs) -> int:
    """The ``max_gen_toks`` a task runs with: ``--gen_kwargs``, else the task's own, changed by ``--reasoning``."""
    override = gen_max_tokens(args)
    if override is not None:
        return override
    return reasoning_budget(max_gen_toks_for(get_config(config)), args.reasoning)


def reasoning_budget(budget: int, reasoning: str | None) -> int:
    """A task budget under ``--reasoning`` (None: unchanged; "double"; or a number of tokens)."""
    if reasoning is None:
        return budget
    return budget * 2 if reasoning == "double" else int(reasoning)


def selected_indices(count: int, task: str, args: EvalArgs) -> list[int]:
    """Row indices lm-eval will run of a task with ``count`` rows (``--samples`` or ``--limit``)."""
    samples = samples_option(args)
    if samples:
        return [int(index) for index in samples.get(task, range(count))]
    limit = args.value("limit")
    if limit in (None, ""):
        return list(range(count))
    value = float(limit)
    n = int(math.ceil(count * value)) if value < 1.0 else int(value)
    return list(range(min(n, count)))


# --------------------------------------------------------------------------------------------- model window


def model_kind(args: EvalArgs) -> str:
    return str(args.value("model") or "hf").strip()


def base_url(model_args: Mapping[str, Any]) -> str | None:
    """The ``base_url`` model arg of an API model, or None."""
    return _text(str(model_args.get("base_url") or "").strip())


#: ``max_model_len`` per server root already asked in this process (the length check and the API defaults both
#: need it; a server that does not answer costs its timeout once).
_SERVER_WINDOWS: dict[str, int | None] = {}


def server_max_model_len(base_url: str, timeout: float = 10.0) -> int | None:
    """``max_model_len`` that an OpenAI-compatible server (vLLM, vllm-router in front of vLLM) reports under
    ``GET /v1/models``, or None."""
    root = base_url.split("/v1/")[0].rstrip("/") if "/v1/" in base_url else base_url.rstrip("/").removesuffix("/v1")
    if root not in _SERVER_WINDOWS:
        _SERVER_WINDOWS[root] = _ask_server(root, timeout)
    return _SERVER_WINDOWS[root]


#: Largest ``/v1/models`` reply read (a list of a few models is a few kB), and the longest window believed: no model
#: has a window of more than 100M tokens, and a larger number would overflow the timeout derived from it.
MAX_MODELS_REPLY_BYTES = 1 << 20
MAX_WINDOW = 100_000_000


def _ask_server(root: str, timeout: float) -> int | None:
    """The smallest ``max_model_len`` of the models ``root/v1/models`` lists, or None. The server may be anyone's:
    the reply is read for at most `timeout` seconds in all and :data:`MAX_MODELS_REPLY_BYTES`, and anything but a
    JSON object whose ``data`` lists objects with a whole ``max_model_len`` of 1 to :data:`MAX_WINDOW` is no window."""
    import time

    deadline = time.monotonic() + timeout
    body = bytearray()
    try:
        with urllib.request.urlopen(f"{root}/v1/models", timeout=timeout) as response:
            while len(body) <= MAX_MODELS_REPLY_BYTES and time.monotonic() < deadline:
                piece = response.read1(65536)
                if not piece:
                    break
                body += piece
            else:
                return None  # too long, or still dripping at the deadline
        payload = json.loads(bytes(body).decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError, RecursionError):
        return None
    items = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(items, list):
        return None
    lengths = [item.get("max_model_len") for item in items if isinstance(item, dict)]
    lengths = [
        value for value in lengths if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW
    ]
    return min(lengths) if lengths else None


#: Largest ``config.json`` of a model read for its window (a model folder may come from anyone).
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Keys of a model's ``config.json`` that give its window: lm-eval's ``hf`` model reads ``n_positions``,
#: ``max_position_embeddings`` and ``n_ctx`` (``HFLM.max_length`` in lm_eval/models/huggingface.py).
WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def window_arg(kind: str) -> str:
    """The model arg that sets the window of an lm-eval model: ``max_model_len`` for vLLM, else ``max_length``."""
    return "max_model_len" if kind == "vllm" else "max_length"


def _unknown_window(kind: str, why: str) -> NeedlebenchError:
    arg = window_arg(kind)
    return NeedlebenchError(
        f"cannot tell the context window of --model {kind} ({why}); pass {arg}=N in --model_args, or "
        "--no-length-check to skip the check (lm-eval then truncates over-long prompts silently)"
    )


def _config_window(path: str | None) -> int | None:
    """The window the ``config.json`` of the model folder ``path`` records (:data:`WINDOW_KEYS`, also under
    ``text_config``), or None. Read as a regular file of at most :data:`MAX_CONFIG_BYTES` (a FIFO or a huge file
    planted there is a one-line error, not a hang)."""
    if not path:
        return None
    config = Path(path).expanduser() / "config.json"
    try:
        real = config.resolve(strict=True)  # the HF cache links snapshot files to its blobs
    except (OSError, RuntimeError):
        return None
    try:
        with Folder.open(real.parent) as folder:
            text = folder.read_text(real.name, limit=MAX_CONFIG_BYTES, what=f" ({config})")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise NeedlebenchError(f"{config} is not valid JSON; the model's config cannot be read") from None
    if not isinstance(data, dict):
        raise NeedlebenchError(f"{config} is not a JSON object; the model's config cannot be read")
    for section in (data, data.get("text_config")):
        if not isinstance(section, dict):
            continue
        for key in WINDOW_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def _revision(kind: str, model_args: Mapping[str, Any], tokenizer: bool = False) -> str | None:
    """The revision lm-eval reads the model (or, with `tokenizer`, its tokenizer) at: ``revision``; vLLM reads the
    tokenizer at ``tokenizer_revision`` (``lm_eval/models/vllm_causallms.py``)."""
    if kind == "vllm" and tokenizer:
        return _text(model_args.get("tokenizer_revision"))
    return _text(model_args.get("revision"))


def _token(model_args: Mapping[str, Any]) -> str | bool | None:
    """The ``token`` model arg (``True``/``False`` as lm-eval parses them), else None: ``huggingface_hub`` then
    uses ``HF_TOKEN`` or the stored login, as for lm-eval's own download."""
    value = model_args.get("token")
    if isinstance(value, bool):
        return value
    return _text(value)


def _subfolder(kind: str, model_args: Mapping[str, Any]) -> str | None:
    return _text(model_args.get("subfolder")) if kind == "hf" else None


def model_window(args: EvalArgs, model_args: Mapping[str, Any]) -> tuple[int, str]:
    """The number of tokens (prompt + generation) the run may use, and where it comes from: the model args
    (``max_model_len`` / ``max_length``), the server (API models), else the model's config (a folder, a GGUF, or a
    Hub id whose config.json is fetched, see :func:`needlebench.evaluation.runner.model_tokenizer.resolve_source`). When
    it cannot be told, a one-line error names the model arg that sets it and ``--no-length-check``."""
    kind = model_kind(args)
    explicit = model_args.get("max_model_len") or model_args.get("max_length")
    if kind in API_MODELS:
        url = base_url(model_args)
        server = server_max_model_len(url) if url else None
        limits: list[tuple[int, str]] = []
        if server:
            limits.append((server, f"the server's max_model_len {server}"))
        if kind in CLIENT_TOKENIZED:
            # needlebench.evaluation.runner.engines passes max_length=<the server's window> when the user did not
            if explicit:
                limits.append((int(explicit) - 1, f"max_length {explicit} (lm-eval keeps max_length - 1)"))
            elif server:
                limits.append((server - 1, f"max_length {server} set from the server (lm-eval keeps max_length - 1)"))
            else:
                limits.append(
                    (
                        API_DEFAULT_MAX_LENGTH - 1,
                        f"lm-eval's default max_length {API_DEFAULT_MAX_LENGTH}, as the server reports no "
                        "max_model_len; pass max_length=N in --model_args",
                    )
                )
        elif explicit:
            limits.append((int(explicit), f"max_length {explicit}"))
        if not limits:
            raise _unknown_window(kind, f"the server at {url} reports no max_model_len" if url else "no base_url")
        return min(limits)
    if explicit:
        return int(explicit), f"{'max_model_len' if model_args.get('max_model_len') else 'max_length'} {explicit}"
    pretrained = _text(model_args.get("pretrained"))
    if pretrained is None:
        raise _unknown_window(kind, "no pretrained= in --model_args")
    source = resolve_source(
        pretrained,
        _text(model_args.get("gguf_file")),
        revision=_revision(kind, model_args),
        token=_token(model_args),
        subfolder=_subfolder(kind, model_args),
        what="pretrained",
    )
    if source.gguf_file:  # transformers reads a GGUF's config from the GGUF, not from a config.json beside it
        window = gguf_context_length(source)
        if window:
            return window, f"the GGUF's context_length {window}"
        raise _unknown_window(kind, f"{source.gguf_file} records no context_length")
    window = _config_window(source.path)
    if window:
        return window, f"the model config's {window}"
    raise _unknown_window(kind, f"the config.json of {pretrained} gives none of {', '.join(WINDOW_KEYS)}")


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def tokenizer_source(args: EvalArgs, model_args: Mapping[str, Any]) -> TokenizerSource | None:
    """Where lm-eval will read the model's tokenizer: the ``tokenizer`` model arg, else ``pretrained`` (with
    ``gguf_file``; ``model`` for the API models), as ``lm_eval/models/huggingface.py`` ``_create_tokenizer``, at
    the same revision (vLLM: ``tokenizer_revision``), with the same token and ``subfolder``; a Hub id gets its
    tokenizer and config files only (:func:`needlebench.evaluation.runner.model_tokenizer.resolve_source`)."""
    kind = model_kind(args)
    common = {"revision": _revision(kind, model_args, tokenizer=True), "token": _token(model_args)}
    common["subfolder"] = _subfolder(kind, model_args)
    common["trust_remote_code"] = model_args.get("trust_remote_code") is True  # as lm-eval parses it: a bool
    if _text(model_args.get("tokenizer")):
        return resolve_source(str(model_args["tokenizer"]), what="tokenizer", **common)
    key = "model" if kind in API_MODELS else "pretrained"
    path = _text(model_args.get(key))
    return resolve_source(path, _text(model_args.get("gguf_file")), what=key, **common) if path else None


# --------------------------------------------------------------------------------------------- preflight


@dataclass
class Preflight:
    """Result of the length check: over-long rows per task, and the indices that will run."""

    window: int | None
    too_long: dict[str, list[str]] = field(default_factory=dict)  # task -> row ids
    checked: dict[str, int] = field(default_factory=dict)  # task -> selected rows counted
    keep: dict[str, list[int]] = field(default_factory=dict)  # task -> indices that fit
    source: str = ""  # where the window comes from
    first: list[tuple[str, int]] = field(default_factory=list)  # the first over-long rows: (row id, prompt tokens)
    stopped: bool = False  # the count stopped at the first rows that do not fit (not every selected row counted)
    longest: int = 0  # prompt tokens of the longest row that fits (the API models' default timeout is set from it)
    budget: int = 0  # the largest max_gen_toks of the checked tasks

    @property
    def dropped(self) -> list[str]:
        """Tasks none of whose selected rows fit (``--skip-too-long`` leaves them out of the run)."""
        return [task for task, indices in self.keep.items() if not indices and self.too_long.get(task)]

    def summary(self) -> str:
        """``task too_long/checked`` for every task with an over-long row."""
        return ", ".join(f"{task} {len(ids)}/{self.checked[task]}" for task, ids in self.too_long.items())


#: Over-long rows named in the refusal.
NAMED_ROWS = 3


def _load_rows(config: str, metadata: Mapping[str, Any]) -> Any:
    """The rows lm-eval will get (the tasks' own loader: a memory-mapped Arrow table), without progress bars: the
    check prints one line."""
    from datasets.utils import logging as ds_logging

    from needlebench.terminal import working  # deferred: progress output, for the length check only

    enabled = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        with working(f"loading {config} for the length check"):
            return load_dataset(**{**metadata, "needlebench_config": config})["test"]
    finally:
        if enabled:
            ds_logging.enable_progress_bar()


#: The columns the length check reads.
_CHECK_COLUMNS = ("id", "prompt")


def _selected_rows(rows: Any, indices: Sequence[int]) -> Any:
    """The rows at ``indices`` (id, prompt and the index), one at a time from the memory-mapped table: never a list
    of prompts (a split of a million-token config holds gigabytes of them)."""
    select = getattr(rows, "select_columns", None)
    view = select([name for name in _CHECK_COLUMNS if name in rows.column_names]) if select else rows
    for index in indices:
        row = view[index]
        yield {"index": index, "id": row["id"], "prompt": row["prompt"]}


def preflight(args: EvalArgs) -> Preflight | None:
    """Count the selected rows of every needlebench task against the model's window (see module doc).

    Rows are streamed through one :class:`~needlebench.evaluation.runner.budget.TokenCounter` (the counter of
    ``needlebench budget``), a bounded batch at a time; without ``--skip-too-long`` the count stops after the first
    batch that holds a row that does not fit, and the refusal names those rows."""
    kind = model_kind(args)
    configs = needlebench_configs(args.tasks)
    if not args.length_check or not configs or kind in WINDOWLESS_MODELS:
        return None
    model_args = args.model_args
    window, source = model_window(args, model_args)
    if window is None:
        raise NeedlebenchError(
            f"cannot tell the context window of --model {kind}; pass max_model_len=N (vllm) or max_length=N in "
            "--model_args, or --no-length-check to let lm-eval truncate silently"
        )
    tok_source = tokenizer_source(args, model_args)
    if tok_source is None:
        raise NeedlebenchError(f"--model {kind} names no tokenizer; pass tokenizer=PATH in --model_args")
    tokenizer = load_source(tok_source)
    counter = TokenCounter(tokenizer)
    chat = args.given("apply_chat_template")
    metadata = {**model_args, **args.metadata}  # what lm-eval hands the tasks: --model_args merged into --metadata
    result = Preflight(window=window, source=source)
    for config in configs:
        task = task_name(config)
        rows = _load_rows(config, metadata)
        indices = selected_indices(len(rows), task, args)
        budget = task_budget(config, args)
        result.budget = max(result.budget, budget)
        result.checked[task] = 0
        result.keep[task] = []
        with progress_bar(len(indices), f"length check {task}") as bar:
            batches = count_batches(
                _selected_rows(rows, indices), tokenizer, chat_template=chat, counter=counter, progress=bar
            )
            for pairs in batches:
                for row, tokens in pairs:
                    result.checked[task] += 1
                    if tokens + budget > window:
                        result.too_long.setdefault(task, []).append(str(row["id"]))
                        if len(result.first) < NAMED_ROWS:
                            result.first.append((str(row["id"]), tokens))
                    else:
                        result.keep[task].append(int(row["index"]))
                        result.longest = max(result.longest, tokens)
                release_mapped_pages(rows)  # the counted prompts' pages of the map: RSS stays that of a batch
                if result.too_long and not args.skip_too_long:
                    break  # the first rows that do not fit: the run is refused, the rest need not be counted
        if result.too_long and not args.skip_too_long:
            result.stopped = result.checked[task] < len(indices) or config != configs[-1]
            raise NeedlebenchError(_refusal(result))
    return result


def _refusal(result: Preflight) -> str:
    """The one line refusing a run: the rows that do not fit per task (of those counted) and the first of them by
    name with their prompt tokens."""
    total = sum(len(ids) for ids in result.too_long.values())
    named = ", ".join(f"{row_id} ({tokens} prompt tokens)" for row_id, tokens in result.first)
    more = f" and {total - len(result.first)} more" if total > len(result.first) else ""
    counted = sum(result.checked.values())
    stopped = f"; counting stopped at the first that do not fit ({counted} row(s) counted)" if result.stopped else ""
    return (
        f"{total} row(s) do not fit the window of {result.window} tokens ({result.source}) with max_gen_toks: "
        f"{result.summary()}{stopped}; first: {named}{more}; raise max_model_len / max_length, choose shorter "
        "configs, or pass --skip-too-long to run the rest"
    )


def _other_tasks(tasks: Sequence[str]) -> list[str]:
    """Entries of ``--tasks`` that are not needlebench tasks or groups (left to lm-eval as given)."""
    return [name for name in tasks if not needlebench_configs([name])]


# --------------------------------------------------------------------------------------------- the run's options


def run_key(args: EvalArgs) -> str:
    """``<model>-<digest of the model and its args>``: the name of a run's resume stores."""
    key = json.dumps([model_kind(args), args.model_args], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    return f"{model_kind(args).replace('/', '_')}-{digest}"


def cache_path(output: Path, args: EvalArgs) -> Path:
    """lm-eval ``--use_cache`` database of a run: one per output folder, model and model args, in this user's
    private cache (``$NEEDLEBENCH_CACHE/responses``, 0700), never in the output folder. lm-eval keeps it in a
    ``SqliteDict`` whose values are pickles (``CachingLM`` in lm_eval/api/model.py), so a database planted in a
    results folder from someone else would run its code when read."""
    where = hashlib.sha256(os.fsencode(output.absolute())).hexdigest()[:16]
    return cache_root() / "responses" / where / run_key(args)


#: The output folder's folder of ``--resume``'s finished chunks
#: (:class:`needlebench.evaluation.runner.chunked.ChunkStore`).
CHUNKS_FOLDER = ".needlebench-cache"


def chunks_folder(args: EvalArgs) -> str:
    """The chunk store of ``--resume`` inside the output folder: ``.needlebench-cache/<run key>-chunks``."""
    return f"{CHUNKS_FOLDER}/{run_key(args)}-chunks"


#: Largest task YAML of a task folder copied for ``--reasoning``.
MAX_TASK_YAML_BYTES = 16 * 1024 * 1024


def reasoning_task_dir(source: Path, reasoning: str, target: Path) -> Path:
    """A task folder whose YAMLs include those of ``source`` with ``max_gen_toks`` changed by ``--reasoning``.

    Read and written by descriptors (:mod:`needlebench.safe_fs`): a link in ``source`` is neither copied nor
    included (a group YAML linked to a file of the user's would be copied into the run's folder), and nothing
    in ``target`` is written through a link."""
    names = set(all_task_names())
    with Folder.open(target) as root, root.sub("needlebench", create=True) as folder:
        if not source.is_dir():  # no task folder there: an empty one (lm-eval then names the unknown tasks)
            return target
        with Folder.open(source) as given:
            entries = [name for name in given.listdir() if name.endswith(".yaml") and given.is_file(name)]
            copies = {
                name: given.read_bytes(name, limit=MAX_TASK_YAML_BYTES) for name in entries if name.startswith("_")
            }
        for name in entries:
            stem = name.removesuffix(".yaml")
            if name in copies:  # groups name tasks only
                folder.write_bytes(name, copies[name])
                continue
            if TASK_PREFIX + stem not in names:
                continue
            budget = reasoning_budget(max_gen_toks_for(get_config(stem)), reasoning)
            override = {"include": str(source.resolve() / name), "generation_kwargs": generation_kwargs(budget)}
            folder.write_text(name, dump_yaml(override))
    return target


@dataclass
class PreparedRun:
    namespace: argparse.Namespace  # what lm-eval's run command receives
    output: Path | None
    preflight: Preflight | None
    args: EvalArgs
    cleanup: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one-line messages shown before lm-eval starts
    run: RunOutput | None = (
        None  # the private folder lm-eval writes into (:mod:`needlebench.evaluation.runner.run_output`)
    )


def prepare(args: EvalArgs, include_path: Path | None) -> PreparedRun:
    """Run the length check and set the options lm-eval's run receives (a copy of ``args.namespace``):
    the rows that fit (``samples``), the tasks left, the response cache of ``--resume``, the task folder of
    ``--reasoning``."""
    namespace = argparse.Namespace(**vars(args.namespace))
    output = Path(str(args.value("output_path"))) if args.value("output_path") else None
    check = preflight(args)
    prepared = PreparedRun(namespace, output, check, args)
    if check is not None and check.too_long:
        dropped = check.dropped
        samples = {task: indices for task, indices in check.keep.items() if task not in dropped}
        if dropped:
            # lm-eval cannot run a task with no rows: leave whole tasks out (groups become their runnable tasks)
            others = _other_tasks(args.tasks)
            if not samples and not others:
                raise NeedlebenchError(
                    f"no selected row fits the window of {check.window} tokens ({check.source}) with max_gen_toks: "
                    f"{check.summary()}; nothing is left to run: raise max_model_len / max_length or choose shorter "
                    "configs"
                )
            namespace.tasks = [*samples, *others]
            prepared.notes.append(
                f"skipping {len(dropped)} task(s) none of whose rows fit the window of {check.window} tokens: "
                + ", ".join(f"{task} ({check.checked[task]} rows)" for task in dropped)
            )
        namespace.limit = None
        namespace.samples = samples
        if output is not None:
            skipped = {
                task: {"skipped": len(ids), "ids": ids, **({"task_skipped": True} if task in dropped else {})}
                for task, ids in check.too_long.items()
            }
            with Folder.open(output, create=True) as folder:  # a link planted at the name is replaced
                folder.write_text(SKIPPED_FILE, json.dumps(skipped, indent=1) + "\n")
    if args.resume:
        if output is None:
            raise NeedlebenchError("--resume needs --output_path (the response cache is kept under it)")
        if args.value("use_cache"):
            raise NeedlebenchError("give --resume or --use_cache, not both")
        cache = cache_path(output, args)
        # the chunk store's folders (needlebench.evaluation.runner.chunked.chunk_store), each opened with O_NOFOLLOW
        # before
        # anything runs: a link planted at .needlebench-cache or at <run>-chunks is refused now, not after a chunk
        with Folder.open(output, create=True) as folder, folder.sub(chunks_folder(args), create=True):
            pass
        cache_folder(cache.parent).close()  # this user's, 0700 whatever the umask
        namespace.use_cache = str(cache)
    if args.reasoning is not None and include_path is not None:
        temp = Path(tempfile.mkdtemp(prefix="needlebench-reasoning-"))
        prepared.cleanup.append(temp)
        # the task folder itself (`needlebench tasks-path`), or a root holding it as needlebench/
        source = include_path if any(include_path.glob("*.yaml")) else include_path / "needlebench"
        reasoning_task_dir(source, args.reasoning, temp)
        namespace.include_path = str(temp)
    return prepared


# --------------------------------------------------------------------------------------------- health


#: Largest results JSON of a run read for its health file.
MAX_RESULTS_BYTES = 256 * 1024 * 1024


def _run_files(folder: Folder, prefix: str, suffix: str, inside: str = "", depth: int = 0) -> list[str]:
    """Names (relative to `folder`) of the regular files ``<prefix>*<suffix>`` of the run's folder and the folders
    in it (lm-eval's model folder), by descriptors."""
    found = []
    for name in folder.listdir():
        info = folder.lstat(name)
        if info is None:
            continue
        if stat.S_ISREG(info.st_mode) and name.startswith(prefix) and name.endswith(suffix):
            found.append(f"{inside}{name}")
        elif stat.S_ISDIR(info.st_mode) and depth < 2:
            with folder.sub(name) as sub:
                found += _run_files(sub, prefix, suffix, f"{inside}{name}/", depth + 1)
    return found


def _samples_file(folder: Folder, inside: str, task: str) -> str | None:
    """The newest ``samples_<task>_<date>.jsonl`` of exactly ``task`` in the folder `inside` of the run's folder
    (``..._128k`` must not match ``..._128k_m64``)."""
    names = [
        name
        for name in _run_files(folder, samples_prefix(task), SAMPLES_SUFFIX)
        if name.rpartition("/")[0] == inside
        and (match := SAMPLES_FILE_RE.match(name.rpartition("/")[2]))
        and match.group("task") == task
    ]
    return max(names, key=lambda name: name.rpartition("/")[2]) if names else None


def _responses(folder: Folder, name: str) -> list[str]:
    """The raw response of each logged sample of the samples file `name` (a line that is no JSON object is left
    out)."""
    responses = []
    with folder.open_read(name) as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict):
                responses.append(raw_response(record))
    return responses


def write_health(prepared: PreparedRun, started: float) -> dict[str, dict[str, Any]]:
    """Write ``output_truncated``, ``no_final_answer`` and ``skipped_too_long`` per task into the run-health file
    of the results JSON this run produced (see the module doc), beside it in the run's own folder
    (:mod:`needlebench.evaluation.runner.run_output`, moved into the output folder with lm-eval's files afterwards): no
    other file of the output folder is read. `started` is kept for callers (the run's folder is new)."""
    del started
    run = prepared.run
    if run is None or run.json_path:
        return {}
    with run.open() as folder:
        return _write_health(prepared, folder)


def _write_health(prepared: PreparedRun, folder: Folder) -> dict[str, dict[str, Any]]:
    results = sorted(_run_files(folder, RESULTS_PREFIX, ".json"), key=lambda name: name.rpartition("/")[2])
    if not results:
        return {}
    results_name = results[-1]
    inside = results_name.rpartition("/")[0]
    try:
        data = json.loads(folder.read_text(results_name, limit=MAX_RESULTS_BYTES))
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
        return {}
    args = prepared.args
    tokenizer = None
    if model_kind(args) not in WINDOWLESS_MODELS:
        try:
            tok_source = tokenizer_source(args, args.model_args)
            tokenizer = load_source(tok_source) if tok_source is not None else None
        except NeedlebenchError:
            tokenizer = None
    end = policy_from({**args.model_args, **args.metadata}).end  # the metadata lm-eval handed the tasks
    skipped = prepared.preflight.too_long if prepared.preflight else {}
    health: dict[str, dict[str, Any]] = {}
    not_run: dict[str, dict[str, int]] = {}
    for task in prepared.preflight.dropped if prepared.preflight else []:  # not run: none of its rows fit
        not_run[task] = {"original": prepared.preflight.checked[task], "effective": 0}
        health[task] = {"skipped_too_long": len(skipped[task])}
    for config in needlebench_configs(args.tasks):
        task = task_name(config)
        if task not in data.get("results", {}) or task in health:
            continue
        budget = task_budget(config, args)
        entry: dict[str, Any] = {"skipped_too_long": len(skipped.get(task, []))}
        samples_name = _samples_file(folder, inside, task)
        if samples_name is not None:
            responses = _responses(folder, samples_name)
            if responses:
                entry["no_final_answer"] = sum(not has_final_answer(text, end) for text in responses) / len(responses)
                if tokenizer is not None:
                    lengths = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in responses]
                    entry["output_truncated"] = sum(length >= budget for length in lengths)
        health[task] = entry
    leaf = results_name.rpartition("/")[2]
    record = {"results_file": leaf, "tasks": health, "not_run": not_run}
    target = health_path(Path(results_name))
    text = json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n"
    folder.write_text(target.as_posix(), text)  # the run's own folder, by descriptors
    return health
