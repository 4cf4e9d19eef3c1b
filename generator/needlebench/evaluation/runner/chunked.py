"""Chunked evaluation: ``needlebench eval run`` in memory bounded by a chunk of rows, not by the config.

lm-eval's ``evaluate`` builds a request for every row of every task before the model runs, and keeps every row
(the decoded dataset row, the request's context, the logged sample) until the end: at 1M tokens that is several
copies of gigabytes of prompt text. While ``needlebench eval run`` runs, :func:`chunked_evaluation` replaces
``lm_eval.evaluator.evaluate`` (the function ``simple_evaluate`` calls once the model and the tasks are built)
with :func:`evaluate_in_chunks`:

* each task's selected rows (``--limit`` / ``--samples`` as lm-eval reads them) are cut into consecutive chunks
  in dataset order, which is by context length, so a chunk's rows share their haystack prefix (vLLM's prefix
  cache) and a chunk holds about :data:`CHUNK_TOKENS` context tokens (``--chunk-rows N``: N rows);
* every chunk is a shallow copy of the task whose dataset is the chunk's rows (``Dataset.select``: Arrow reads
  only those rows), run through lm-eval's own ``evaluate`` with the one model instance;
* a chunk's logged samples are made lean at once (:mod:`needlebench.evaluation.runner.lean_samples`) and their
  ``doc_id`` set back to the row's index in the task, then everything the chunk held is released;
* the per-sample metric values of all chunks, in row order, are aggregated once with lm-eval's own
  ``_process_results`` (the tasks' aggregation functions, ``!function`` ones included, stderr, groups,
  ``n-samples``): the results equal an unchunked run's, whatever metrics a task has.

With ``--resume`` every finished chunk is saved (lean samples, which carry the metric values) under the output
folder; a run started again with the same command reads finished chunks instead of running them. A chunk is found
again only under the same key: model class, chat and system settings, the task's config, the think-end marker and
unclosed policy (``--think-end`` / ``--think-unclosed``, which reach the hooks as the task's metadata),
``--full-samples`` and a digest of the chunk's rows (positions and content), so a changed option or a rebuilt
data dir runs the chunk again.

lm-eval's request cache (``--cache_requests``) is named by task only, never by rows
(``lm_eval/api/task.py``, ``build_all_requests``): a chunk would save, or load, the requests of other rows. A task
cut into more than one chunk, or whose one chunk is not its whole evaluated split, therefore runs with request
caching off (said once on stderr), so it neither reads nor writes that cache; ``--no-chunk`` uses the cache as
lm-eval does.

Shards for job schedulers (a SLURM array, independent nodes): ``--shard i/N`` plans every task's chunks as above,
numbers them 1, 2, ... over the run (tasks in the run's order, chunks in row order) and runs only chunks i, i+N,
i+2N... (:func:`in_shard`), each saved into the chunk store under ``--output_path`` as ``--resume`` saves it (the
store's key has no shard in it: every shard and an unsharded run share their chunk files). Then the run stops
before lm-eval aggregates (:class:`ShardFinished`): a shard writes no results file. ``--merge-shards OUT...`` with
the shards' options reads every chunk from the shards' stores (only files signed with this user's secret), refuses
in one line naming the chunks no store holds, and aggregates them as an unsharded run does; lm-eval's model is a
:class:`StandInModel` then, never built, answering what ``simple_evaluate`` reads of a model from the record the
shards left (:func:`run_info`: model info, tokenizer tokens, chat template). Machines that run shards of one merge
share the secret: one HOME, or the same ``$XDG_CONFIG_HOME/needlebench/secret.key`` (mode 0600) on each.

Plain ``lm_eval`` is untouched (nothing is patched outside ``needlebench eval``), and ``--no-chunk`` runs lm-eval's
``evaluate`` as is (logged samples still lean unless ``--full-samples``).
"""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import lm_eval_seam
from needlebench.evaluation.runner.guard import CHUNKS_FOLDER, run_key
from needlebench.evaluation.runner.lean_samples import lean_sample
from needlebench.evaluation.scoring.thinking import policy_from
from needlebench.safe_fs import Folder
from needlebench.sources.cache import same_tag, signer
from needlebench.terminal import printable

