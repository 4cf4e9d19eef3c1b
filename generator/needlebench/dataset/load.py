"""Loading one config's test split: from a built folder, from a Hub repo at a revision, or built on the fly.

The same rows in every case: a folder built by `needlebench build`, the published repo at its tag, and the
on-the-fly build (cached under ``$NEEDLEBENCH_CACHE/datasets``, checked on every load against what its build
recorded, rebuilt when it does not match) all come from the same pinned recipe. A missing
or unreachable repo, an unknown revision and a folder or repo lacking the config are one-line
:class:`~needlebench.errors.NeedlebenchError` s.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from needlebench import __version__
from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.dataset.replace import recover_before_reading
from needlebench.dataset.safe_folder import (
    MANIFEST,
    MAX_MANIFEST_BYTES,
    check_manifest,
    lock_shared,
    open_no_follow,
    parse_json,
    read_manifest_file,
)
from needlebench.dataset.verify import (
    MAX_CARD_BYTES,
    card_header,
    card_header_problem,
    card_problem,
    file_difference,
    listed_files,
    open_shard,
    shard_bytes_limit,
    shard_size_problem,
    spec_bytes_limit,
)
from needlebench.errors import NeedlebenchError
from needlebench.safe_fs import Folder, private_folder
from needlebench.seeding import RELEASE_SEED
from needlebench.sources.cache import cache_folder, cache_root, read_checked, write_checked
from needlebench.sources.hub import REPO_ID, check_revision, hub_error_message, hub_errors, resolve_dataset
from needlebench.tasks.grid import get_config
from needlebench.terminal import warn

CARD = "README.md"


def built_cache_dir(release_seed: int) -> Path:
    """The on-the-fly dataset folder of a release seed (under ``$NEEDLEBENCH_CACHE``, keyed by the version)."""
    return cache_root() / "datasets" / f"v{__version__}-seed{release_seed}"


def _record_path(folder: Path) -> Path:
    """Where the on-the-fly build records what it wrote: beside the folder (outside it), HMAC-tagged."""
    return folder.parent / f"{folder.name}.record"


def _digest_of(folder: Path) -> bytes:
    """sha256 of the folder's manifest and card (the card says which files `load_dataset` reads); both are read
    without following a link (:mod:`.safe_folder`)."""

    digest = hashlib.sha256()
    for name in (MANIFEST, CARD):
        digest.update(hashlib.sha256(open_no_follow(folder, name, str(folder / name), MAX_MANIFEST_BYTES)).digest())
    return digest.digest()


def _cache_problem(folder: Path, config: str) -> str | None:
    """Why the on-the-fly folder cannot be trusted (None: it can, or it does not exist): its manifest and card
    must be the ones its build recorded (:func:`needlebench.sources.cache.read_checked`), and the files of
    `config`, when built, must hash to the manifest's fingerprint."""
    if not folder.exists() and not folder.is_symlink():
        return None
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder"
    try:
        manifest = read_manifest_file(folder)
        recorded = read_checked(_record_path(folder))
        if manifest is None or recorded is None or bytes(recorded) != _digest_of(folder):
            return "does not match what its build recorded"
    except (NeedlebenchError, OSError) as error:
        return f"cannot be read ({' '.join(str(error).split())[:160]})"
    if config in manifest["configs"]:
        try:
            reason = file_difference(folder, config, manifest["configs"][config])
        except (NeedlebenchError, OSError) as error:
            reason = " ".join(str(error).split())[:160]
        if reason is not None:
            return f"does not hold what its build wrote for {config} ({reason})"
    return None


def ensure_built(config: str, release_seed: int = RELEASE_SEED) -> Path:
    """The on-the-fly folder holding `config` (built once, under a file lock so parallel callers wait).

    The folder is checked on every load against what its build recorded outside it (:func:`_cache_problem`); a
    folder that does not match is removed and built again, with a one-line warning."""
    get_config(config)
    folder = built_cache_dir(release_seed)
    with cache_folder(folder.parent) as parent:  # 0700 whatever the umask (each level from the cache root)
        lock = os.open(
            f"{folder.name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent.fd
        )
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            problem = _cache_problem(folder, config)
            if problem is not None:
                warn(f"dataset cache {folder} {problem}; it is built again")
                parent.rmtree(folder.name)  # a link or a file there is removed itself, never followed
            manifest = read_manifest_file(folder) if parent.exists(folder.name) else None
            if manifest is None or config not in manifest["configs"]:
                private_folder(folder).close()
                build_dataset([config], folder, BuildOptions(release_seed=release_seed), progress=False)
                write_checked(_record_path(folder), _digest_of(folder))
        finally:
            os.close(lock)
    return folder


