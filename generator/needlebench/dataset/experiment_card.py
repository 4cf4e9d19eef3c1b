"""The card section of a folder's experiment configs (user-defined needle tests), from their manifest records."""

from __future__ import annotations

import json

from needlebench.sources.inputs import describe, is_input_record
from needlebench.sources.tokenizer import DEFAULT_TOKENIZER
from needlebench.tasks.families import family_of


def _unit(record: dict) -> str:
    """What an experiment's lengths are counted in: cl100k, or the recorded Hugging Face tokenizer."""
    tokenizer = record.get("tokenizer", DEFAULT_TOKENIZER)
    return "cl100k" if tokenizer == DEFAULT_TOKENIZER else f"`{tokenizer}`"


def _haystack(recorded: object) -> str:
    """The haystack of a recorded experiment: a spec, a local input (by name, size and sha256) or the default."""
    if is_input_record(recorded):
        return describe(recorded)
    return str(recorded) if recorded else "embedded default"


def _cell(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.replace("|", "\\|").replace("\n", "\\n")


def _prompt(record: dict) -> str:
    if record["prompt"] == "default":
        return "the paper frame, question at the " + record["question_position"]
    return "custom template"


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
        family = family_of(record["kind"])
        lengths, depths = record["lengths"], record["depths"]
        lines += [
            "",
            f"### {name}",
            "",
            f"- kind: {record['kind']} ({family.label}), language: {record['language']}, "
            f"haystack: {_haystack(record.get('haystack'))}",
            f"- lengths ({len(lengths)}): {', '.join(f'{n:,}' for n in lengths)} {_unit(record)} tokens; "
            f"length buffer {record['length_buffer']}, "
            f"start/end buffers {record['start_buffer']}/{record['end_buffer']}",
            f"- depths ({len(depths)}): {', '.join(f'{d:g}' for d in depths)} percent"
            + (f"; each further needle {record['diff']:g}% deeper" if "diff" in record else ""),
            f"- runs: {record['runs']}"
            + (
                f"; needles sampled {record['sample_method']} (fixed_index {record['fixed_index']}, "
                f"{record['n_needles']} per cell)"
                if family.one_needle_per_prompt
                else ""
            ),
            f"- prompt: {_prompt(record)}; guide sentence: {'yes' if record['guide'] else 'no'}; "
            f"release seed {record['seed']}",
            "",
            "| needle | question | answer | keyword |",
            "|---|---|---|---|",
        ]
        if family.chain_needles:
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
