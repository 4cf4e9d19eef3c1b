"""Lean sample logs: what ``--log_samples`` keeps of a needlebench row, without its multi-megabyte prompt.

lm-eval logs each sample with the whole dataset row (``doc``, prompt included) and the request ``arguments``
(the prompt again, as the model received it): at 1M tokens that is about 8 MB per row, twice the dataset. A
lean sample keeps everything else lm-eval logs (``doc_id``, the row's fields, ``target``, ``resps``,
``filtered_resps``, the metric values, ``doc_hash`` / ``prompt_hash`` / ``target_hash``) and replaces the prompt
by its SHA-256 and length:

* ``doc.prompt`` is dropped; ``doc.prompt_sha256`` and ``doc.prompt_chars`` are added;
* ``arguments`` becomes an empty list (lm-eval's ``prompt_hash`` is the SHA-256 of the context the model got).

The prompt is recoverable from the pinned dataset by the row's ``id``: ``needlebench show DIR ID``
(:func:`find_row`). Only needlebench rows (a ``doc`` with ``id``, ``config`` and a text ``prompt``) are made lean;
samples of other lm-eval tasks stay as lm-eval logs them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError

#: Fields a lean ``doc`` gets in place of ``prompt``.
PROMPT_HASH_KEY = "prompt_sha256"
PROMPT_CHARS_KEY = "prompt_chars"


def prompt_sha256(prompt: str) -> str:
    """The SHA-256 (hex) of a prompt's UTF-8 bytes."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


def is_needlebench_doc(doc: Any) -> bool:
    """A needlebench dataset row (lean logging applies to it)."""
    return isinstance(doc, Mapping) and isinstance(doc.get("prompt"), str) and "id" in doc and "config" in doc


def lean_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """``sample`` (an lm-eval logged sample) without the prompt text and the request arguments (in place)."""
    doc = sample.get("doc")
    if not is_needlebench_doc(doc):
        return sample
    prompt = str(doc["prompt"])
    lean = {key: value for key, value in doc.items() if key != "prompt"}
    lean[PROMPT_HASH_KEY] = prompt_sha256(prompt)
    lean[PROMPT_CHARS_KEY] = len(prompt)
    sample["doc"] = lean
    sample["arguments"] = []
    return sample


def is_lean(sample: Mapping[str, Any]) -> bool:
    """Was ``sample`` logged lean (its prompt replaced by a hash)?"""
    doc = sample.get("doc")
    return isinstance(doc, Mapping) and PROMPT_HASH_KEY in doc and "prompt" not in doc


# --------------------------------------------------------------------------------------------- needlebench show


def _configs_of(folder: Path) -> list[str]:
    from needlebench.dataset.build import register_experiments  # deferred: only `show` (0.15 s)
    from needlebench.dataset.manifest import read_manifest  # deferred: as the line above

    manifest = read_manifest(folder, missing_ok=True)
    if manifest is None:
        raise NeedlebenchError(f"{str(folder)!r} is not a dataset folder built by `needlebench build` (no manifest)")
    register_experiments(manifest)  # its experiment configs are looked up by name
    return list(manifest.get("configs") or {})


def find_row(folder: Path, row_id: str) -> dict[str, Any]:
    """The row of a built dataset folder whose ``id`` is ``row_id`` (its config is the id's prefix)."""
    from datasets.utils import logging as ds_logging

    from needlebench.dataset.load import load_split  # deferred: only `show` needs the builders (0.15 s)

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise NeedlebenchError(
            f"{str(folder)!r} is not a directory; pass a folder built by `needlebench build --out DIR`"
        )
    configs = _configs_of(folder)
    candidates = sorted(
        (name for name in configs if row_id.startswith(name + "-")),
        key=len,
        reverse=True,
    )
    if not candidates:
        shown = ", ".join(configs[:6]) + (" ..." if len(configs) > 6 else "")
        raise NeedlebenchError(f"row id {row_id!r} names no config of {folder} (it holds: {shown or 'nothing'})")
    ds_logging.disable_progress_bar()
    for config in candidates:
        split = load_split(config, data_dir=str(folder))
        ids = split.select_columns(["id"])["id"]
        if row_id in ids:
            return dict(split[ids.index(row_id)])
    raise NeedlebenchError(f"no row {row_id!r} in config {candidates[0]} of {folder}")
