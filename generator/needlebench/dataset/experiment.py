"""Build an experiment file into a dataset folder: one more caller of :func:`build_dataset`.

The experiment becomes a registered :class:`~needlebench.tasks.experiment.ExperimentSpec`; its seed and haystack
become the build options (so a default-haystack experiment can share a folder with built-in configs), and the
validated experiment (needles inline) is recorded in the manifest's ``experiments`` so `verify` rebuilds it.
"""

from __future__ import annotations

import json
from pathlib import Path

from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.tasks.experiment import (
    Experiment,
    load_experiment,
    register_experiment,
)
from needlebench.tasks.grid import FAMILIES


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


def _cell(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("|", "\\|").replace("\n", "\\n")


def experiments_markdown(experiments: dict) -> str:
    """The card section describing the folder's experiment configs (user-defined needle tests)."""
    lines = [
        "",
        "## Experiments",
        "",
        "These configs were defined by experiment files (`needlebench build --experiment FILE`); each is recorded",
        "in full in `needlebench.json` (`experiments`), so `needlebench verify` rebuilds it byte for byte.",
    ]
    for name, record in experiments.items():
        lengths, depths = record["lengths"], record["depths"]
        lines += [
            "",
            f"### {name}",
            "",
            f"- kind: {record['kind']} ({FAMILIES[record['kind']]}), language: {record['language']}, "
            f"haystack: {record.get('haystack') or 'embedded default'}",
            f"- lengths ({len(lengths)}): {', '.join(f'{n:,}' for n in lengths)} cl100k tokens; "
            f"length buffer {record['length_buffer']}, start/end buffers {record['start_buffer']}/{record['end_buffer']}",
            f"- depths ({len(depths)}): {', '.join(f'{d:g}' for d in depths)} percent"
            + (f"; each further needle {record['diff']:g}% deeper" if "diff" in record else ""),
            f"- runs: {record['runs']}"
            + (f"; needles sampled {record['sample_method']} (fixed_index {record['fixed_index']}, "
               f"{record['n_needles']} per cell)" if record["kind"] == "single" else ""),
            f"- prompt: {'the paper frame, question at the ' + record['question_position'] if record['prompt'] == 'default' else 'custom template'}"
            f"; guide sentence: {'yes' if record['guide'] else 'no'}; release seed {record['seed']}",
            "",
            "| needle | question | answer | keyword |",
            "|---|---|---|---|",
        ]
        if record["kind"] == "multi_reasoning":
            for i, needle in enumerate(record["needles"]):
                first = i == 0
                lines.append(
                    f"| {_cell(needle)} | {_cell(record['question']) if first else ''} | "
                    f"{_cell(record['answer']) if first else ''} | {_cell(record['keyword']) if first else ''} |"
                )
        else:
            for needle in record["needles"]:
                lines.append(
                    f"| {_cell(needle['needle'])} | {_cell(needle['question'])} | {_cell(needle['answer'])} | "
                    f"{_cell(needle['keyword'])} |"
                )
    return "\n".join(lines) + "\n"
