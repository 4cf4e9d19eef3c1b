"""Build an experiment file into a dataset folder: one more caller of :func:`build_dataset`.

The experiment becomes a registered config (:func:`~needlebench.tasks.experiment.register_experiment`); its seed and
haystack become the build options (so a default-haystack experiment can share a folder with built-in configs), and the
validated experiment (needles inline) is recorded in the manifest's ``experiments`` so `verify` rebuilds it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenizer import DEFAULT_TOKENIZER, canonical_tokenizer
from needlebench.tasks.experiment import (
    Experiment,
    load_experiment,
    register_experiment,
)


def experiment_options(experiment: Experiment, compression: str = "zstd") -> BuildOptions:
    haystack = {f"haystack_{experiment.language}": experiment.haystack} if experiment.haystack else {}
    return BuildOptions(
        release_seed=experiment.seed, compression=compression, tokenizer=experiment.tokenizer, **haystack
    )


def with_tokenizer(experiment: Experiment, where: str, tokenizer: str | None = None) -> Experiment:
    """The experiment with its tokenizer in recorded form (``hf:LABEL@sha256:HEX``); `tokenizer` (the command
    line's) applies when the file names none, and must be the same tokenizer when it does."""

    try:
        recorded = canonical_tokenizer(experiment.tokenizer)
    except NeedlebenchError as error:
        raise NeedlebenchError(f"{where}: key tokenizer: {error}") from None
    if tokenizer is not None:
        given = canonical_tokenizer(tokenizer)
        if experiment.tokenizer != DEFAULT_TOKENIZER and given != recorded:
            raise NeedlebenchError(
                f"--tokenizer {tokenizer} differs from the experiment file's tokenizer {experiment.tokenizer}; "
                "give one of them"
            )
        recorded = given
    return replace(experiment, tokenizer=recorded)


def build_experiment(
    path: str | Path,
    out_dir: Path,
    *,
    num_proc: int = 1,
    overwrite: bool = False,
    compression: str = "zstd",
    progress: bool = True,
    tokenizer: str | None = None,
    max_tokens: int | None = None,
    allowed_paths: tuple[str | Path, ...] = (),
) -> tuple[Experiment, dict]:
    """Validate the experiment file at `path` and build its config into `out_dir`; returns it and the manifest.
    `tokenizer` (``--tokenizer``) counts the lengths in another tokenizer when the file names none; the file may
    read local paths outside its folder only inside `allowed_paths` (``--allow-path``)."""
    experiment = with_tokenizer(load_experiment(path, allowed_paths), str(path), tokenizer)
    register_experiment(experiment)
    manifest = build_dataset(
        [experiment.name],
        Path(out_dir),
        experiment_options(experiment, compression),
        num_proc=num_proc,
        overwrite=overwrite,
        progress=progress,
        experiments={experiment.name: experiment.to_record()},
        max_tokens=max_tokens,
    )
    return experiment, manifest