def check_repo_id(repo_id: object) -> str:
    """``data_repo`` must be a Hub dataset id ``ORG/NAME``, never a local path (``datasets`` would read a folder of
    that name first): a one-line error pointing at ``data_dir`` otherwise."""

    text = str(repo_id)
    if not isinstance(repo_id, str) or not REPO_ID.match(text) or ".." in text or "--" in text:
        raise NeedlebenchError(
            f"data_repo {text!r} is not a Hub dataset id; allowed: ORG/NAME with letters, digits, '-', '_', '.' "
            "(for a local folder pass data_dir)"
        )
    if Path(text).exists():
        raise NeedlebenchError(
            f"data_repo {text!r} names a local path; data_repo takes a Hub dataset id ORG/NAME, pass a folder as "
            "data_dir"
        )
    return text


def check_built(folder: Path, config: str) -> None:
    """Raise a one-line error when a built folder's manifest does not list ``config``."""
    manifest = read_manifest_file(folder)
    if manifest is None:
        return  # not a needlebench-built folder (e.g. a downloaded repo); loading it decides
    built = list(manifest.get("configs", {}))
    if config not in built:
        shown = ", ".join(built[:8]) + (" ..." if len(built) > 8 else "")
        raise NeedlebenchError(
            f"config {config!r} is not built in data_dir {str(folder)!r} (it holds: {shown or 'nothing'}); "
            f"add it with `needlebench build {config} --out {folder}`"
        )


def _first_line(error: BaseException) -> str:
    """The error's message on one line, shortened."""
    return " ".join(str(error).split())[:200] or type(error).__name__


#: Version of the Arrow files :func:`_read_config` keeps (bump when what they hold changes).
ARROW_FORMAT = "needlebench-arrow-1"
#: Rows per Arrow batch while converting, and the bytes a batch may hold (from each row group's uncompressed size):
#: a 1M-token prompt is some 4 MB, so 64 of them would hold a gigabyte at once.
_BATCH_ROWS = 64
_BATCH_BYTES = 16 * 1024 * 1024


def arrow_cache_dir() -> Path:
    """The private folder of the Arrow files the loader reads (under ``$NEEDLEBENCH_CACHE``)."""
    return cache_root() / "arrow"


