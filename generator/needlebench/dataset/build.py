"""Materialise configs as a Hugging Face dataset folder (Hub no-code layout) and its manifest.

Folder: ``README.md`` (the card, with YAML ``configs:``), ``data/<config>/test-NNNNN-of-NNNNN.parquet`` and
``needlebench.json`` (recipe, per-config rows, tokens and fingerprints). Long configs are sharded one file per
context length, so shards can be built in parallel and the bytes never depend on `num_proc`. Each config is
written in a staging folder, then swapped in so that the folder is always one whole dataset (:mod:`.replace`).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from needlebench import __version__, interrupts
from needlebench.dataset import replace
from needlebench.dataset.card import warm_up
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.replace import CARD, leftovers, recover, report_foreign
from needlebench.dataset.rows import iter_rows
from needlebench.dataset.safe_folder import FORMAT, MANIFEST, check_no_links, read_manifest_file
from needlebench.dataset.size_guard import check_size
from needlebench.dataset.writer import (
    ShardStats,
    fingerprint_files,
    rows_per_group,
    schema_with_features,
    write_shard,
)
from needlebench.errors import NeedlebenchError
from needlebench.sources.haystacks import corpus_for
from needlebench.tasks.experiment import manifest_experiment_specs
from needlebench.tasks.grid import ConfigSpec, get_config, register_config, registry
from needlebench.tasks.haystack import effective_buffer, tokenized_corpus
from needlebench.tasks.sentence_table import sentence_points
from needlebench.terminal import notice

FORMAT_VERSION = 1
_CHARS_PER_TOKEN = {"en": 4, "zh": 2}

__all__ = ["BuildOptions", "build_dataset", "fingerprint_files", "read_manifest", "register_experiments", "shard_plan"]


@dataclass(frozen=True)
class Shard:
    config: str
    index: int
    count: int
    lengths: tuple[int, ...] | None

    @property
    def filename(self) -> str:
        return f"test-{self.index:05d}-of-{self.count:05d}.parquet"


def shard_plan(spec: ConfigSpec) -> list[Shard]:
    """The shards of a config, as its family groups its lengths (one per length for long haystack configs)."""
    groups = spec.family_object.shard_groups(spec)
    return [Shard(spec.name, i, len(groups), lengths) for i, lengths in enumerate(groups)]


def _group_rows(spec: ConfigSpec, lengths: tuple[int, ...] | None = None) -> int:
    """Rows per row group of a shard holding `lengths` (None: all the config's lengths)."""
    lengths = spec.lengths if lengths is None else lengths
    longest = max(lengths) if lengths else 64_000
    return rows_per_group(longest * _CHARS_PER_TOKEN[spec.language])


#: Counts the rows written, for the progress bar: a callable in the parent, a shared integer in workers.
_row_counter = None


def _set_row_counter(counter) -> None:
    global _row_counter
    _row_counter = counter


def _worker_init(counter) -> None:
    """Initializer of build workers: interrupts are the parent's to handle; rows are counted for progress."""

    interrupts.worker_init()
    _set_row_counter(counter)


def _counted(rows):
    """The rows, counted as they are written (progress inside large shards)."""
    counter = _row_counter
    if counter is None:
        yield from rows
    elif callable(counter):
        for row in rows:
            yield row
            counter(1)
    else:
        for row in rows:
            yield row
            with counter.get_lock():
                counter.value += 1


def _build_shard(shard: Shard, options: BuildOptions, folder: str, overlap: bool = True) -> ShardStats:
    """Write one shard; `overlap`: compress in a thread while generating (off in workers that share the cores)."""
    spec = get_config(shard.config)
    rows = _counted(iter_rows(spec, options, shard.lengths, utf8_prompts=True))
    path = Path(folder) / shard.filename
    group_rows = _group_rows(spec, shard.lengths)
    return write_shard(rows, spec.schema_family, path, group_rows, options.compression, overlap=overlap)


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none; a manifest that is not needlebench's, a malformed one
    (checked field by field) or one naming a file outside the folder or through a link is a one-line error
    (:mod:`.safe_folder`). Its experiment configs are not registered: :func:`register_experiments` does that."""
    return read_manifest_file(Path(folder))


def register_experiments(manifest: dict | None, keep: Iterable[str] = ()) -> None:
    """Make the experiment configs a manifest records resolvable by name (:func:`get_config`); the configs named
    in `keep` stay as registered (a build writing a new version of an experiment the folder holds)."""
    kept = set(keep)
    for spec in manifest_experiment_specs(manifest or {}):
        if spec.name not in kept:
            register_config(spec)


def _check_out_dir(out_dir: Path, options: BuildOptions, overwrite: bool) -> dict | None:
    """The existing manifest (to extend, or to replace with `overwrite`), or None for a new or empty folder.

    A folder that is not a needlebench dataset (no manifest of ours) is never modified, with or without
    `overwrite`; our own leftovers (a killed build's staging folder) are finished or removed first."""

    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise NeedlebenchError(f"--out {out_dir} is an existing file, not a folder; choose another --out")
    report_foreign(out_dir)
    ours = set(leftovers(out_dir))
    if (out_dir / CARD).is_file() and not (out_dir / MANIFEST).exists() and ours:
        recover(out_dir)  # a first build into the folder was killed after its commit: finish it
        ours = set(leftovers(out_dir))
    manifest = read_manifest(out_dir)
    if manifest is None:
        others = sorted(p.name for p in out_dir.iterdir() if p not in ours)
        if others:
            raise NeedlebenchError(
                f"output folder {out_dir} is not a needlebench dataset (no {MANIFEST}; it holds {others[0]!r}), "
                "so needlebench never writes into it, even with --overwrite; choose another --out"
            )
        recover(out_dir)
        return None
    recover(out_dir)
    manifest = read_manifest(out_dir)
    if overwrite:
        return manifest
    recorded = {key: value for key, value in manifest.get("recipe", {}).items() if key != "corpora"}
    if recorded != options.to_recipe():
        raise NeedlebenchError(
            f"output folder {out_dir} was built with another recipe (seed, inputs or version); "
            "choose another --out or pass --overwrite"
        )
    return manifest


def _corpora(options: BuildOptions, specs: list[ConfigSpec]) -> dict:

    languages = sorted({spec.language for spec in specs if spec.family_object.reads_haystack})
    return {language: corpus_for(options.haystack(language), language).describe() for language in languages}


def build_dataset(
    configs: list[str],
    out_dir: Path,
    options: BuildOptions,
    *,
    num_proc: int = 1,
    overwrite: bool = False,
    progress: bool = True,
    experiments: dict | None = None,
    max_tokens: int | None = None,
) -> dict:
    """Build `configs` into `out_dir`; returns the manifest. Existing configs of the same recipe are kept.
    A build beyond `max_tokens` context tokens or the free disk is refused before any work (:mod:`.size_guard`)."""
    if num_proc < 1:
        raise NeedlebenchError(f"--num-proc {num_proc} is not allowed; use 1 or more processes")
    specs = [get_config(name) for name in dict.fromkeys(configs)]
    out_dir = Path(out_dir)
    _check_writable(out_dir)
    _validate(specs, options)

    check_size(specs, out_dir, options.compression, max_tokens, options.depths)
    corpora = _corpora(options, specs)  # loads (and validates) the haystack inputs before any work
    options = options.pinned(corpora)

    try:
        lock = replace.lock_folder(out_dir) if out_dir.is_dir() else None
    except OSError as error:
        raise NeedlebenchError(
            f"cannot write output folder {out_dir}: {error.strerror}; choose another --out"
        ) from None
    try:
        previous = _check_out_dir(out_dir, options, overwrite)
        # the card lists the folder's experiment configs by name; the configs of this build are the ones it writes
        register_experiments(previous, keep=[spec.name for spec in specs])

        for spec in specs:  # never written through a link: refused before any work
            check_no_links(out_dir, f"data/{spec.name}", f"the build of {spec.name} into {out_dir}")
        created = not out_dir.exists()
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            if lock is None:
                lock = replace.lock_folder(out_dir)
        except OSError as error:
            if created:
                shutil.rmtree(out_dir, ignore_errors=True)
            raise NeedlebenchError(
                f"cannot write output folder {out_dir}: {error.strerror}; choose another --out"
            ) from None
        return _build_into(
            specs, out_dir, options, corpora, previous, created, num_proc, overwrite, progress, experiments
        )
    finally:
        if lock is not None:
            os.close(lock)


def _build_into(
    specs: list[ConfigSpec],
    out_dir: Path,
    options: BuildOptions,
    corpora: dict,
    previous: dict | None,
    created: bool,
    num_proc: int,
    overwrite: bool,
    progress: bool,
    experiments: dict | None = None,
) -> dict:
    """Build into a staging folder inside `out_dir` (locked), then swap it in (:func:`.replace.commit`)."""

    staging: Path | None = None

    def discard() -> None:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)

    # registered before the staging folder exists: a signal while it is made and marked still cleans up
    key = interrupts.register(discard)  # also run if a Ctrl-C must end the process before the main thread can
    try:
        staging = replace.make_staging(out_dir)
        stats = _build_all(specs, options, staging / "data", num_proc, progress)
        replace.step()
        kept = None if overwrite else previous
        manifest = _merge_manifest(kept, options, corpora, stats, staging / "data")
        if experiments or (kept and kept.get("experiments")):
            recorded = {**((kept or {}).get("experiments") or {}), **(experiments or {})}
            manifest["experiments"] = {name: recorded[name] for name in sorted(recorded) if name in manifest["configs"]}
        replace.prepare(out_dir, staging, manifest, previous)
    except BaseException:
        discard()
        raise
    finally:
        interrupts.unregister(key)
    # From the commit on the folder is the new dataset; an error after it is finished by the next build.
    with interrupts.deferred():
        replace.commit(out_dir, staging)
    return manifest


def _check_writable(out_dir: Path) -> None:
    """`--out` must be a folder we can create and write in: a one-line error before any work, nothing written."""
    existing = out_dir.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = (
            "is an existing file, not a folder"
            if existing == out_dir.absolute()
            else (f"is below {existing}, which is not a folder")
        )
        raise NeedlebenchError(f"--out {out_dir} {where}; choose another --out")
    try:
        with tempfile.TemporaryFile(dir=existing):  # unnamed on Linux; removed on close either way
            pass
    except OSError as error:
        raise NeedlebenchError(
            f"cannot write output folder {out_dir}: {error.strerror} in {existing}; choose another --out"
        ) from None


def _validate(specs: list[ConfigSpec], options: BuildOptions) -> None:
    """Checks that need no data: the compat mode and tokenizer against the configs, buffers against lengths."""

    for spec in specs:
        options.check_modes(spec)
        if spec.family_object.haystack_grid:
            for length in spec.lengths:
                effective_buffer(spec, length, options.settings_for(spec))


def _preload(specs: list[ConfigSpec], options: BuildOptions) -> None:
    """Load and tokenise the corpora (and the schemas, which import `datasets`) in the parent, so forked
    workers share them instead of reloading."""

    for schema in {spec.schema_family for spec in specs}:
        schema_with_features(schema)
    for spec in specs:
        family = spec.family_object
        if family.reads_haystack and options.compat is None:
            corpus = tokenized_corpus(spec, options.settings_for(spec))
            if family.haystack_grid:
                sentence_points(corpus)  # the placement's table, once for all workers


def _build_all(
    specs: list[ConfigSpec], options: BuildOptions, staging: Path, num_proc: int, progress: bool
) -> dict[str, ShardStats]:
    shards = [shard for spec in specs for shard in shard_plan(spec)]
    folders = {spec.name: staging / spec.name for spec in specs}
    for folder in folders.values():
        folder.mkdir(parents=True)
    totals = {spec.name: ShardStats() for spec in specs}
    rows_total = sum(spec.num_rows for spec in specs)
    num_proc = _capped(num_proc, len(shards))
    _preload(specs, options)
    with tqdm(total=rows_total, unit="row", desc="building", disable=not progress) as bar:
        if num_proc == 1:
            _set_row_counter(bar.update if progress else None)
            try:
                for shard in shards:
                    totals[shard.config].add(_build_shard(shard, options, str(folders[shard.config])))
            finally:
                _set_row_counter(None)
        else:
            context = multiprocessing.get_context("fork")
            counter = context.Value("q", 0)
            pool = ProcessPoolExecutor(
                max_workers=num_proc, mp_context=context, initializer=_worker_init, initargs=(counter,)
            )
            key = interrupts.register(lambda: interrupts.terminate_pool(pool))
            try:
                # largest shards first, so the workers finish together (the bytes do not depend on the order)
                pending = {
                    pool.submit(_build_shard, shard, options, str(folders[shard.config]), False): shard
                    for shard in sorted(shards, key=_shard_cost, reverse=True)
                }
                warming = False
                while pending:
                    done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        totals[pending.pop(future).config].add(future.result())
                    bar.update(counter.value - bar.n)
                    if not warming and len(pending) < num_proc:  # a core is free: prepare the card meanwhile
                        warming = _warm_card_in_background()
            except BaseException:
                interrupts.terminate_pool(pool)  # an error or Ctrl-C: never wait for the running shards
                raise
            finally:
                interrupts.unregister(key)
            pool.shutdown(wait=True)
    return totals


def _capped(num_proc: int, shards: int) -> int:
    """`num_proc` capped at the build's shards and at the CPUs this process may run on (more workers would only
    wait or share the same cores), saying so."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if num_proc <= min(shards, cpus):
        return num_proc

    if shards <= cpus:
        notice(f"--num-proc {num_proc} capped at {shards}: the build has {shards} shard{'s' if shards > 1 else ''}")
        return shards
    notice(f"--num-proc {num_proc} capped at {cpus}: this machine gives the build {cpus} CPU{'s' if cpus > 1 else ''}")
    return cpus


def _warm_card_in_background() -> bool:
    import threading

    def warm() -> None:

        try:
            warm_up()
        except Exception:  # only a head start: rendering the card raises the same error itself
            return

    threading.Thread(target=warm, name="needlebench-card-warm-up", daemon=True).start()
    return True


def _shard_cost(shard: Shard) -> int:
    """Approximate work of a shard: the context tokens it renders (its rows, for configs without lengths)."""
    spec = get_config(shard.config)
    if not spec.lengths:
        return spec.num_rows
    rows_per_length = spec.num_rows // len(spec.lengths)
    return sum(shard.lengths or spec.lengths) * rows_per_length


def _merge_manifest(
    previous: dict | None, options: BuildOptions, corpora: dict, stats: dict[str, ShardStats], staging: Path
) -> dict:
    """The manifest after this build: the previous configs (same recipe) plus the ones just built."""
    configs = dict(previous["configs"]) if previous else {}
    files = {name: sorted((staging / name).glob("*.parquet")) for name in stats}
    # one config's files are hashed in order, but configs in parallel (hashlib and reads release the GIL)
    with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1) or 1) as pool:
        fingerprints = dict(zip(files, pool.map(fingerprint_files, files.values())))
    for name, stat in stats.items():
        configs[name] = {
            "rows": stat.rows,
            "haystack_tokens": stat.haystack_tokens,
            "prompt_tokens": stat.prompt_tokens,
            "fingerprint": fingerprints[name],
            "files": [f"data/{name}/{file.name}" for file in files[name]],
        }
    recipe = options.to_recipe()
    recorded = dict(previous["recipe"].get("corpora", {})) if previous else {}
    recorded.update(corpora)
    recipe["corpora"] = recorded
    order = {name: i for i, name in enumerate(_registry_names())}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator_version": __version__,
        "recipe": {key: recipe[key] for key in sorted(recipe)},
        "configs": {name: configs[name] for name in sorted(configs, key=lambda n: order.get(n, len(order)))},
    }


def _registry_names() -> list[str]:
    return list(registry())
