"""Materialise configs as a Hugging Face dataset folder (Hub no-code layout) and its manifest.

Folder: ``README.md`` (the card, with YAML ``configs:``), ``data/<config>/test-NNNNN-of-NNNNN.parquet`` and
``needlebench.json`` (recipe, per-config rows, tokens and fingerprints). Long configs are sharded one file per
context length, so shards can be built in parallel and the bytes never depend on `num_proc`. Each config is
written in a temporary folder and renamed into place; the manifest and card are replaced atomically last.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from needlebench import __version__
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.writer import (
    ShardStats,
    fingerprint_files,
    rows_per_group,
    write_shard,
)
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import ConfigSpec, get_config

MANIFEST = "needlebench.json"
FORMAT = "needlebench-dataset"
FORMAT_VERSION = 1
#: Sizes whose haystack configs get one Parquet shard per context length.
_SHARD_PER_LENGTH_SIZES = ("128k", "200k", "256k", "1000k")
_CHARS_PER_TOKEN = {"en": 4, "zh": 2}

__all__ = ["BuildOptions", "build_dataset", "fingerprint_files", "read_manifest", "shard_plan"]


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
    """The shards of a config: one per context length for long haystack configs, else one."""
    if spec.family in ("single", "multi_retrieval", "multi_reasoning") and spec.size in _SHARD_PER_LENGTH_SIZES:
        groups = [(length,) for length in spec.lengths]
    elif spec.family == "counting_stars" and spec.size == "1000k":
        groups = [tuple(spec.lengths[i : i + 8]) for i in range(0, len(spec.lengths), 8)]
    else:
        groups = [None]
    return [Shard(spec.name, i, len(groups), lengths) for i, lengths in enumerate(groups)]


def _group_rows(spec: ConfigSpec) -> int:
    longest = max(spec.lengths) if spec.lengths else 64_000
    return rows_per_group(longest * _CHARS_PER_TOKEN[spec.language])


def _build_shard(shard: Shard, options: BuildOptions, folder: str) -> ShardStats:
    from needlebench.dataset.rows import iter_rows

    spec = get_config(shard.config)
    rows = iter_rows(spec, options, shard.lengths)
    return write_shard(rows, spec.family, Path(folder) / shard.filename, _group_rows(spec), options.compression)


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none; a manifest that is not needlebench's is an error."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise NeedlebenchError(f"{path} is not a readable needlebench manifest: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise NeedlebenchError(f"{path} is not a needlebench manifest (format {FORMAT!r} expected)")
    if manifest.get("experiments"):
        from needlebench.tasks.experiment import register_manifest_experiments

        register_manifest_experiments(manifest)
    return manifest


def _check_out_dir(out_dir: Path, options: BuildOptions, overwrite: bool) -> dict | None:
    """The existing manifest to extend, or None to start afresh; refuses foreign or conflicting folders."""
    if not out_dir.exists():
        return None
    if not out_dir.is_dir():
        raise NeedlebenchError(f"output {out_dir} exists and is not a folder; choose another --out")
    if overwrite:
        return None
    if not any(out_dir.iterdir()):
        return None
    manifest = read_manifest(out_dir)
    if manifest is None:
        raise NeedlebenchError(
            f"output folder {out_dir} exists and is not a needlebench dataset; choose another --out or pass --overwrite"
        )
    recorded = {key: value for key, value in manifest.get("recipe", {}).items() if key != "corpora"}
    if recorded != options.to_recipe():
        raise NeedlebenchError(
            f"output folder {out_dir} was built with another recipe (seed, inputs or version); "
            "choose another --out or pass --overwrite"
        )
    return manifest


def _corpora(options: BuildOptions, specs: list[ConfigSpec]) -> dict:
    from needlebench.sources.haystacks import corpus_for

    languages = sorted({spec.language for spec in specs if spec.family != "atc"})
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
) -> dict:
    """Build `configs` into `out_dir`; returns the manifest. Existing configs of the same recipe are kept."""
    if num_proc < 1:
        raise NeedlebenchError(f"--num-proc {num_proc} is not allowed; use 1 or more processes")
    specs = [get_config(name) for name in dict.fromkeys(configs)]
    out_dir = Path(out_dir)
    _validate(specs, options)
    corpora = _corpora(options, specs)  # loads (and validates) the haystack inputs before any work
    options = options.pinned(corpora)
    previous = _check_out_dir(out_dir, options, overwrite)
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=out_dir))
    try:
        stats = _build_all(specs, options, staging, num_proc, progress)
        manifest = _merge_manifest(previous, options, corpora, stats, staging)
        if experiments or (previous and previous.get("experiments")):
            recorded = {**((previous or {}).get("experiments") or {}), **(experiments or {})}
            manifest["experiments"] = {name: recorded[name] for name in sorted(recorded) if name in manifest["configs"]}
        _install(out_dir, staging, specs, manifest, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _validate(specs: list[ConfigSpec], options: BuildOptions) -> None:
    """Checks that need no data: buffers against lengths."""
    from needlebench.tasks.haystack import effective_buffer

    for spec in specs:
        if spec.family in ("single", "multi_retrieval", "multi_reasoning"):
            for length in spec.lengths:
                effective_buffer(spec, length, options.settings_for(spec))


def _preload(specs: list[ConfigSpec], options: BuildOptions) -> None:
    """Load and tokenise the corpora (and the schemas, which import `datasets`) in the parent, so forked
    workers share them instead of reloading."""
    from needlebench.dataset.writer import schema_with_features
    from needlebench.tasks.haystack import tokenized_corpus

    for family in {spec.family for spec in specs}:
        schema_with_features(family)
    for spec in specs:
        if spec.family in ("single", "multi_retrieval", "multi_reasoning", "counting_stars") and options.compat is None:
            tokenized_corpus(spec, options.settings_for(spec))


def _build_all(
    specs: list[ConfigSpec], options: BuildOptions, staging: Path, num_proc: int, progress: bool
) -> dict[str, ShardStats]:
    shards = [shard for spec in specs for shard in shard_plan(spec)]
    folders = {spec.name: staging / spec.name for spec in specs}
    for folder in folders.values():
        folder.mkdir(parents=True)
    totals = {spec.name: ShardStats() for spec in specs}
    rows_total = sum(spec.num_rows for spec in specs)
    _preload(specs, options)
    with tqdm(total=rows_total, unit="row", desc="building", disable=not progress) as bar:
        if num_proc == 1 or len(shards) == 1:
            for shard in shards:
                result = _build_shard(shard, options, str(folders[shard.config]))
                totals[shard.config].add(result)
                bar.update(result.rows)
        else:
            context = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(max_workers=num_proc, mp_context=context) as pool:
                # largest shards first, so the workers finish together (the bytes do not depend on the order)
                futures = {
                    pool.submit(_build_shard, shard, options, str(folders[shard.config])): shard
                    for shard in sorted(shards, key=_shard_cost, reverse=True)
                }
                for future in as_completed(futures):
                    result = future.result()
                    totals[futures[future].config].add(result)
                    bar.update(result.rows)
    return totals


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
    for name, stat in stats.items():
        files = sorted((staging / name).glob("*.parquet"))
        configs[name] = {
            "rows": stat.rows,
            "haystack_tokens": stat.haystack_tokens,
            "prompt_tokens": stat.prompt_tokens,
            "fingerprint": fingerprint_files(files),
            "files": [f"data/{name}/{file.name}" for file in files],
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
    from needlebench.tasks.grid import registry

    return list(registry())


#: What a build owns in its folder; `--overwrite` replaces these and leaves everything else (e.g. `.git`) alone.
_OWNED = ("data", "README.md", MANIFEST)


def _install(out_dir: Path, staging: Path, specs: list[ConfigSpec], manifest: dict, overwrite: bool) -> None:
    data = out_dir / "data"
    if overwrite:
        for name in _OWNED:
            stale = out_dir / name
            if stale.is_dir():
                os.replace(stale, staging / f".old-{name}")
            elif stale.exists():
                stale.unlink()
    data.mkdir(exist_ok=True)
    for spec in specs:
        target = data / spec.name
        if target.exists():
            trash = staging / f".old-{spec.name}"
            os.replace(target, trash)
        os.replace(staging / spec.name, target)
    from needlebench.dataset.card import write_card

    write_card(out_dir, manifest)  # after the data is in place, so the card lists file sizes
    manifest_tmp = staging / MANIFEST
    manifest_tmp.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.chmod(manifest_tmp, 0o644)
    os.replace(manifest_tmp, out_dir / MANIFEST)
