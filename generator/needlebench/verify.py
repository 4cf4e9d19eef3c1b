"""Verify a needlebench dataset: files on disk against the manifest, and a rebuild from the recorded recipe.

A config *differs* when its Parquet files no longer hash to the fingerprint in ``needlebench.json`` (a file
changed, is missing, or an extra ``data/<config>/*.parquet`` file would be loaded), or when rebuilding it with
``BuildOptions.from_recipe(manifest["recipe"])`` gives a different fingerprint.

The fingerprint of a config is the SHA-256 of the bytes of its Parquet files, concatenated in sorted path order
(the same definition as the builder's).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import NeedlebenchError

MANIFEST_NAME = "needlebench.json"
MANIFEST_FORMAT = "needlebench-dataset"
SUPPORTED_FORMAT_VERSIONS = (1,)
_CHUNK = 1 << 20
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def fingerprint_files(paths: Iterable[Path]) -> str:
    """SHA-256 hex of the bytes of ``paths`` concatenated in sorted path order."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):  # the builder's order (needlebench.writer.fingerprint_files)
        with path.open("rb") as stream:
            while chunk := stream.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _check_relative_file(config: str, name: object) -> str:
    """A manifest file entry must be a relative POSIX path ``data/<config>/...parquet`` inside the folder."""
    if not isinstance(name, str):
        raise NeedlebenchError(
            f"config {config!r} lists file {name!r}; expected a path like data/{config}/test-*.parquet"
        )
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or path.parts[:2] != ("data", config) or path.suffix != ".parquet":
        raise NeedlebenchError(
            f"config {config!r} lists file {name!r}; allowed: Parquet files under data/{config}/ inside the folder"
        )
    return name


def validate_manifest(manifest: object, where: str) -> dict[str, Any]:
    """Check the manifest's shape (format, version, configs with rows, fingerprint and files); returns it."""
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise NeedlebenchError(f'{where} is not a needlebench manifest; expected "format": "{MANIFEST_FORMAT}"')
    version = manifest.get("format_version")
    if version not in SUPPORTED_FORMAT_VERSIONS:
        allowed = ", ".join(map(str, SUPPORTED_FORMAT_VERSIONS))
        raise NeedlebenchError(f"{where} has format_version {version!r}; this needlebench reads {allowed}")
    configs = manifest.get("configs")
    if not isinstance(configs, dict) or not configs:
        raise NeedlebenchError(f'{where} lists no configs; expected a "configs" object with at least one config')
    for name, entry in configs.items():
        if not isinstance(entry, dict):
            raise NeedlebenchError(f"config {name!r} in {where} is {entry!r}; expected an object")
        if not isinstance(entry.get("rows"), int) or not _HEX64.match(str(entry.get("fingerprint", ""))):
            raise NeedlebenchError(f'config {name!r} in {where} needs an integer "rows" and a sha256 "fingerprint"')
        files = entry.get("files")
        if not isinstance(files, list) or not files:
            raise NeedlebenchError(f"config {name!r} in {where} lists no files; expected data/{name}/test-*.parquet")
        for file_name in files:
            _check_relative_file(name, file_name)
    if not isinstance(manifest.get("recipe", {}), dict):
        raise NeedlebenchError(f'{where} has a "recipe" that is not an object')
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    """The validated manifest of a dataset folder; a one-line error when the folder is not a needlebench dataset."""
    folder = Path(folder)
    if not folder.is_dir():
        raise NeedlebenchError(f"dataset folder {folder} does not exist; give a folder written by `needlebench build`")
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise NeedlebenchError(f"{folder} is not a needlebench dataset: it has no {MANIFEST_NAME}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NeedlebenchError(
            f"cannot read {path}: {error}; expected the JSON manifest of `needlebench build`"
        ) from None
    return validate_manifest(manifest, str(path))


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


