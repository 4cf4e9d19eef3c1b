"""Build an experiment file into a dataset folder: one more caller of :func:`build_dataset`.

The experiment becomes a registered :class:`~needlebench.tasks.experiment.ExperimentSpec`; its seed and haystack
become the build options (so a default-haystack experiment can share a folder with built-in configs), and the
validated experiment (needles inline) is recorded in the manifest's ``experiments`` so `verify` rebuilds it.
"""

from __future__ import annotations

from pathlib import Path

from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.tasks.experiment import Experiment, load_experiment, register_experiment


def experiment_options(experiment: Experiment, compression: str = "zstd") -> BuildOptions:
    haystack = {f"haystack_{experiment.language}": experiment.haystack} if experiment.haystack else {}
    return BuildOptions(release_seed=experiment.seed, compression=compression, **haystack)


def build_experiment(
    path: str | Path, out_dir: Path, *, num_proc: int = 1, overwrite: bool = False, compression: str = "zstd",
    progress: bool = True,
) -> tuple[Experiment, dict]:
    """Validate the experiment file at `path` and build its config into `out_dir`; returns it and the manifest."""
    experiment = load_experiment(path)
    register_experiment(experiment)
    manifest = build_dataset(
        [experiment.name], Path(out_dir), experiment_options(experiment, compression), num_proc=num_proc,
        overwrite=overwrite, progress=progress, experiments={experiment.name: experiment.to_record()},
    )
    return experiment, manifest