#: Context tokens per chunk (rows of a config are cut where the sum of their ``context_length`` passes it): about
#: 32 MB of English prompt text, a few hundred MB of lm-eval's copies of it.
CHUNK_TOKENS = 8_000_000
#: Rows per chunk of a task whose rows carry no ``context_length``.
CHUNK_ROWS_UNSIZED = 1000
#: The column giving a row's size.
LENGTH_COLUMN = "context_length"


@dataclass
class ChunkOptions:
    """``--chunk-rows N`` / ``--no-chunk`` / ``--full-samples`` of ``needlebench eval run`` (parsed with the run's
    other options by :mod:`needlebench.evaluation.runner.options`)."""

    chunk_rows: int | None = None  # rows per chunk; None: by CHUNK_TOKENS
    chunked: bool = True
    full_samples: bool = False
    store: Path | None = None  # --resume / --shard: finished chunks are kept here
    read_store: bool = True  # False: a --shard run without --resume runs its chunks again (and saves them)
    shard: tuple[int, int] | None = None  # --shard i/N: run only chunks number i, i+N, i+2N... (1-based)
    merge_from: list[Path] | None = None  # --merge-shards: the shards' chunk stores, read instead of any run


# --------------------------------------------------------------------------------------------- planning


def _eval_split(task: Any) -> str | None:
    """The split lm-eval evaluates a task on (test, else validation), or None."""
    config = task.config
    if task.has_test_docs():
        return config.test_split
    if task.has_validation_docs():
        return config.validation_split
    return None


def _selectable_docs(task: Any) -> Any | None:
    """The task's evaluated docs as a ``datasets.Dataset`` rows can be selected from, or None (then the task
    runs in one piece: its docs are computed by ``process_docs`` or are not a Dataset)."""
    split = _eval_split(task)
    if split is None or getattr(task.config, "process_docs", None) is not None:
        return None
    dataset = getattr(task, "dataset", None)
    try:
        docs = dataset[split]  # type: ignore[index]
    except (KeyError, TypeError):
        return None
    return docs if hasattr(docs, "select") and hasattr(docs, "column_names") else None


def selected_positions(task: Any, count: int, limit: float | None, samples: Sequence[int] | None) -> list[int]:
    """Row indices lm-eval evaluates of a task with ``count`` docs: ``--samples``, else the first ``limit``."""
    if samples:
        return sorted({int(index) for index in samples})
    size = lm_eval_seam.sample_size(task, limit)
    return list(range(count if size is None else min(int(size), count)))


def plan_chunks(positions: Sequence[int], lengths: Sequence[int] | None, chunk_rows: int | None) -> list[list[int]]:
    """Consecutive chunks of ``positions``: ``chunk_rows`` rows each, else by :data:`CHUNK_TOKENS` of
    ``lengths`` (one per position), else :data:`CHUNK_ROWS_UNSIZED` rows."""
    if chunk_rows is not None or lengths is None:
        size = chunk_rows or CHUNK_ROWS_UNSIZED
        return [list(positions[start : start + size]) for start in range(0, len(positions), size)]
    chunks: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for position, length in zip(positions, lengths, strict=True):
        if current and tokens + int(length) > CHUNK_TOKENS:
            chunks.append(current)
            current, tokens = [], 0
        current.append(position)
        tokens += int(length)
    if current:
        chunks.append(current)
    return chunks


def _lengths(docs: Any, positions: Sequence[int]) -> list[int] | None:
    if LENGTH_COLUMN not in docs.column_names:
        return None
    column = docs.select_columns([LENGTH_COLUMN])[LENGTH_COLUMN]
    return [int(column[position] or 0) for position in positions]


def _rows(positions: Sequence[int]) -> Any:
    """``positions`` as a ``range`` when contiguous (``Dataset.select`` then slices without an index map)."""
    if positions and list(positions) == list(range(positions[0], positions[-1] + 1)):
        return range(positions[0], positions[-1] + 1)
    return list(positions)


def _rows_digest(docs: Any, positions: Sequence[int]) -> str:
    """SHA-256 of the rows ``positions`` of ``docs`` (every column), read through a fresh memory map."""
    rows = pickle.loads(pickle.dumps(docs)).select(_rows(positions))
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def chunk_task(task: Any, docs: Any, positions: Sequence[int]) -> Any:
    """A shallow copy of ``task`` whose evaluated docs are the rows ``positions`` of ``docs``."""
    split = _eval_split(task)
    # a pickled memory-mapped Dataset is its file paths: unpickled, it maps the files anew, so the pages a chunk
    # reads leave the process's RSS with the chunk (read through the task's own mapping they would stay mapped,
    # adding up to the whole Arrow file)
    fresh = pickle.loads(pickle.dumps(docs))
    return lm_eval_seam.task_on_docs(task, {**dict(task.dataset), split: fresh.select(_rows(positions))})


