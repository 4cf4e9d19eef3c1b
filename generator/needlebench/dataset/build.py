"""Materialise configs as a Hugging Face dataset folder (Hub no-code layout) and its manifest.

Folder: ``README.md`` (the card, with YAML ``configs:``), ``data/<config>/test-NNNNN-of-NNNNN.parquet`` and
``needlebench.json`` (recipe, per-config rows, tokens and fingerprints). Long configs are sharded one file per
context length, so shards can be built in parallel and the bytes never depend on `num_proc`. Each config is
written in a staging folder, then swapped in so that the folder is always one whole dataset (:mod:`.replace`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from needlebench import __version__, interrupts
from needlebench.dataset import replace
from needlebench.dataset.card import warm_up
from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.replace import CARD, recover, report_foreign
from needlebench.dataset.rows import iter_rows
from needlebench.dataset.safe_folder import FORMAT, MANIFEST, check_no_links
from needlebench.dataset.size_guard import check_size
from needlebench.dataset.writer import (
    ShardStats,
    fingerprint_files,
    fingerprint_folder,
    rows_per_group,
    schema_with_features,
    write_shard,
)
from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder
from needlebench.sources.haystacks import corpus_for
from needlebench.tasks.experiment import manifest_experiment_specs
from needlebench.tasks.grid import ConfigSpec, get_config, register_config, registry
from needlebench.tasks.haystack import effective_buffer, tokenized_corpus
from needlebench.tasks.sentence_table import sentence_points
from needlebench.terminal import notice

FORMAT_VERSION = 1
#: Test hook: ``NEEDLEBENCH_TEST_KILL_WORKER=1`` makes each build worker process kill itself with SIGKILL.
KILL_WORKER_ENV = "NEEDLEBENCH_TEST_KILL_WORKER"
_CHARS_PER_TOKEN = {"en": 4, "zh": 2}

__all__ = ["BuildOptions", "build_dataset", "fingerprint_files", "register_experiments", "shard_plan"]


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


def _build_shard(shard: Shard, options: BuildOptions, folder: Folder | str, overlap: bool = True) -> ShardStats:
    """Write one shard into `folder` (an open folder: a forked worker inherits its descriptor; or a path);
    `overlap`: compress in a thread while generating (off in workers that share the cores)."""
    if os.environ.get(KILL_WORKER_ENV) and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)  # test hook: a worker killed as the out-of-memory killer kills one
    spec = get_config(shard.config)
    rows = _counted(iter_rows(spec, options, shard.lengths, utf8_prompts=True))
    group_rows = _group_rows(spec, shard.lengths)
    if isinstance(folder, Folder):
        return write_shard(
            rows, spec.schema_family, shard.filename, group_rows, options.compression, overlap=overlap, folder=folder
        )
    path = Path(folder) / shard.filename
    return write_shard(rows, spec.schema_family, path, group_rows, options.compression, overlap=overlap)


def register_experiments(manifest: dict | None, keep: Iterable[str] = ()) -> None:
    """Make the experiment configs a manifest records resolvable by name (:func:`get_config`); the configs named
    in `keep` stay as registered (a build writing a new version of an experiment the folder holds)."""
    kept = set(keep)
    for spec in manifest_experiment_specs(manifest or {}):
        if spec.name not in kept:
            register_config(spec)


def _check_out_dir(out: Folder, options: BuildOptions, overwrite: bool) -> dict | None:
    """The existing manifest of the open, locked folder `out` (to extend, or to replace with `overwrite`), or None
    for an empty folder.

    A folder that is not a needlebench dataset (no manifest of ours) is never modified, with or without
    `overwrite`; our own leftovers (a killed build's staging folder) are finished or removed first."""

    out_dir = out.path
    report_foreign(out)
    ours = set(replace.leftover_names(out))
    if out.is_file(CARD) and not out.exists(MANIFEST) and ours:
        recover(out)  # a first build into the folder was killed after its commit: finish it
        ours = set(replace.leftover_names(out))
    manifest = read_manifest(out_dir, missing_ok=True)
    if manifest is None:
        others = [name for name in out.listdir() if name not in ours]
        if others:
            raise NeedlebenchError(
                f"output folder {out_dir} is not a needlebench dataset (no {MANIFEST}; it holds {others[0]!r}), "
                "so needlebench never writes into it, even with --overwrite; choose another --out"
            )
        recover(out)
        return None
    recover(out)
    manifest = read_manifest(out_dir, missing_ok=True)
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

    # The folder holding --out is opened once, from / one component at a time (Folder.open: a link below the home
    # or current folder is refused), --out is made in it by descriptor (mkdirat: `created` is true only when this
    # build made it) and opened with O_NOFOLLOW; every file below is reached from these descriptors, never by a path
    # looked up again, and a folder this build made is removed through its parent's descriptor (a parent swapped for
    # a link meanwhile never redirects the clean-up; :mod:`needlebench.safe_fs`).
    absolute = Path(os.path.abspath(out_dir))
    created = False
    try:
        parent = Folder.open(absolute.parent, create=True)
    except OSError as error:
        raise NeedlebenchError(
            f"cannot write output folder {_shown(out_dir)}: {error.strerror}; choose another --out"
        ) from None
    with parent:
        try:
            if absolute.name:
                with contextlib.suppress(FileExistsError):
                    parent.mkdir(absolute.name, exist_ok=False)
                    created = True
                out = parent.sub(absolute.name)
            else:
                out = Folder.open(absolute)
        except OSError as error:
            if created:
                parent.rmtree(absolute.name)
            raise NeedlebenchError(
                f"cannot write output folder {_shown(out_dir)}: {error.strerror}; choose another --out"
            ) from None
        with out:
            try:
                replace.lock(out)
                previous = None if created else _check_out_dir(out, options, overwrite)
            except BaseException:
                if created:
                    parent.rmtree(absolute.name)
                raise
            # the card lists the folder's experiment configs by name; the configs of this build are the ones it writes
            register_experiments(previous, keep=[spec.name for spec in specs])

            for spec in specs:  # never written through a link: refused before any work
                check_no_links(out_dir, f"data/{spec.name}", f"the build of {spec.name} into {out_dir}")
            made = (parent, absolute.name) if created else None
            return _build_into(specs, out, options, corpora, previous, made, num_proc, overwrite, progress, experiments)


def _build_into(
    specs: list[ConfigSpec],
    out: Folder,
    options: BuildOptions,
    corpora: dict,
    previous: dict | None,
    made: tuple[Folder, str] | None,
    num_proc: int,
    overwrite: bool,
    progress: bool,
    experiments: dict | None = None,
) -> dict:
    """Build into a staging folder inside the open, locked folder `out`, then swap it in
    (:func:`.replace.commit`). `made` is (the folder holding `out`, its name) when this build created `out`: an error
    or an interrupt removes it through that descriptor."""

    staging: Folder | None = None

    def discard() -> None:
        if staging is not None:
            with contextlib.suppress(OSError):
                out.rmtree(staging.path.name)
        if made is not None:
            with contextlib.suppress(OSError):
                made[0].rmtree(made[1])  # the folder this build made, by its parent's descriptor (never a link)

    # registered before the staging folder exists: a signal while it is made and marked still cleans up
    key = interrupts.register(discard)  # also run if a Ctrl-C must end the process before the main thread can
    try:
        staging = replace.make_staging(out)
        with staging.sub("data", create=True) as data:
            stats = _build_all(specs, options, data, num_proc, progress)
            replace.step()
            kept = None if overwrite else previous
            manifest = _merge_manifest(kept, options, corpora, stats, data)
        if experiments or (kept and kept.get("experiments")):
            recorded = {**((kept or {}).get("experiments") or {}), **(experiments or {})}
            manifest["experiments"] = {name: recorded[name] for name in sorted(recorded) if name in manifest["configs"]}
        replace.prepare(out, staging, manifest, previous)
    except BaseException:
        discard()
        if staging is not None:
            staging.close()
        raise
    finally:
        interrupts.unregister(key)
    # From the commit on the folder is the new dataset; an error after it is finished by the next build.
    with staging, interrupts.deferred():
        replace.commit(out, staging)
    return manifest


def _shown(path: Path) -> str:
    """A path as an error line shows it: a path thousands of characters long is cut in the middle."""
    text = str(path)
    return text if len(text) <= 200 else f"{text[:90]}…{text[-90:]}"


def _path_max() -> int:
    try:
        return os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError):
        return 4096


