"""Build an experiment file into a dataset folder: one more caller of :func:`build_dataset`.

The experiment becomes a registered :class:`~needlebench.tasks.experiment.ExperimentSpec`; its seed and haystack
become the build options (so a default-haystack experiment can share a folder with built-in configs), and the
validated experiment (needles inline) is recorded in the manifest's ``experiments`` so `verify` rebuilds it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from needlebench.dataset.build import build_dataset
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenizer import DEFAULT_TOKENIZER
from needlebench.tasks.experiment import (
    Experiment,
    load_experiment,
    register_experiment,
)
from needlebench.tasks.grid import FAMILIES


def experiment_options(experiment: Experiment, compression: str = "zstd") -> BuildOptions:
    haystack = {f"haystack_{experiment.language}": experiment.haystack} if experiment.haystack else {}
    return BuildOptions(
        release_seed=experiment.seed, compression=compression, tokenizer=experiment.tokenizer, **haystack
    )


def with_tokenizer(experiment: Experiment, where: str, tokenizer: str | None = None) -> Experiment:
    """The experiment with its tokenizer in recorded form (``hf:LABEL@sha256:HEX``); `tokenizer` (the command
    line's) applies when the file names none, and must be the same tokenizer when it does."""
    from needlebench.sources.tokenizer import canonical_tokenizer

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
) -> tuple[Experiment, dict]:
    """Validate the experiment file at `path` and build its config into `out_dir`; returns it and the manifest.
    `tokenizer` (``--tokenizer``) counts the lengths in another tokenizer when the file names none."""
    experiment = with_tokenizer(load_experiment(path), str(path), tokenizer)
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


def _unit(record: dict) -> str:
    """What an experiment's lengths are counted in: cl100k, or the recorded Hugging Face tokenizer."""
    tokenizer = record.get("tokenizer", DEFAULT_TOKENIZER)
    return "cl100k" if tokenizer == DEFAULT_TOKENIZER else f"`{tokenizer}`"


def _haystack(recorded: object) -> str:
    """The haystack of a recorded experiment: a spec, a local input (by name, size and sha256) or the default."""
    from needlebench.sources.inputs import describe, is_input_record

    if is_input_record(recorded):
        return describe(recorded)
    return str(recorded) if recorded else "embedded default"


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
            f"haystack: {_haystack(record.get('haystack'))}",
            f"- lengths ({len(lengths)}): {', '.join(f'{n:,}' for n in lengths)} {_unit(record)} tokens; "
            f"length buffer {record['length_buffer']}, start/end buffers {record['start_buffer']}/{record['end_buffer']}",
            f"- depths ({len(depths)}): {', '.join(f'{d:g}' for d in depths)} percent"
            + (f"; each further needle {record['diff']:g}% deeper" if "diff" in record else ""),
            f"- runs: {record['runs']}"
            + (
                f"; needles sampled {record['sample_method']} (fixed_index {record['fixed_index']}, "
                f"{record['n_needles']} per cell)"
                if record["kind"] == "single"
                else ""
            ),
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