def check_files(folder: Path, manifest: Mapping[str, Any], configs: Iterable[str]) -> dict[str, str]:
    """Configs whose files on disk differ from the manifest, with the reason."""
    differences: dict[str, str] = {}
    for name in configs:
        entry = manifest["configs"][name]
        listed = {folder / file_name for file_name in entry["files"]}
        missing = sorted(p.relative_to(folder).as_posix() for p in listed if not p.is_file())
        present = set((folder / "data" / name).glob("*.parquet"))
        extra = sorted(p.relative_to(folder).as_posix() for p in present - listed)
        if missing:
            differences[name] = f"missing file {missing[0]}"
        elif extra:
            differences[name] = f"unlisted file {extra[0]} (it would be loaded with the config)"
        elif fingerprint_files(listed) != entry["fingerprint"]:
            differences[name] = "files on disk do not match the manifest fingerprint"
    return differences


def rebuild_fingerprints(manifest: Mapping[str, Any], configs: list[str], *, num_proc: int = 1) -> dict[str, str]:
    """Fingerprints of ``configs`` rebuilt into a temporary folder from the manifest's recipe."""
    from .build import BuildOptions, build_dataset

    options = BuildOptions.from_recipe(dict(manifest.get("recipe", {})))
    with tempfile.TemporaryDirectory(prefix="needlebench-verify-") as temp:
        rebuilt = build_dataset(configs, Path(temp) / "rebuild", options, num_proc=num_proc)
    return {name: rebuilt["configs"][name]["fingerprint"] for name in configs}


def check_folder(
    folder: Path,
    configs: Iterable[str] | None = None,
    *,
    rebuild: bool = True,
    num_proc: int = 1,
    label: str | None = None,
) -> dict[str, str]:
    """Configs of a dataset folder that differ, each with the reason; empty when everything matches.

    ``label`` names the dataset in error messages (default: the folder's manifest path).
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    names = select_configs(manifest, configs, label or str(folder / MANIFEST_NAME))
    differences = check_files(folder, manifest, names)
    if rebuild:
        for name, fingerprint in rebuild_fingerprints(manifest, names, num_proc=num_proc).items():
            if fingerprint != manifest["configs"][name]["fingerprint"] and name not in differences:
                differences[name] = (
                    "rebuilding from the recorded recipe gives different files "
                    f"(recipe of generator {manifest.get('generator_version', '?')})"
                )
    return {name: differences[name] for name in names if name in differences}


def verify_folder(
    folder: Path, configs: list[str] | None = None, *, rebuild: bool = True, num_proc: int = 1
) -> list[str]:
    """Names of the configs of ``folder`` that differ (files vs manifest, rebuild vs manifest); [] = ok."""
    return list(check_folder(folder, configs, rebuild=rebuild, num_proc=num_proc))


def check_repo_id(repo_id: str) -> str:
    """A Hub dataset id must be ``ORG/NAME``."""
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise NeedlebenchError(
            f"repository {repo_id!r} is not a Hub dataset id; allowed: ORG/NAME with letters, digits, '-', '_', '.'"
        )
    return repo_id


def download_repo(repo_id: str, revision: str, configs: list[str] | None, target: Path) -> Path:
    """Download the manifest, card and the Parquet files of ``configs`` (all when None) at ``revision``."""
    from huggingface_hub import snapshot_download

    from .hub import hub_errors, hub_error_message

    patterns = None
    if configs is not None:
        patterns = [MANIFEST_NAME, "README.md", *(f"data/{name}/*" for name in configs)]
    try:
        snapshot_download(repo_id, repo_type="dataset", revision=revision, local_dir=target, allow_patterns=patterns)
    except hub_errors() as error:
        raise NeedlebenchError(hub_error_message(error, f"dataset {repo_id}@{revision}")) from None
    return target


def check_repo(
    repo_id: str, revision: str, configs: Iterable[str] | None = None, *, rebuild: bool = True, num_proc: int = 1
) -> dict[str, str]:
    """Like :func:`check_folder` for a Hub dataset at a revision (downloaded into a temporary folder)."""
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
        return check_folder(folder, wanted, rebuild=rebuild, num_proc=num_proc, label=f"dataset {repo_id}@{revision}")


def verify_repo(
    repo_id: str, revision: str, configs: list[str] | None = None, *, rebuild: bool = True, num_proc: int = 1
) -> list[str]:
    """Names of the configs of Hub dataset ``repo_id`` at ``revision`` that differ; [] = ok."""
    return list(check_repo(repo_id, revision, configs, rebuild=rebuild, num_proc=num_proc))