# --------------------------------------------------------------------------------------------- resume store


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


#: The store's record of the model that answered its chunks (:func:`run_info`): read by ``--merge-shards``.
RUN_INFO_FILE = "run-info.json"
#: A chunk file is at most this large (its logged samples: a few MB lean at 1M tokens, ~100 MB with --full-samples).
MAX_CHUNK_BYTES = 256 << 20


class ChunkStore:
    """Finished chunks of a run (``--resume``): one JSON file per chunk, keyed by everything that decides its
    answers and its logged samples (task config, model, chat and system settings, think-end marker and unclosed
    policy, ``--full-samples``, the rows' positions and content)."""

    def __init__(
        self,
        folder: Path,
        lm: Any,
        settings: dict[str, Any],
        docs_by_task: dict[str, Any],
        sources: Sequence[Path] | None = None,
    ) -> None:
        self.folder = folder
        self.sources = list(sources) if sources is not None else [folder]  # where finished chunks are read from
        self.docs_by_task = docs_by_task  # task name -> its evaluated docs (rows are hashed from them)
        self._digests: dict[tuple[str, tuple[int, ...]], str] = {}
        self.base = {"model": model_class_name(lm), **settings}

    def _path(self, task: Any, positions: Sequence[int]) -> Path:
        cached = (task.task_name, tuple(positions))
        if cached not in self._digests:
            self._digests[cached] = _rows_digest(self.docs_by_task[task.task_name], positions)
        config = task.dump_config()
        # the policy the task's loader read from the same metadata (needlebench.evaluation.harness.tasks.load_dataset)
        policy = policy_from(config.get("metadata") or {})
        key = json.dumps(
            [
                {**self.base, "think_end": policy.end, "think_unclosed": policy.unclosed},
                task.task_name,
                config,
                list(positions),
                self._digests[cached],
            ],
            sort_keys=True,
            default=str,
            ensure_ascii=False,
        )
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]
        return self.folder / f"{task.task_name}-{positions[0]}-{positions[-1]}-{digest}.json"

    @staticmethod
    def _open(store: Path, create: bool) -> Folder:
        """A store folder, opened by descriptors from the run's output folder (the one the user named, two
        levels up: ``<output>/.needlebench-cache/<model>-chunks``, :func:`chunk_store`), each folder below it
        with ``O_NOFOLLOW``: a link planted in a results folder is refused, never written through."""
        with Folder.open(store.parent.parent, create=create) as root:
            return root.sub(f"{store.parent.name}/{store.name}", create=create)

    def _read(self, name: str, payload_key: str) -> Any | None:
        """The ``payload_key`` value of the record file ``name`` of the first store (of :attr:`sources`) holding one
        this user signed (HMAC tag keyed by the per-user secret of :func:`needlebench.sources.cache.sign`, over the
        store's name, the file's name and the payload's bytes: checked before a byte of it is parsed); a file this
        user did not write (a shard store copied from elsewhere, pre-filled answers, a record of another run) is
        never taken."""
        for source in self.sources:
            try:
                with self._open(source, create=False) as folder:
                    if not folder.is_file(name):
                        continue
                    data = folder.read_bytes(name, limit=MAX_CHUNK_BYTES)
                tag, newline, payload = data.partition(b"\n")
                if not newline or not same_tag(tag.decode("ascii"), _tag(f"{source.name}/{name}", payload)):
                    continue
                record = json.loads(payload.decode("utf-8"))
                if isinstance(record, dict) and payload_key in record:
                    return record[payload_key]
            except (OSError, ValueError, KeyError, TypeError, RecursionError, NeedlebenchError):
                continue  # a damaged, unsigned or foreign file (or one that is no regular file): not taken
        return None

    def _write(self, name: str, payload_key: str, value: Any) -> None:
        """``<tag>\\n<payload>``: the tag first, so a reader checks it before it parses anything."""
        payload = json.dumps({payload_key: _jsonable(value)}, ensure_ascii=False, sort_keys=True).encode("utf-8")
        tag = _tag(f"{self.folder.name}/{name}", payload)
        with self._open(self.folder, create=True) as folder:
            folder.write_bytes(name, tag.encode("ascii") + b"\n" + payload)

    def load(self, task: Any, positions: Sequence[int]) -> list[dict[str, Any]] | None:
        """The chunk's samples when this user's run wrote them (:meth:`_read`): a chunk file from a shared results
        folder that this user did not write is run again, never taken."""
        samples = self._read(self._path(task, positions).name, "samples")
        return list(samples) if isinstance(samples, list) else None

    def save(self, task: Any, positions: Sequence[int], samples: list[dict[str, Any]]) -> None:
        self._write(self._path(task, positions).name, "samples", samples)

    def unreadable(self) -> list[str]:
        """Why each of :attr:`sources` that cannot be opened cannot (e.g. a folder that is a link, or holds no chunk
        store of this model and its args), one clause each."""
        reasons = []
        for source in self.sources:
            try:
                with self._open(source, create=False):
                    pass
            except FileNotFoundError:
                reasons.append(
                    f"{source.parent.parent} has no chunk store of this model and model args ({source.name})"
                )
            except (OSError, NeedlebenchError) as error:
                reasons.append(f"{source.parent.parent} is not read ({getattr(error, 'strerror', None) or error})")
        return reasons

    def load_run_info(self) -> dict[str, Any]:
        """What a run that saved chunks here recorded of its model (:func:`run_info`), or {}."""
        info = self._read(RUN_INFO_FILE, "info")
        return info if isinstance(info, dict) else {}

    def save_run_info(self, info: dict[str, Any]) -> None:
        self._write(RUN_INFO_FILE, "info", info)