def _exists(path: Path) -> bool:
    """Whether something (a link included) is at `path`; a component that is not a folder counts as nothing."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def _check_writable(out_dir: Path) -> None:
    """`--out` must be a folder we can create and write in: a one-line error before any work, nothing written."""
    absolute = out_dir.absolute()
    limit = _path_max()
    if len(os.fsencode(absolute)) >= limit:
        raise NeedlebenchError(
            f"--out {_shown(out_dir)} is {len(os.fsencode(absolute)):,} bytes long as an absolute path; allowed: at "
            f"most {limit - 1:,} (the system's PATH_MAX); choose a shorter --out"
        )
    existing = absolute
    while not _exists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = (
            "is an existing file, not a folder"
            if existing == absolute
            else (f"is below {_shown(existing)}, which is not a folder")
        )
        raise NeedlebenchError(f"--out {_shown(out_dir)} {where}; choose another --out")
    try:
        with tempfile.TemporaryFile(dir=existing):  # unnamed on Linux; removed on close either way
            pass
    except OSError as error:
        raise NeedlebenchError(
            f"cannot write output folder {_shown(out_dir)}: {error.strerror} in {_shown(existing)}; "
            "choose another --out"
        ) from None


def _worker_lost(pool: ProcessPoolExecutor) -> BaseException:
    """What to raise when a worker process died without a result (``BrokenProcessPool``): the interruption when
    one is under way (its signal reached the workers too), else a one-line error naming the signal; the caller
    removes the staging folder, so nothing of the build is left."""
    if interrupts.interrupted():
        return KeyboardInterrupt()
    processes = list((getattr(pool, "_processes", None) or {}).values())
    deadline = time.monotonic() + 2.0  # the pool's manager thread is reaping the workers meanwhile
    while any(process.exitcode is None for process in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    codes = [process.exitcode for process in processes if process.exitcode not in (None, 0)]
    # the pool terminates (SIGTERM) the workers still running once one died: the one that died first is the other
    code = next((code for code in codes if code != -signal.SIGTERM), codes[0] if codes else None)
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}" + (" (as the out-of-memory killer kills)" if name == "SIGKILL" else "")
    elif code is not None:
        how = f"ended with status {code}"
    else:
        how = "ended abruptly"
    return NeedlebenchError(
        f"a build worker process {how}, so the build stopped; nothing of this build was written; build again "
        "(with a smaller --num-proc if memory ran out)"
    )


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
    # the longest config first: the one warning of a haystack too short for it names the longest window
    for spec in sorted(specs, key=lambda spec: -max(spec.lengths, default=0)):
        family = spec.family_object
        if family.reads_haystack and options.compat is None:
            corpus = tokenized_corpus(spec, options.settings_for(spec))
            if family.haystack_grid:
                sentence_points(corpus)  # the placement's table, once for all workers


def _build_all(
    specs: list[ConfigSpec], options: BuildOptions, staging: Folder, num_proc: int, progress: bool
) -> dict[str, ShardStats]:
    """Write every shard of `specs` into ``<config>/`` of the open folder `staging` (the staging ``data/``)."""
    with contextlib.ExitStack() as stack:
        folders = {}
        for spec in specs:
            staging.mkdir(spec.name, mode=0o777, exist_ok=False)
            folders[spec.name] = stack.enter_context(staging.sub(spec.name))
        return _build_shards(specs, options, folders, num_proc, progress)


def _build_shards(
    specs: list[ConfigSpec], options: BuildOptions, folders: dict[str, Folder], num_proc: int, progress: bool
) -> dict[str, ShardStats]:
    shards = [shard for spec in specs for shard in shard_plan(spec)]
    totals = {spec.name: ShardStats() for spec in specs}
    rows_total = sum(spec.num_rows for spec in specs)
    num_proc = _capped(num_proc, len(shards))
    _preload(specs, options)
    with tqdm(total=rows_total, unit="row", desc="building", disable=not progress) as bar:
        if num_proc == 1:
            _set_row_counter(bar.update if progress else None)
            try:
                for shard in shards:
                    totals[shard.config].add(_build_shard(shard, options, folders[shard.config]))
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
                # the workers are forked after the folders were opened: each inherits their descriptors
                pending = {
                    pool.submit(_build_shard, shard, options, folders[shard.config], False): shard
                    for shard in sorted(shards, key=_shard_cost, reverse=True)
                }
                warming = False
                while pending:
                    done, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in done:
                        shard = pending.pop(future)
                        try:
                            stats = future.result()
                        except BrokenProcessPool:
                            raise _worker_lost(pool) from None
                        totals[shard.config].add(stats)
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
    previous: dict | None, options: BuildOptions, corpora: dict, stats: dict[str, ShardStats], staging: Folder
) -> dict:
    """The manifest after this build: the previous configs (same recipe) plus the ones just built (the Parquet
    files of ``<config>/`` in the open staging ``data/`` folder)."""
    configs = dict(previous["configs"]) if previous else {}
    with contextlib.ExitStack() as stack:
        folders = {name: stack.enter_context(staging.sub(name)) for name in stats}
        files = {
            name: sorted(file for file in folder.listdir() if file.endswith(".parquet") and not file.startswith("."))
            for name, folder in folders.items()
        }
        # one config's files are hashed in order, but configs in parallel (hashlib and reads release the GIL)
        with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1) or 1) as pool:
            fingerprints = dict(zip(files, pool.map(fingerprint_folder, folders.values(), files.values())))
    for name, stat in stats.items():
        configs[name] = {
            "rows": stat.rows,
            "haystack_tokens": stat.haystack_tokens,
            "prompt_tokens": stat.prompt_tokens,
            "fingerprint": fingerprints[name],
            "files": [f"data/{name}/{file}" for file in files[name]],
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