def _read_config(open_file: Callable[[str], IO[bytes]], config: str, entry: dict[str, Any], where: str) -> Any:
    """The test split of `config`: exactly the files the manifest lists, each opened once by `open_file` (which
    refuses anything but a regular file of the dataset) and read through that descriptor only, with the features of
    the config's family.

    The rows go into an Arrow file of a private cache folder (0700, :func:`needlebench.safe_fs.private_folder`),
    named by the sha256 of the bytes read (so a later load of the same files maps it again without converting) and
    memory-mapped as ``datasets`` maps its own cache: a split of a million-token config is never held in memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetInfo, NamedSplit
    from datasets.table import MemoryMappedTable

    from needlebench.tasks.schema import features_for  # deferred: datasets' features (pyarrow); only a load needs it

    features = features_for(get_config(config).schema_family)
    schema = features.arrow_schema
    names = listed_files(config, entry)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open_file(name)) for name in names]
        spec = get_config(config)
        too_large = shard_size_problem(zip(names, handles, strict=True), config, entry, "its manifest", spec)
        if too_large is not None:  # before a byte is read (a sparse file of 200 GB would be hashed for minutes)
            raise NeedlebenchError(f"{where}: {too_large}")
        digest = hashlib.sha256(f"{ARROW_FORMAT}\0{config}\0{schema.to_string()}\0".encode())
        for name, handle in zip(names, handles, strict=True):
            digest.update(f"{name}\0".encode())
            size = 0
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
            digest.update(f"\0{size}\0".encode())
        leaf = f"{digest.hexdigest()}.arrow"
        with private_folder(arrow_cache_dir()) as cache:
            if not cache.is_file(leaf):
                try:
                    with cache.atomic(leaf, mode=0o600) as out:
                        # what the files decode to, batch by batch, within the same bound as their footers'
                        # sizes (a footer can understate them): a page decoding past it stops the load
                        decoded, limit = 0, min(shard_bytes_limit(entry), spec_bytes_limit(spec))
                        with pa.ipc.new_stream(out, schema) as writer:
                            for handle in handles:
                                handle.seek(0)
                                parquet = pq.ParquetFile(handle)
                                for group in range(parquet.metadata.num_row_groups):
                                    info = parquet.metadata.row_group(group)
                                    size = _BATCH_BYTES * info.num_rows // max(info.total_byte_size, 1)
                                    size = max(1, min(_BATCH_ROWS, size))
                                    for batch in parquet.iter_batches(batch_size=size, row_groups=[group]):
                                        table = pa.Table.from_batches([batch]).select(list(features))
                                        decoded += table.nbytes
                                        if decoded > limit:
                                            raise NeedlebenchError(
                                                f"{where}: the files of config {config} decode to more than "
                                                f"{limit:,} bytes, more than its rows can hold (its Parquet "
                                                "footers understate their sizes)"
                                            )
                                        writer.write_table(table.cast(schema))
                except (KeyError, ValueError, OSError, pa.ArrowException) as error:
                    raise NeedlebenchError(
                        f"the files of config {config} in {where} are not readable Parquet with its columns "
                        f"({_first_line(error)})"
                    ) from None
            path = cache.path / leaf
    info = DatasetInfo(features=features, config_name=config)
    return Dataset(MemoryMappedTable.from_file(str(path)), info=info, split=NamedSplit("test"))


def _load_folder(folder: Path, config: str) -> Any:
    """The test split of ``config`` from a local dataset folder (a built or downloaded needlebench dataset).

    The rows are read from the files the manifest lists, never from what the card says (``datasets`` would follow
    the card's ``data_files`` anywhere: ``../``, a URL); a card that would load other files is refused in one line,
    so ``load_dataset(FOLDER, CONFIG)`` by anyone else reads what this reads (its features too). The folder is read
    under a shared lock (a build into it holds the exclusive one; anyone else holding one is waited for a bounded
    time, :func:`~needlebench.dataset.safe_folder.lock_shared`), after a replace a killed build left is finished."""

    if not folder.is_dir():
        raise NeedlebenchError(f"data_dir {str(folder)!r} is not a directory; build it with `needlebench build`")
    recover_before_reading(folder)
    check_built(folder, config)
    if not (folder / CARD).exists():
        raise NeedlebenchError(f"data_dir {folder} is not a dataset folder (no README.md); build it first")
    with Folder.open(folder) as root:
        lock_shared(root.fd, folder)  # released when the descriptor is closed; never waits without a word
        manifest = read_manifest_file(folder)
        if manifest is None:
            raise NeedlebenchError(
                f"config {config!r} could not be loaded from data_dir {folder}: it has no {MANIFEST} (needlebench "
                f"reads only the files a manifest lists); build it with `needlebench build {config} --out {folder}`"
            )
        check_built(folder, config)
        where = str(folder / MANIFEST)
        problem = card_problem(root, manifest, where)
        if problem is not None:
            raise NeedlebenchError(
                f"data_dir {folder}: {problem}; needlebench reads only the files {MANIFEST} lists (check the folder "
                f"with `needlebench verify {folder}`)"
            )
        return _read_config(
            lambda name: open_shard(root, name, config), config, manifest["configs"][config], str(folder)
        )


def _hub_failure(error: BaseException, what: str) -> str:
    """A one-line message for a failed Hub load (offline mode named as such: datasets reports a lost connection)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return f"{what}: not in the local cache and HF_HUB_OFFLINE is set; unset it to download the dataset"
    return hub_error_message(error, what)


def _open_cached(snapshot: Path, name: str, config: str) -> IO[bytes]:
    """A file of a Hub snapshot in the user's own Hugging Face cache (a link into the repository's ``blobs``
    folder, written by ``huggingface_hub``): opened only when it resolves there and is a regular file."""
    blobs = snapshot.parents[1] / "blobs"
    path = (snapshot / name).resolve()
    if not path.is_relative_to(blobs.resolve()):
        raise NeedlebenchError(f"{name} (a file of config {config}) is not in the Hugging Face cache of its dataset")
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NeedlebenchError(f"{name} (a file of config {config}) is missing from the Hugging Face cache") from None
    handle = os.fdopen(descriptor, "rb")
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        handle.close()
        raise NeedlebenchError(f"{name} (a file of config {config}) in the Hugging Face cache is not a regular file")
    return handle


def _read_cached(snapshot: Path, name: str, what: str, limit: int) -> bytes:
    with _open_cached(snapshot, name, "") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NeedlebenchError(f"{what}: {name} holds more than {limit:,} bytes")
    return data


def _load_repo(repo_id: str, revision: str | None, config: str) -> Any:
    """The test split of ``config`` from a Hub dataset at ``revision`` (default ``main``): its manifest first, then
    the card and exactly the files the manifest lists (``huggingface_hub`` downloads into its cache), read as a
    folder is (:func:`_load_folder`); the card's ``data_files`` are never followed.

    Online, the repo and revision are asked for once first (no retries), so a missing repo or revision or an
    unreachable endpoint fails fast with a precise message.
    """
    from huggingface_hub import constants, snapshot_download

    what = f"dataset {repo_id}@{check_revision(revision) or 'main'} config {config!r}"
    if not constants.HF_HUB_OFFLINE:
        resolve_dataset(repo_id, revision)

    def download(patterns: list[str]) -> Path:
        try:
            return Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=patterns))
        except hub_errors() as error:
            raise NeedlebenchError(_hub_failure(error, what)) from None

    snapshot = download([MANIFEST])
    try:
        data = _read_cached(snapshot, MANIFEST, what, MAX_MANIFEST_BYTES)
    except NeedlebenchError:
        raise NeedlebenchError(f"{what}: the dataset has no {MANIFEST}; it is not a needlebench dataset") from None
    manifest = check_manifest(parse_json(data, Path(f"{repo_id}/{MANIFEST}")), f"{what}: {MANIFEST}")
    if config not in manifest["configs"]:
        shown = ", ".join(list(manifest["configs"])[:8])
        raise NeedlebenchError(f"{what}: the dataset does not hold this config (it holds: {shown})")
    entry = manifest["configs"][config]
    snapshot = download([MANIFEST, CARD, *(glob.escape(name) for name in entry["files"])])
    if _read_cached(snapshot, MANIFEST, what, MAX_MANIFEST_BYTES) != data:
        raise NeedlebenchError(f"{what}: {MANIFEST} changed while it was downloaded; try again")
    try:
        card = _read_cached(snapshot, CARD, what, MAX_CARD_BYTES).decode("utf-8", errors="replace")
    except NeedlebenchError:
        card = None
    if card is not None:
        problem = card_header_problem(card_header(card, what), manifest)
        if problem is not None:
            raise NeedlebenchError(f"{what}: {problem}; needlebench reads only the files {MANIFEST} lists")
    return _read_config(lambda name: _open_cached(snapshot, name, config), config, entry, f"dataset {repo_id}")


def load_split(
    config: str,
    *,
    data_dir: str | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
    release_seed: int | None = None,
) -> Any:
    """The test split of `config` as a `datasets.Dataset`."""
    get_config(config)
    if data_dir and repo_id:
        raise NeedlebenchError("give either data_dir or repo_id, not both")
    if data_dir:
        return _load_folder(Path(data_dir).expanduser().resolve(), config)
    if repo_id:
        return _load_repo(check_repo_id(repo_id), revision, config)
    folder = ensure_built(config, RELEASE_SEED if release_seed is None else int(release_seed))
    return _load_folder(folder, config)