def _tag(name: str, payload: bytes) -> str:
    """A store file's tag: its store's and its own name (which carry the key of everything that decides its answers:
    model, model args, settings, rows) and its payload's bytes."""
    mac = signer()
    mac.update(name.encode("utf-8") + b"\0")
    mac.update(payload)
    return mac.hexdigest()


# --------------------------------------------------------------------------------------------- shards


def in_shard(number: int, shard: tuple[int, int]) -> bool:
    """Whether chunk ``number`` (1-based, over the run's tasks in order) is shard ``i`` of ``N``'s: chunks i, i+N,
    i+2N... Round robin, not a balance by tokens: the chunks are already cut at about :data:`CHUNK_TOKENS` each
    (all but a task's last), every shard gets a share of every task, and a chunk's shard can be told from its
    number alone (the merge's refusal names numbers)."""
    index, count = shard
    return (number - 1) % count == index - 1


class ShardFinished(Exception):
    """Raised out of lm-eval's ``simple_evaluate`` once a ``--shard`` run's chunks are in its store: lm-eval then
    writes no results file (the shard's results are not the run's), and ``needlebench eval`` says what ran."""

    def __init__(self, shard: tuple[int, int], total: int, ran: list[int], read: list[int], store: Path | None):
        super().__init__(f"shard {shard[0]}/{shard[1]} finished")
        self.shard, self.total, self.ran, self.read, self.store = shard, total, ran, read, store

    def summary(self) -> str:
        index, count = self.shard
        mine = sorted(self.ran + self.read)
        listed = ", ".join(map(str, mine)) if mine else "none"
        return (
            f"shard {index}/{count}: chunks {listed} of {self.total} are in {self.store} ({len(self.ran)} run, "
            f"{len(self.read)} read from the resume store); a shard writes no results file"
        )


def _sharding_option(options: ChunkOptions) -> str:
    return "--merge-shards" if options.merge_from is not None else "--shard"


#: Missing chunks named in the refusal of ``--merge-shards`` (the rest are counted).
NAMED_MISSING = 8


def _missing_message(missing: Sequence[str], total: int, sources: Sequence[Path], unreadable: Sequence[str]) -> str:
    named = ", ".join(missing[:NAMED_MISSING]) + (
        f" and {len(missing) - NAMED_MISSING} more" if len(missing) > NAMED_MISSING else ""
    )
    folders = ", ".join(str(source.parent.parent) for source in sources)
    return (
        f"--merge-shards: {len(missing)} of the {total} chunks of this run are in no shard's chunk store signed by "
        f"this user (in {folders}): chunk {named}; shard i of N runs chunks i, i+N, i+2N...: run the shards that hold "
        "them (with --resume a shard runs only its missing chunks) with the same options, then merge again"
        + "".join(f"; {reason}" for reason in unreadable)
    )


