"""Loading one config's test split: from a built folder, from a Hub repo at a revision, or built on the fly.

The same rows in every case: a folder built by `needlebench build`, the published repo at its tag, and the
on-the-fly build (cached under ``$NEEDLEBENCH_CACHE/datasets``) all come from the same pinned recipe.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from . import __version__
from .errors import NeedlebenchError
from .grid import get_config
from .options import BuildOptions
from .seeding import RELEASE_SEED


def built_cache_dir(release_seed: int) -> Path:
    root = os.environ.get("NEEDLEBENCH_CACHE") or os.path.join(Path.home(), ".cache", "needlebench")
    return Path(root) / "datasets" / f"v{__version__}-seed{release_seed}"


def ensure_built(config: str, release_seed: int = RELEASE_SEED) -> Path:
    """The on-the-fly folder holding `config` (built once, under a file lock so parallel callers wait)."""
    from .build import build_dataset, read_manifest

    get_config(config)
    folder = built_cache_dir(release_seed)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = read_manifest(folder) if folder.exists() else None
        if manifest is None or config not in manifest["configs"]:
            build_dataset([config], folder, BuildOptions(release_seed=release_seed), progress=False)
    return folder


def load_split(
    config: str,
    *,
    data_dir: str | None = None,
    repo_id: str | None = None,
    revision: str | None = None,
    release_seed: int | None = None,
):
    """The test split of `config` as a `datasets.Dataset`."""
    from datasets import load_dataset

    get_config(config)
    if data_dir and repo_id:
        raise NeedlebenchError("give either data_dir or repo_id, not both")
    if data_dir:
        folder = Path(data_dir).expanduser().resolve()
        if not (folder / "README.md").exists():
            raise NeedlebenchError(f"data_dir {folder} is not a dataset folder (no README.md); build it first")
        return load_dataset(str(folder), config, split="test")
    if repo_id:
        return load_dataset(repo_id, config, split="test", revision=revision)
    folder = ensure_built(config, RELEASE_SEED if release_seed is None else int(release_seed))
    return load_dataset(str(folder), config, split="test")
