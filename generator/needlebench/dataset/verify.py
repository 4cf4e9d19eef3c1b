"""Verify a needlebench dataset: files on disk against the manifest, and a rebuild from the recorded recipe.

A config *differs* when its files no longer match ``needlebench.json``: a listed file is missing, is not a regular
file (a link, FIFO, device or socket: refused before it is read) or is not one the card loads
(``data/<config>/test-*.parquet``, :func:`needlebench.dataset.card.data_files_pattern`); an unlisted file matching
that pattern would be loaded with the config; the listed files no longer hash to the recorded fingerprint or hold
another number of rows (their Parquet footers) than the manifest records, or are together larger than its rows and
prompt tokens can take (:func:`shard_size_problem`, from ``fstat`` before a byte is read); the card would make
``load_dataset`` read other files than the manifest lists (its ``data_files``, :func:`card_problem`), cast their
columns to other types (its ``dataset_info.features``, or a legacy ``dataset_infos.json``) or states other row
counts; an experiment record asks for another number of rows than the files hold; or rebuilding it with
``BuildOptions.from_recipe(manifest["recipe"])`` gives a different fingerprint. Only the configs whose files pass
the cheap checks are rebuilt, each at most the size of the largest built-in config unless ``max_tokens`` allows
more (:func:`check_rebuild_size`).
:func:`verify_folder` and :func:`verify_repo` return ``{config: reason}`` for the configs that differ.

needlebench's own loader (:func:`needlebench.dataset.load.load_split`: ``show``, the lm-eval tasks, ``budget``)
reads exactly the files the manifest lists, by descriptor, never what the card says: what verify checks is what it
reads.

The fingerprint of a config is :func:`needlebench.dataset.writer.fingerprint_files` of its Parquet files (the
builder's).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import IO, Any

from needlebench.dataset.build import MANIFEST as MANIFEST_NAME
from needlebench.dataset.build import BuildOptions, build_dataset, register_experiments
from needlebench.dataset.card import data_files_pattern, is_loaded_file
from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.options import RecipeError
from needlebench.dataset.replace import recover_before_reading
from needlebench.dataset.writer import fingerprint_files
from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder, opened
from needlebench.sources.hub import REPO_ID, hub_error_message, hub_errors
from needlebench.yamlload import load_user_yaml

CARD_NAME = "README.md"

__all__ = [
    "MANIFEST_NAME",
    "card_problem",
    "check_files",
    "check_repo_id",
    "fingerprint_files",
    "loaded_files",
    "verify_folder",
    "verify_repo",
]


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
    """Paths (relative, POSIX) of the files in ``folder`` that ``load_dataset`` reads for ``config`` by the card."""
    root = folder / "data" / config
    found = (p.relative_to(folder).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else ()
    return {name for name in found if is_loaded_file(config, name)}


#: Largest card read back from a dataset folder (the card of every config is a few hundred kB).
MAX_CARD_BYTES = 16 * 2**20
#: Keys of a card's ``configs`` entry that needlebench writes; any other (``data_dir``, builder options) changes
#: what ``load_dataset`` reads.
_CARD_CONFIG_KEYS = {"config_name", "data_files", "default"}


#: A standalone YAML file ``datasets`` merges over a card's header when it loads a folder or a repository
#: (``datasets.load.LocalDatasetModuleFactory`` and ``HubDatasetModuleFactory``, ``config.REPOYAML_FILENAME``).
HF_YAML_NAME = ".huggingface.yaml"
#: The legacy ``dataset_infos.json`` ``datasets`` still reads beside a card (``config.DATASETDICT_INFOS_FILENAME`` in
#: ``LocalDatasetModuleFactory.get_module``): its features would cast the columns as a card's do.
LEGACY_INFOS_NAME = "dataset_infos.json"


def card_metadata(folder: Folder, where: str) -> dict[str, Any] | None:
    """The YAML front matter of the folder's card (None when it has no card); a one-line error when it cannot be
    read (a link, a FIFO, too large, not YAML)."""
    try:
        text = folder.read_text(CARD_NAME, limit=MAX_CARD_BYTES)
    except FileNotFoundError:
        return None
    return card_header(text, where)


def card_header(text: str, where: str) -> dict[str, Any]:
    """The YAML front matter of a card's text ({} when it has none); a one-line error when it is not YAML, or when
    ``huggingface_hub`` (``repocard.REGEX_YAML_BLOCK``, what ``load_dataset`` reads a card with) and ``datasets``
    (``utils.metadata._split_yaml_from_readme``) would find different headers in it."""
    import yaml
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    match = REGEX_YAML_BLOCK.search(text)
    header = match.group(2) if match else None
    lines = text.splitlines()
    other = None
    if lines and lines[0] == "---" and "---" in lines[1:]:
        other = "\n".join(lines[1 : lines[1:].index("---") + 1])
    if header != other and (header is None or other != "\n".join(header.splitlines())):
        raise NeedlebenchError(
            f"{where}: the YAML header of {CARD_NAME} is not one clear block between '---' lines (huggingface_hub and "
            "datasets would read different headers)"
        )
    if header is None:
        return {}
    try:
        data = load_user_yaml(header)  # no aliases (a "billion laughs" expands to gigabytes), tags or deep nesting
    except (yaml.YAMLError, RecursionError, ValueError) as error:
        reason = " ".join(str(error).split())[:160] or type(error).__name__
        raise NeedlebenchError(f"{where}: the YAML header of {CARD_NAME} cannot be read ({reason})") from None
    return data if isinstance(data, dict) else {}


def _data_files(value: object) -> dict[str, list[str]] | object:
    """A card's ``data_files`` as ``{split: [patterns]}`` (``datasets``' forms: a string or a list of them for the
    train split, a list of ``{split, path}``, a mapping of split to patterns); anything else as it is."""
    if isinstance(value, str):
        return {"train": [value]}
    if isinstance(value, dict):
        return {str(key): [item] if isinstance(item, str) else item for key, item in value.items()}
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return {"train": list(value)}
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        found: dict[str, list[str]] = {}
        for item in value:
            path = item.get("path")
            found.setdefault(str(item.get("split", "train")), []).extend([path] if isinstance(path, str) else [path])
        return found
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def card_problem(folder: Folder, manifest: Mapping[str, Any], where: str) -> str | None:
    """Why the folder's card would make ``load_dataset`` read other files than the manifest lists, or state other
    row counts (None: it agrees). The card must give each config of the manifest, and only those, the data files
    ``data/<config>/test-*.parquet`` (:func:`~needlebench.dataset.card.data_files_pattern`, which every listed file
    matches) and nothing else that changes what is read."""
    if folder.lstat(HF_YAML_NAME) is not None:
        return (
            f"the folder holds {HF_YAML_NAME}, which load_dataset merges over the YAML of {CARD_NAME} (its configs and "
            "data_files would be read instead); needlebench never writes one, remove it"
        )
    if folder.lstat(LEGACY_INFOS_NAME) is not None:
        return (
            f"the folder holds {LEGACY_INFOS_NAME}, whose features load_dataset uses for a config the YAML of "
            f"{CARD_NAME} gives none (and casts the columns to them); needlebench never writes one, remove it"
        )
    meta = card_metadata(folder, where)
    return None if meta is None else card_header_problem(meta, manifest)


def card_header_problem(meta: Mapping[str, Any], manifest: Mapping[str, Any]) -> str | None:
    """:func:`card_problem` of a card's parsed YAML header."""
    entries = meta.get("configs") or []
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        return f"{CARD_NAME} has configs {_shown(entries)}; expected a list of configs"
    seen: set[str] = set()
    for entry in entries:
        name = entry.get("config_name")
        if name not in manifest["configs"]:
            return f"{CARD_NAME} gives the config {_shown(name)}, which {MANIFEST_NAME} does not list"
        seen.add(name)
        files = manifest["configs"][name]["files"]
        expected = {"test": [data_files_pattern(name)]}
        got = _data_files(entry.get("data_files"))
        if got != expected:
            return (
                f"{CARD_NAME} gives config {name} the data_files {_shown(got)}, but {MANIFEST_NAME} lists "
                f"{_shown(files)} (the card must load {data_files_pattern(name)})"
            )
        others = sorted(str(key) for key in entry if key not in _CARD_CONFIG_KEYS)
        if others:
            return f"{CARD_NAME} gives config {name} the key {others[0]!r}, which changes what load_dataset reads"
    missing = [name for name in manifest["configs"] if name not in seen]
    if missing:
        return f"{CARD_NAME} gives no data_files for config {missing[0]}, which {MANIFEST_NAME} lists"
    infos = meta.get("dataset_info") or []
    for info in [infos] if isinstance(infos, dict) else infos if isinstance(infos, list) else []:
        # datasets.info.DatasetInfosDict.from_dataset_card_data: an item without config_name is the "default" one
        if not isinstance(info, dict) or info.get("config_name", "default") not in manifest["configs"]:
            continue
        name = info.get("config_name", "default")
        problem = features_problem(name, info.get("features"), manifest)
        if problem is not None:
            return problem
        for split in info.get("splits") or []:
            if isinstance(split, dict) and split.get("name") == "test":
                rows = split.get("num_examples")
                if rows != manifest["configs"][name]["rows"]:
                    return (
                        f"{CARD_NAME} says config {name} has {_shown(rows)} rows, but {MANIFEST_NAME} records "
                        f"{manifest['configs'][name]['rows']:,}"
                    )
    return None