def model_class_name(lm: Any) -> str:
    """The model class's name in a chunk's key (lm-eval's ``CachingLM`` wraps the model; the stand-in of
    ``--merge-shards`` names the class it stands in for)."""
    model = getattr(lm, "lm", lm)
    return getattr(model, "stands_in_for", None) or type(model).__name__


def registered_class_name(name: str) -> str:
    """The class name of ``--model name`` in lm-eval's registry, without importing it (a built-in entry is a
    ``module:Class`` path until first used)."""
    entry = dict(lm_eval_seam.model_registry().items()).get(name)
    if isinstance(entry, type):
        return entry.__name__
    if isinstance(entry, str):
        return entry.partition(":")[2].strip()
    return str(getattr(entry, "attr", "") or name)


def run_info(lm: Any, apply_chat_template: Any) -> dict[str, Any]:
    """What ``simple_evaluate`` writes into the results from the model, for ``--merge-shards`` to write the same
    without the model: its ``get_model_info()``, its tokenizer's special tokens (``add_tokenizer_info``) and the
    chat template of ``--apply_chat_template``."""
    info: dict[str, Any] = {"tokenizer": _jsonable(lm_eval_seam.tokenizer_info(lm))}
    if hasattr(lm, "get_model_info"):
        with suppress(Exception):  # lm-eval calls it unguarded after the run: a failure is its to report
            info["model_info"] = _jsonable(lm.get_model_info())
    if apply_chat_template:
        info["chat_template"] = {json.dumps(apply_chat_template): lm.chat_template(apply_chat_template)}
    return info


class StandInModel:
    """The model of ``--merge-shards``: every chunk is read from the shards' stores, so nothing is asked of it;
    it answers what ``simple_evaluate`` reads of a model (rank, chat template, model and tokenizer info) from the
    shards' record (:func:`run_info`) and is never built."""

    rank = 0
    world_size = 1

    def __init__(self, class_name: str, info: Callable[[], dict[str, Any]]) -> None:
        self.stands_in_for = class_name
        self._info = info

    def set_cache_hook(self, hook: Any) -> None:
        """lm-eval's ``CachingLM`` hooks the model: nothing is answered, nothing cached."""

    def chat_template(self, chat_template: Any = False) -> str | None:
        templates = self._info().get("chat_template") or {}
        key = json.dumps(chat_template)
        if key not in templates:
            raise NeedlebenchError(
                f"--merge-shards: no shard recorded the chat template of --apply_chat_template {chat_template}; "
                "merge with the options the shards ran with"
            )
        return templates[key]

    def __getattr__(self, name: str) -> Any:
        info = self._info()
        tokens = info.get("tokenizer") or {}
        if name == "get_model_info" and "model_info" in info:
            return lambda: dict(info["model_info"])
        if name == "tokenizer" and tokens:
            fields = {}
            for kind in ("pad", "eos", "bos"):
                token, number = tokens.get(f"tokenizer_{kind}_token", [None, None])
                fields |= {f"{kind}_token": token, f"{kind}_token_id": number}
            return SimpleNamespace(**fields)
        if name in ("eot_token_id", "max_length") and tokens:
            return tokens.get(name)
        raise AttributeError(name)

    def _never(self, *args: Any, **kwargs: Any) -> Any:
        raise NeedlebenchError("--merge-shards runs no model; a chunk missing from the shards is refused before")

    generate_until = loglikelihood = loglikelihood_rolling = _never


@contextmanager
def stand_in_model(sources: Sequence[Path]) -> Iterator[None]:
    """While the block runs, ``simple_evaluate`` gets a :class:`StandInModel` for ``--model`` (never built), which
    answers from the first run record signed by this user in the shards' chunk stores ``sources``."""
    loaded: list[dict[str, Any]] = []

    def info() -> dict[str, Any]:
        if not loaded:
            loaded.append(ChunkStore(sources[0], None, {}, {}, sources=sources).load_run_info())
        return loaded[0]

    class Factory:
        def __init__(self, name: str) -> None:
            self.name = name

        def create_from_arg_string(self, arg_string: Any, additional_config: Any = None) -> StandInModel:
            return StandInModel(registered_class_name(self.name), info)

        create_from_arg_obj = create_from_arg_string

    with lm_eval_seam.model_factory_replaced(lambda original: Factory):
        yield


