"""The manifest of a dataset folder (``needlebench.json``), read one way by every reader of a folder.

A dataset folder may come from someone else, so its manifest is read as :mod:`needlebench.dataset.safe_folder` reads
it (without following a link, at most ``MAX_MANIFEST_BYTES``, JSON with depth and number limits), checked field by
field with its file names inside the folder (:func:`~needlebench.dataset.safe_folder.check_manifest`), and its
recorded recipe checked key by key (:func:`~needlebench.dataset.options.check_recipe`). Every problem is a one-line
:class:`~needlebench.errors.NeedlebenchError`. Experiment configs the manifest records are not registered here
(:func:`needlebench.dataset.build.register_experiments` does that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from needlebench.dataset.options import RecipeError, check_recipe
from needlebench.dataset.safe_folder import MANIFEST, read_manifest_file
from needlebench.errors import NeedlebenchError

__all__ = ["MANIFEST", "read_manifest"]


def read_manifest(folder: Path, *, missing_ok: bool = False) -> dict[str, Any] | None:
    """The checked manifest of the dataset folder `folder`.

    A folder that does not exist or has no manifest is not a needlebench dataset: a one-line error, or None with
    ``missing_ok`` (a folder a build is about to write into, a folder that may hold data of another kind). A manifest
    that is not needlebench's, is malformed, names a file outside the folder or through a link, or records a recipe
    with a value of the wrong type is a one-line error either way.
    """
    folder = Path(folder)
    if not folder.is_dir():
        if missing_ok:
            return None
        raise NeedlebenchError(f"dataset folder {folder} does not exist; give a folder written by `needlebench build`")
    manifest = read_manifest_file(folder)
    if manifest is None:
        if missing_ok:
            return None
        raise NeedlebenchError(f"{folder} is not a needlebench dataset: it has no {MANIFEST}")
    try:
        check_recipe(manifest.get("recipe", {}))
    except RecipeError as error:
        raise NeedlebenchError(f"{folder / MANIFEST} is invalid: {error}") from None
    return manifest