def config_features(name: str, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``features`` a card gives config `name` of `manifest` (:func:`needlebench.tasks.schema.features_yaml` of its
    family, what :mod:`needlebench.dataset.card` writes): the columns and types its build writes."""
    from needlebench.tasks.grid import get_config  # deferred: the registry and builders, for a rebuild only
    from needlebench.tasks.schema import features_yaml  # deferred: pyarrow schemas, for a rebuild only

    record = (manifest.get("experiments") or {}).get(name)
    if isinstance(record, dict):  # an experiment config (its record is checked by check_manifest)
        from needlebench.tasks.experiment import (  # deferred: experiments, for an experiment record only
            experiment_from_record,
            experiment_spec,
        )

        spec = experiment_spec(experiment_from_record(record))
    else:
        spec = get_config(name)
    return features_yaml(spec.schema_family)


def _feature_type(item: object) -> str:
    """A card's feature item as a type (``int64``, ``list<string>``), or as it is when it is not one of ours."""
    if isinstance(item, dict):
        rest = {key: value for key, value in item.items() if key != "name"}
        if list(rest) == ["dtype"] and isinstance(rest["dtype"], str):
            return rest["dtype"]
        if list(rest) == ["list"] and isinstance(rest["list"], str):
            return f"list<{rest['list']}>"
        return _shown(rest)
    return _shown(item)


def features_problem(name: str, features: object, manifest: Mapping[str, Any]) -> str | None:
    """Why the ``features`` a card gives config `name` differ from the columns its files hold (None: they agree, or
    the card gives none and ``load_dataset`` takes them from the files). ``load_dataset`` casts every column to the
    card's type (an int64 column read as bool turns 2 into True), so only the exact features the build writes pass."""
    if features is None:
        return None
    expected = config_features(name, manifest)
    if features == expected:
        return None
    if not isinstance(features, list):
        return f"{CARD_NAME} gives config {name} the features {_shown(features)}; expected a list of its columns"
    given: dict[object, object] = {}
    for item in features:
        given.setdefault(item.get("name") if isinstance(item, dict) else None, item)
    for item in expected:
        column = item["name"]
        if column not in given:
            return f"{CARD_NAME} gives config {name} no column {column}, which its files hold"
        if given[column] != item:
            return (
                f"{CARD_NAME} gives column {column} of config {name} the type {_feature_type(given[column])}, but "
                f"its files hold {_feature_type(item)} (load_dataset would cast the column to it)"
            )
    columns = {item["name"] for item in expected}
    extra = next((column for column in given if column not in columns), None)
    if extra is not None:
        return f"{CARD_NAME} gives config {name} the column {_shown(extra)}, which its files do not hold"
    return f"{CARD_NAME} gives config {name} its columns in another order or more than once"


def listed_files(config: str, entry: Mapping[str, Any]) -> list[str]:
    """The files of a config as the manifest lists them, in the order ``load_dataset`` reads them (sorted)."""
    return sorted(entry["files"], key=PurePosixPath)


#: What the Parquet files of a config may hold together, by what its manifest entry records: bytes per prompt token
#: (built files hold under 12 even uncompressed, ``--compression none``: a token is a few bytes of text, and the
#: other columns repeat parts of the prompt), per row (its other columns) and in all (footers).
SHARD_BYTES_PER_TOKEN = 64
SHARD_BYTES_PER_ROW = 64 * 1024
SHARD_BYTES_EXTRA = 16 * 2**20


def shard_bytes_limit(entry: Mapping[str, Any]) -> int:
    """The most bytes the listed files of a manifest entry may hold together (see :data:`SHARD_BYTES_PER_TOKEN`)."""
    tokens = int(entry.get("prompt_tokens") or 0)
    return SHARD_BYTES_PER_TOKEN * tokens + SHARD_BYTES_PER_ROW * int(entry["rows"]) + SHARD_BYTES_EXTRA


def spec_bytes_limit(spec: Any) -> int:
    """The most bytes the files of a config may hold or decode to by what the config itself is (its grid's rows and
    approximate tokens, twice over), whatever a manifest from someone else records: a manifest's ``prompt_tokens``
    of 10**38 must not lift :func:`shard_bytes_limit`."""
    return (
        2 * SHARD_BYTES_PER_TOKEN * int(spec.approx_tokens)
        + SHARD_BYTES_PER_ROW * int(spec.num_rows)
        + SHARD_BYTES_EXTRA
    )


def shard_size_problem(
    handles: Iterable[tuple[str, IO[bytes]]], config: str, entry: Mapping[str, Any], where: str, spec: Any = None
) -> str | None:
    """Why the open listed files of `config` cannot be the ones its manifest entry records, from their sizes alone
    (``fstat`` on each descriptor, before a byte is read): together more than :func:`shard_bytes_limit`. A
    200 GB sparse file is refused at once instead of hashed for minutes."""
    limit = shard_bytes_limit(entry)
    handles = list(handles)
    records = f"{entry['rows']:,} rows of {int(entry.get('prompt_tokens') or 0):,} prompt tokens {where} records"
    if spec is not None and spec_bytes_limit(spec) < limit:
        limit = spec_bytes_limit(spec)
        records = f"{int(spec.num_rows):,} rows of about {int(spec.approx_tokens):,} prompt tokens config {config} has"
    total = 0
    for name, handle in handles:
        size = os.fstat(handle.fileno()).st_size
        total += size
        if total > limit:
            return (
                f"{name} (a file of config {config}) holds {size:,} bytes, more than the {records} can take (at most "
                f"{limit:,} bytes for the config's files)"
            )
    # the same bound on what the files decode to: a page of 1.5 GB of one repeated letter compresses to 59 KB and
    # would be decoded whole into memory and the Arrow cache (Parquet's footer gives each row group's uncompressed
    # size, FileMetaData.row_groups[].total_byte_size in parquet-format's parquet.thrift, read with a seek)
    decoded = 0
    for name, handle in handles:
        size = _decoded_bytes(handle)
        decoded += size
        if decoded > limit:
            return (
                f"{name} (a file of config {config}) decodes to {size:,} bytes, more than the {records} can take "
                f"(at most {limit:,} bytes for the config's files)"
            )
    return None


def _decoded_bytes(handle: IO[bytes]) -> int:
    """The uncompressed bytes of an open Parquet file's row groups, from its footer (0 when it is not Parquet: the
    fingerprint and the loader refuse it); the file is left at its start."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle.seek(0)
        metadata = pq.ParquetFile(handle).metadata
        return sum(metadata.row_group(index).total_byte_size for index in range(metadata.num_row_groups))
    except (OSError, pa.ArrowException):
        return 0
    finally:
        handle.seek(0)


def open_shard(folder: Folder, name: str, config: str) -> IO[bytes]:
    """A listed shard, opened without following a link; a missing file, a link, a FIFO, a device or a socket is a
    one-line error before anything is read (:meth:`needlebench.safe_fs.Folder.open_read`)."""
    try:
        return folder.open_read(name, what=f" (a file of config {config})")
    except (FileNotFoundError, NotADirectoryError):
        raise NeedlebenchError(f"{folder.path / name} (a file of config {config}) is missing") from None


def shard_rows(handle: IO[bytes]) -> int | None:
    """Rows of an open Parquet file, from its footer; None when it is not Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle.seek(0)
        return pq.ParquetFile(handle).metadata.num_rows
    except (OSError, pa.ArrowException):
        return None


def file_difference(folder: Path | Folder, config: str, entry: Mapping[str, Any]) -> str | None:
    """Why the files of one config differ from its manifest entry, or None when they match: each listed file must be
    a regular file inside the folder (no link, FIFO or device), together hashing to the fingerprint and holding the
    recorded rows (Parquet footers); the card's data files must match exactly these files."""
    listed = listed_files(config, entry)
    unloaded = [name for name in listed if not is_loaded_file(config, name)]
    if unloaded:
        return f"listed file {unloaded[0]} is not read by load_dataset (the card loads {data_files_pattern(config)})"
    with opened(folder) as root:
        for name in listed:
            info = root.lstat(name)
            if info is None:
                return f"missing file {name}"
            if not stat.S_ISREG(info.st_mode):
                return f"listed file {name} is not a regular file (a link, FIFO, device, socket or folder)"
        extra = sorted(loaded_files(root.path, config) - set(listed))
        if extra:
            return f"unlisted file {extra[0]} (it would be loaded with the config)"
        digest = hashlib.sha256()
        rows = 0
        not_parquet = None
        with contextlib.ExitStack() as stack:
            handles = []
            for name in listed:
                try:
                    handles.append((name, stack.enter_context(open_shard(root, name, config))))
                except NeedlebenchError as error:
                    return " ".join(str(error).split())[:200]
            too_large = shard_size_problem(handles, config, entry, MANIFEST_NAME)
            if too_large is not None:
                return too_large
            for name, handle in handles:
                for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                    digest.update(chunk)
                count = shard_rows(handle)
                if count is None:
                    not_parquet = not_parquet or name
                else:
                    rows += count
    if digest.hexdigest() != entry["fingerprint"]:
        return "files on disk do not match the manifest fingerprint"
    if not_parquet is not None:
        return f"listed file {not_parquet} is not a Parquet file"
    if rows != entry["rows"]:
        return f"the manifest records {entry['rows']:,} rows but the files hold {rows:,}"
    return None


def parquet_rows(paths: Iterable[Path]) -> int | None:
    """Rows of Parquet files, from their footers; None when one cannot be read as Parquet."""
    total = 0
    for path in paths:
        path = Path(path)
        try:
            with Folder.open(path.parent) as parent, parent.open_read(path.name) as handle:
                count = shard_rows(handle)
        except (OSError, NeedlebenchError):
            return None
        if count is None:
            return None
        total += count
    return total


def check_files(folder: Path, manifest: Mapping[str, Any], configs: Iterable[str]) -> dict[str, str]:
    """Configs whose files on disk differ from the manifest, with the reason; a card that would make
    ``load_dataset`` read other files (or state other row counts) is a difference of the config it names."""
    differences: dict[str, str] = {}
    names = list(configs)
    with Folder.open(folder) as root:
        for name in names:
            reason = file_difference(root, name, manifest["configs"][name])
            if reason is not None:
                differences[name] = reason
        try:
            problem = card_problem(root, manifest, str(Path(folder) / MANIFEST_NAME))
        except NeedlebenchError as error:  # a card that cannot be read as load_dataset reads it
            problem = " ".join(str(error).split())[:300]
        if problem is None and root.lstat(CARD_NAME) is None:
            # without a card, load_dataset(folder) reads every Parquet file as one "default" config
            # (datasets' packaged parquet builder), never the manifest's configs
            problem = (
                f"the folder has no {CARD_NAME} card, so load_dataset(folder, config) finds none of the manifest's "
                f"configs; `needlebench build CONFIG --out {folder}` writes the card again"
            )
    if problem is not None:
        named = next((name for name in names if f"config {name} " in problem + " "), None)
        for name in [named] if named else names:
            differences.setdefault(name, problem)
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


def record_problem(manifest: Mapping[str, Any], name: str) -> str | None:
    """Why the experiment record of config `name` cannot rebuild its files, from the record alone (None: it may): it
    gives every (length, depth, run) cell a row, so it must ask for as many rows as the files hold (checked against
    their footers). A record claiming 800 rows of 2 million tokens beside files of 4 rows is refused before any
    rebuild."""
    from needlebench.tasks.grid import get_config  # deferred: the registry, for a rebuild only

    if name not in (manifest.get("experiments") or {}):
        return None
    rows = get_config(name).num_rows
    recorded = manifest["configs"][name]["rows"]
    if rows != recorded:
        return (
            f"its experiment record in {MANIFEST_NAME} asks for {rows:,} rows but the files hold {recorded:,} (not "
            "rebuilt: it cannot give these files)"
        )
    return None


def largest_standard_tokens() -> int:
    """Context tokens of the largest built-in config (its standard grid): what a rebuild may ask for by default."""
    from needlebench.tasks.grid import registry  # deferred: the registry, for a rebuild only

    return max(spec.approx_tokens for spec in registry().values())


def check_rebuild_size(
    manifest: Mapping[str, Any], configs: list[str], where: str, max_tokens: int | None = None
) -> None:
    """Refuse (one line, before any work) to rebuild a config of more context tokens than `max_tokens` (default:
    the largest built-in config, :func:`largest_standard_tokens`): the size of an experiment config, or of a
    built-in one under the recipe's ``depths``, is whatever the manifest says (a record of 4 lengths of 2 million
    tokens, 20 depths and 10 runs asks for 1.6 billion)."""
    from needlebench.dataset.size_guard import estimate  # deferred: for a rebuild only
    from needlebench.tasks.grid import get_config  # deferred: the registry, for a rebuild only

    limit = largest_standard_tokens() if max_tokens is None else max_tokens
    if limit < 1:
        raise NeedlebenchError(f"--max-tokens {limit} is not allowed; give a positive number of tokens")
    depths = manifest.get("recipe", {}).get("depths")
    depths = tuple(float(depth) for depth in depths) if isinstance(depths, list) and depths else None
    for name in configs:
        rows, tokens, _ = estimate([get_config(name)], "zstd", depths)
        if tokens > limit:
            given = f"--max-tokens {limit:,}" if max_tokens is not None else f"{limit:,} (the largest built-in config)"
            raise NeedlebenchError(
                f"config {name} of {where} asks for {rows:,} rows of about {tokens:,} context tokens to be rebuilt, "
                f"beyond {given}; pass --max-tokens {tokens} to verify it anyway"
            )


def verify_folder(
    folder: Path,
    configs: Iterable[str] | None = None,
    *,
    rebuild: bool = True,
    num_proc: int = 1,
    label: str | None = None,
    inputs: Mapping[str, str | None] | None = None,
    max_tokens: int | None = None,
) -> dict[str, str]:
    """Configs of a dataset folder that differ (files vs manifest, rebuild vs manifest) -> reason; {} = ok.

    The files are checked first (names, sizes, hashes, card); only the configs whose files match are rebuilt, each at
    most `max_tokens` context tokens (:func:`check_rebuild_size`). ``label`` names the dataset in error messages
    (default: the folder's manifest path).
    """

    folder = Path(folder)
    recover_before_reading(folder)  # a replace a killed build committed is finished first, as a build would
    manifest = read_manifest(folder)
    register_experiments(manifest)  # its experiment configs are rebuilt by name
    where = label or str(folder / MANIFEST_NAME)
    names = select_configs(manifest, configs, where)
    differences = check_files(folder, manifest, names)
    for name in names:
        if name not in differences and (problem := record_problem(manifest, name)) is not None:
            differences[name] = problem
    # the cheap checks first: a config whose files already differ is not rebuilt (its reason is known)
    to_rebuild = [name for name in names if name not in differences]
    if rebuild and to_rebuild:
        check_rebuild_size(manifest, to_rebuild, where, max_tokens)
        rebuilt = rebuild_fingerprints(manifest, to_rebuild, num_proc=num_proc, inputs=inputs, where=where)
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
        # the standalone YAML and legacy infos too: load_dataset(repo) reads them (HubDatasetModuleFactory)
        patterns = [
            MANIFEST_NAME,
            "README.md",
            HF_YAML_NAME,
            LEGACY_INFOS_NAME,
            *(f"data/{name}/*" for name in configs),
        ]
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
    max_tokens: int | None = None,
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
            folder,
            wanted,
            rebuild=rebuild,
            num_proc=num_proc,
            label=f"dataset {repo_id}@{revision}",
            inputs=inputs,
            max_tokens=max_tokens,
        )