# --------------------------------------------------------------------------------------------- evaluate


def _filter_order(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Samples grouped by filter (first seen first), rows in order within each: lm-eval's order."""
    by_filter: dict[Any, list[dict[str, Any]]] = {}
    for sample in samples:
        by_filter.setdefault(sample.get("filter"), []).append(sample)
    return [sample for group in by_filter.values() for sample in group]


def _note(text: str) -> None:
    print(f"needlebench: {printable(text)}", file=sys.stderr, flush=True)


def evaluate_in_chunks(
    original: Callable[..., Any],
    options: ChunkOptions,
    lm: Any,
    task_dict: Any,
    limit: float | None = None,
    samples: dict[str, list[int]] | None = None,
    bootstrap_iters: int | None = 100000,
    log_samples: bool = True,
    write_out: bool = False,
    **kwargs: Any,
) -> Any:
    """lm-eval's ``evaluate`` (same arguments, same result) run chunk by chunk; see the module doc. With
    ``--shard i/N`` only the shard's chunks run (then :class:`ShardFinished` is raised: nothing is aggregated, no
    results file written); with ``--merge-shards`` every chunk is read from the shards' stores, none runs."""
    lean = not options.full_samples
    sharding = options.shard is not None or options.merge_from is not None
    if not options.chunked or "tasks" not in task_dict or getattr(lm, "world_size", 1) > 1:
        if sharding:
            raise NeedlebenchError(
                f"{_sharding_option(options)} needs a run in chunks on one process; this model runs on "
                f"{getattr(lm, 'world_size', 1)} processes (lm-eval's data parallelism): run one shard per process "
                "instead"
            )
        result = original(
            lm=lm,
            task_dict=task_dict,
            limit=limit,
            samples=samples,
            bootstrap_iters=bootstrap_iters,
            log_samples=log_samples,
            write_out=write_out,
            **kwargs,
        )
        if result is not None and lean:
            for task_samples in (result.get("samples") or {}).values():
                for sample in task_samples:
                    lean_sample(sample)
        return result
    groups, tasks = task_dict.get("groups", {}), task_dict["tasks"]
    settings: dict[str, Any] = {
        key: kwargs.get(key) for key in ("system_instruction", "apply_chat_template", "fewshot_as_multiturn")
    }
    settings["full_samples"] = options.full_samples
    docs_by_task: dict[str, Any] = {}
    store = None
    if options.store is not None:
        store = ChunkStore(options.store, lm, settings, docs_by_task, sources=options.merge_from)
        if options.shard is not None:  # a shard's model never reaches the end of simple_evaluate: recorded here
            with suppress(OSError, NeedlebenchError):  # best effort: only --merge-shards reads it
                store.save_run_info(run_info(lm, kwargs.get("apply_chat_template")))
    request_cache = bool(kwargs.get("cache_requests") or kwargs.get("rewrite_requests_cache"))
    uncached: list[str] = []
    accumulated: dict[str, Any] = {}
    first = True
    numbered = 0  # chunks of the run so far (tasks in the run's order, chunks in row order): --shard's numbers
    ran: list[int] = []
    read: list[int] = []
    missing: list[str] = []
    for name, task in tasks.items():
        docs = _selectable_docs(task)
        indices = samples.get(name) if samples else None
        raw_metrics: dict[tuple[str, str], list[Any]] = defaultdict(list)
        logged: list[dict[str, Any]] = []
        if docs is None:
            if sharding:
                raise NeedlebenchError(
                    f"{_sharding_option(options)}: task {name} cannot be cut into chunks of its rows (its docs are "
                    "computed by process_docs or are no dataset split); run it without --shard"
                )
            pieces: list[tuple[list[int] | None, Any]] = [(None, task)]
        else:
            positions = selected_positions(task, len(docs), limit, indices)
            chunks = plan_chunks(
                positions,
                None if options.chunk_rows else _lengths(docs, positions),
                options.chunk_rows,
            )
            pieces = [(chunk, None) for chunk in chunks]
            docs_by_task[name] = docs
            if request_cache and (len(chunks) > 1 or positions != list(range(len(docs)))):
                uncached.append(name)
                _note(
                    f"{name}: --cache_requests is off for this task: it runs in chunks of its rows and lm-eval's "
                    "request cache is per task, not per row (--no-chunk uses the cache)"
                )
        for number, (chunk, whole) in enumerate(pieces, start=1):
            if chunk is not None:
                numbered += 1
                if options.shard is not None and not in_shard(numbered, options.shard):
                    continue
            readable = store is not None and chunk and (options.read_store or options.merge_from is not None)
            chunk_samples = store.load(task, chunk) if readable else None
            if chunk_samples is None and options.merge_from is not None:
                missing.append(f"{numbered} ({name} rows {chunk[0]}-{chunk[-1]})")  # type: ignore[index]
                continue
            if chunk_samples is not None:
                read.append(numbered)
                if options.merge_from is None:
                    _note(
                        f"{name}: chunk {number}/{len(pieces)} (rows {chunk[0]}-{chunk[-1]}) read from the resume store"
                    )
            else:
                if chunk is not None and (len(pieces) > 1 or options.shard is not None):
                    shard = (
                        f"shard {options.shard[0]}/{options.shard[1]}: run chunk {numbered}: " if options.shard else ""
                    )
                    _note(f"{shard}{name}: chunk {number}/{len(pieces)}, rows {chunk[0]}-{chunk[-1]} ({len(chunk)})")
                piece = whole if whole is not None else chunk_task(task, docs, chunk)
                piece_kwargs = kwargs
                if name in uncached:
                    piece_kwargs = {
                        **kwargs,
                        "cache_requests": False,
                        "rewrite_requests_cache": False,
                    }
                result = original(
                    lm=lm,
                    task_dict={"tasks": {name: piece}, "groups": {}},
                    limit=limit if whole is not None else None,
                    samples={name: indices} if whole is not None and indices else None,
                    bootstrap_iters=0,
                    log_samples=True,
                    write_out=write_out and first,
                    **piece_kwargs,
                )
                first = False
                if result is None:  # not rank 0
                    return None
                chunk_samples = list(result["samples"][name])
                del result, piece
                for sample in chunk_samples:
                    if chunk is not None:
                        sample["doc_id"] = chunk[int(sample["doc_id"])]
                    if lean or not log_samples:
                        lean_sample(sample)
                if store is not None and chunk:
                    store.save(task, chunk, chunk_samples)
                ran.append(numbered)
            if options.shard is not None:  # a shard's chunks are in the store: nothing is aggregated
                del chunk_samples
                continue
            for sample in chunk_samples:
                for metric in sample.get("metrics", []):
                    raw_metrics[(metric, sample["filter"])].append(sample[metric])
            if log_samples:
                logged.extend(chunk_samples)
            del chunk_samples
        accumulated[name] = {
            "task": task,
            "raw_metrics": raw_metrics,
            "logged_samples": _filter_order(logged),
        }
    if options.shard is not None:
        raise ShardFinished(options.shard, numbered, ran, read, options.store)
    if missing:
        unreadable = store.unreadable() if store is not None else []
        raise NeedlebenchError(_missing_message(missing, numbered, options.merge_from or [], unreadable))
    if options.merge_from is not None:
        folders = ", ".join(str(source.parent.parent) for source in options.merge_from)
        _note(f"--merge-shards: the {numbered} chunks of this run read from {folders}; no model was built")
    return lm_eval_seam.aggregate(accumulated, groups, bootstrap_iters, log_samples)


@contextmanager
def chunked_evaluation(options: ChunkOptions) -> Iterator[None]:
    """While the block runs, ``lm_eval.evaluator.evaluate`` (called by ``simple_evaluate``) runs in chunks."""

    def chunked(original: Callable[..., Any]) -> Callable[..., Any]:
        def evaluate(*args: Any, **kwargs: Any) -> Any:
            if args:  # simple_evaluate passes keywords only; anything else is not ours to change
                return original(*args, **kwargs)
            return evaluate_in_chunks(original, options, **kwargs)

        return evaluate

    with lm_eval_seam.evaluate_replaced(chunked):
        yield


def chunk_store(prepared: Any) -> Path | None:
    """Where ``--resume`` keeps finished chunks: ``<output>/.needlebench-cache/<model>-<digest>-chunks``, each chunk
    file signed by this user (:meth:`ChunkStore.load`); None without ``--resume``."""
    if not prepared.args.resume or prepared.output is None:
        return None
    return prepared.output / CHUNKS_FOLDER / f"{run_key(prepared.args)}-chunks"
