"""Verify a needlebench dataset: files on disk against the manifest, and a rebuild from the recorded recipe.

A config *differs* when its files no longer match ``needlebench.json``: a listed file is missing or is not one
``load_dataset`` reads (the card's ``data/<config>/test-*.parquet``,
:func:`needlebench.dataset.card.data_files_pattern`), an unlisted file matching that pattern would be loaded with the
config, or the listed files no longer hash to the recorded fingerprint; or when rebuilding it with
``BuildOptions.from_recipe(manifest["recipe"])`` gives a different fingerprint. :func:`verify_folder` and
:func:`verify_repo` return ``{config: reason}`` for the configs that differ.

The fingerprint of a config is :func:`needlebench.dataset.writer.fingerprint_files` of its Parquet files (the
builder's).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from needlebench.dataset.build import MANIFEST as MANIFEST_NAME
from needlebench.dataset.build import BuildOptions, build_dataset, register_experiments
from needlebench.dataset.build import read_manifest as read_build_manifest
from needlebench.dataset.card import data_files_pattern, is_loaded_file
from needlebench.dataset.options import RecipeError, check_recipe
from needlebench.dataset.replace import recover_before_reading
from needlebench.dataset.safe_folder import check_manifest
from needlebench.dataset.writer import fingerprint_files
from needlebench.errors import NeedlebenchError
from needlebench.sources.hub import REPO_ID, hub_error_message, hub_errors

__all__ = [
    "MANIFEST_NAME",
    "check_files",
    "check_repo_id",
    "fingerprint_files",
    "loaded_files",
    "read_manifest",
    "verify_folder",
    "verify_repo",
]


def validate_manifest(manifest: Mapping[str, Any], where: str, root: Path | None = None) -> dict[str, Any]:
    """Check a needlebench manifest: its schema field by field and its file names
    (:func:`needlebench.dataset.safe_folder.check_manifest`, against the folder `root` when given), then its recipe.
    """
    check_manifest(manifest, where, root)
    try:
        check_recipe(manifest.get("recipe", {}))
    except RecipeError as error:
        raise NeedlebenchError(f"{where} is invalid: {error}") from None
    return dict(manifest)


def read_manifest(folder: Path) -> dict[str, Any]:
    """The validated manifest of a dataset folder; a one-line error when the folder is not a needlebench dataset.
    Its experiment configs are not registered (:func:`needlebench.dataset.build.register_experiments`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NeedlebenchError(f"dataset folder {folder} does not exist; give a folder written by `needlebench build`")
    path = folder / MANIFEST_NAME
    manifest = read_build_manifest(folder)
    if manifest is None:
        raise NeedlebenchError(f"{folder} is not a needlebench dataset: it has no {MANIFEST_NAME}")
    return validate_manifest(manifest, str(path), folder)


def select_configs(manifest: Mapping[str, Any], configs: Iterable[str] | None, where: str) -> list[str]:
    """The requested configs (all when None); a name not in the manifest is a one-line error."""
    available = list(manifest["configs"])
    if configs is None:
        return available
    chosen = list(dict.fromkeys(configs))
    missing = [name for name in chosen if name not in manifest["configs"]]
    if missing:
        raise NeedlebenchError(f"config {missing[0]!r} is not in {where}; it holds: {', '.join(available)}")
    return chosen


def loaded_files(folder: Path, config: str) -> set[str]:
    """Paths (relative, POSIX) of the files in ``folder`` that ``load_dataset`` reads for ``config``."""
    root = folder / "data" / config
    found = (p.relative_to(folder).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else ()
    return {name for name in found if is_loaded_file(config, name)}


def file_difference(folder: Path, config: str, entry: Mapping[str, Any]) -> str | None:
    """Why the files of one config differ from its manifest entry, or None when they match."""
    listed = sorted(entry["files"])
    missing = [name for name in listed if not (folder / name).is_file()]
    if missing:
        return f"missing file {missing[0]}"
    unloaded = [name for name in listed if not is_loaded_file(config, name)]
    if unloaded:
        return f"listed file {unloaded[0]} is not read by load_dataset (the card loads {data_files_pattern(config)})"
    extra = sorted(loaded_files(folder, config) - set(listed))
    if extra:
        return f"unlisted file {extra[0]} (it would be loaded with the config)"
    if fingerprint_files(folder / name for name in listed) != entry["fingerprint"]:
        return "files on disk do not match the manifest fingerprint"
    rows = parquet_rows(folder / name for name in listed)
    if rows != entry["rows"]:
        return f"the manifest records {entry['rows']:,} rows but the files hold {rows:,}"
    return None


def parquet_rows(paths: Iterable[Path]) -> int | None:
    """Rows of Parquet files, from their footers; None when one cannot be read as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    total = 0
    try:
        for path in paths:
            with open(path, "rb") as handle:  # a file object: any path the OS takes, whatever the locale
                total += pq.ParquetFile(handle).metadata.num_rows
    except (OSError, pa.ArrowException):
        return None
    return total


def check_files(folder: Path, manifest: Mapping[str, Any], configs: Iterable[str]) -> dict[str, str]:
    """Configs whose files on disk differ from the manifest, with the reason."""
    differences: dict[str, str] = {}
    for name in configs:
        reason = file_difference(Path(folder), name, manifest["configs"][name])
        if reason is not None:
            differences[name] = reason
    return differences


def rebuild_fingerprints(
    manifest: Mapping[str, Any],
    configs: list[str],
    *,
    num_proc: int = 1,
    inputs: Mapping[str, str | None] | None = None,
    where: str = "the manifest",
) -> dict[str, str]:
    """Fingerprints of ``configs`` rebuilt into a temporary folder from the manifest's recipe; ``inputs`` points
    the recipe's local inputs (recorded by name and hash) at files on this machine (option name -> path)."""
    try:
        options = BuildOptions.from_recipe(dict(manifest.get("recipe", {})), dict(inputs or {}))
    except RecipeError as error:
        raise NeedlebenchError(f"{where} is invalid: {error}") from None
    with tempfile.TemporaryDirectory(prefix="needlebench-verify-") as temp:
        rebuilt = build_dataset(configs, Path(temp) / "rebuild", options, num_proc=num_proc)
    return {name: rebuilt["configs"][name]["fingerprint"] for name in configs}


def verify_folder(
    folder: Path,
    configs: Iterable[str] | None = None,
    *,
    rebuild: bool = True,
    num_proc: int = 1,
    label: str | None = None,
    inputs: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """Configs of a dataset folder that differ (files vs manifest, rebuild vs manifest) -> reason; {} = ok.

    ``label`` names the dataset in error messages (default: the folder's manifest path).
    """

    folder = Path(folder)
    recover_before_reading(folder)  # a replace a killed build committed is finished first, as a build would
    manifest = read_manifest(folder)
    register_experiments(manifest)  # its experiment configs are rebuilt by name
    where = label or str(folder / MANIFEST_NAME)
    names = select_configs(manifest, configs, where)
    differences = check_files(folder, manifest, names)
    if rebuild:
        rebuilt = rebuild_fingerprints(manifest, names, num_proc=num_proc, inputs=inputs, where=where)
        for name, fingerprint in rebuilt.items():
            if fingerprint != manifest["configs"][name]["fingerprint"] and name not in differences:
                differences[name] = (
                    "rebuilding from the recorded recipe gives different files "
                    f"(recipe of generator {manifest.get('generator_version', '?')})"
                )
    return {name: differences[name] for name in names if name in differences}


def check_repo_id(repo_id: str) -> str:
    """A Hub dataset id must be ``ORG/NAME``."""
    if not isinstance(repo_id, str) or not REPO_ID.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise NeedlebenchError(
            f"repository {repo_id!r} is not a Hub dataset id; allowed: ORG/NAME with letters, digits, '-', '_', '.'"
        )
    return repo_id


def download_repo(repo_id: str, revision: str, configs: list[str] | None, target: Path) -> Path:
    """Download the manifest, card and the Parquet files of ``configs`` (all when None) at ``revision``."""
    from huggingface_hub import snapshot_download

    patterns = None
    if configs is not None:
        patterns = [MANIFEST_NAME, "README.md", *(f"data/{name}/*" for name in configs)]
    try:
        snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=target, allow_patterns=patterns)
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, f"dataset {repo_id}@{revision}")) from None
    return target


def verify_repo(
    repo_id: str,
    revision: str,
    configs: Iterable[str] | None = None,
    *,
    rebuild: bool = True,
    num_proc: int = 1,
    inputs: Mapping[str, str | None] | None = None,
) -> dict[str, str]:
    """Like :func:`verify_folder` for Hub dataset ``repo_id`` at ``revision`` (downloaded to a temporary folder)."""
    check_repo_id(repo_id)
    if not revision or not isinstance(revision, str):
        raise NeedlebenchError(f"revision {revision!r} is empty; give a tag such as v1.0.0, a branch or a commit")
    wanted = None if configs is None else list(configs)
    with tempfile.TemporaryDirectory(prefix="needlebench-verify-repo-") as temp:
        folder = download_repo(repo_id, revision, wanted, Path(temp) / "snapshot")
        if not (folder / MANIFEST_NAME).is_file():
            raise NeedlebenchError(
                f"dataset {repo_id}@{revision} is not a needlebench dataset: it has no {MANIFEST_NAME}"
            )
        return verify_folder(
            folder, wanted, rebuild=rebuild, num_proc=num_proc, label=f"dataset {repo_id}@{revision}", inputs=inputs
        )
