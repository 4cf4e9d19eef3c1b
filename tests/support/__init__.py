"""Test helpers: hand-made rows that follow ``needlebench.tasks.schema`` (for unit tests of hooks and reports)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from needlebench.tasks.grid import get_config
from needlebench.tasks.schema import columns_for

_DEFAULTS: dict[str, Any] = {
    "depth_percent": None,
    "needle_depths": [],
    "needle_boundaries": [],
    "question": "",
    "answer": "",
    "keywords": [],
    "needles": [],
    "repeat": 0,
    "seed": 1,
    "corpus": "fixture",
    "tokenizer": "cl100k_base",
    "prompt_tokens": 100,
    "haystack_tokens": 80,
    "version": "test",
    "buffer": 0,
    "requested_depths": [],
    "corpus_cycles": 0,
    "compat": "",
    "num_needles": 1,
    "item_id": "",
    "rotation": "ABCD",
    "options": [],
    "answer_letter": "A",
    "prompt_style": "direct",
    "task_variant": "acquisition",
    "num_stars": 0,
    "star_counts": [],
    "wrong_counts": [],
    "question_type": "ELDEST_ANCESTOR",
    "generations": 2,
}

NEEDLE = "\nHidden on Emerald Island is the legendary Stardust Shard.\n"
KEYWORD = "Stardust Shard"
STAR_COUNTS = [15, 117, 42, 69]
#: The reference's fixed M=32 star counts, the sign of each +/-1 wrong count and the wrong counts
#: (nick7nlp/Counting-Stars: gen_test_data.ipynb), written out here so tests check the package's copies.
# fmt: off
A32 = [15, 117, 42, 69, 58, 107, 9, 49, 113, 66, 26, 102, 81, 94, 77, 61, 5, 19, 109, 3, 35, 54, 86, 89, 127, 21, 46,
       122, 38, 97, 74, 29]
# fmt: on
SIGNS = "+-+++----+--+--++--+---+-+--+-++"
R32 = [a + 1 if s == "+" else a - 1 for a, s in zip(A32, SIGNS)]
WRONG_COUNTS = [16, 116, 43, 70]


def fixture_row(config: str, **values: Any) -> dict[str, Any]:
    """A row of ``config`` with exactly its family's columns; ``values`` override the defaults."""
    spec = get_config(config)
    row: dict[str, Any] = {}
    for column in columns_for(spec.schema_family):
        if column in values:
            row[column] = values[column]
        elif column == "id":
            row[column] = (
                f"{config}-{values.get('context_length', 1000)}-{values.get('depth_percent')}-{values.get('repeat', 0)}"
            )
        elif column == "task":
            row[column] = spec.task_label
        elif column == "config":
            row[column] = config
        elif column == "language":
            row[column] = spec.language
        elif column == "size":
            row[column] = spec.size or ""
        elif column == "context_length":
            row[column] = 1000
        elif column == "prompt":
            row[column] = f"Prompt of {config} #{values.get('repeat', 0)} at {values.get('context_length', 1000)}"
        else:
            row[column] = _DEFAULTS[column]
    unknown = set(values) - set(row)
    if unknown:
        raise KeyError(f"columns {sorted(unknown)} are not in the {spec.family} schema")
    return row


def single_row(config: str = "single_en_4k", **values: Any) -> dict[str, Any]:
    """An S-RT row whose needle is :data:`NEEDLE` (keyword :data:`KEYWORD`)."""
    base = {"needles": [NEEDLE], "keywords": [KEYWORD], "answer": f"{NEEDLE}*{KEYWORD}", "depth_percent": 50.0}
    return fixture_row(config, **{**base, **values})


def multi_retrieval_row(config: str = "multi_retrieval_en_4k", **values: Any) -> dict[str, Any]:
    """An M-RT row with three needles at depths 0, 50, 100."""
    keywords = ["Stardust Shard", "Crimson Lotus", "Azure Key"]
    base = {
        "needles": [f"\nThe treasure is the {k}.\n" for k in keywords],
        "keywords": keywords,
        "requested_depths": [0.0, 50.0, 100.0],
        "needle_depths": [0.0, 50.0, 100.0],
        "num_needles": 3,
    }
    return fixture_row(config, **{**base, **values})


def multi_reasoning_row(config: str = "multi_reasoning_en_4k", **values: Any) -> dict[str, Any]:
    """An M-RS row whose answer is ``Paris``."""
    base = {
        "answer": "Paris",
        "keywords": ["Paris"],
        "needles": ["\nA is in B.\n", "\nB is Paris.\n"],
        "num_needles": 2,
        "depth_percent": 10.0,
    }
    return fixture_row(config, **{**base, **values})


def atc_rows(
    config: str = "atc_en", item_id: str = "item-0", num_needles: int = 3, correct_letter: str = "A"
) -> list[dict[str, Any]]:
    """The four rotations of one multiple-choice ATC item (the eldest, Ann, is option A before rotation)."""
    names = ["Ann", "Bob", "Cid", "Dee"]
    rows = []
    for shift, rotation in enumerate(("ABCD", "BCDA", "CDAB", "DABC")):
        options = names[shift:] + names[:shift]
        letter = chr(ord("A") + options.index("Ann"))
        rows.append(
            fixture_row(
                config,
                id=f"{item_id}-{rotation}",
                item_id=item_id,
                rotation=rotation,
                options=options,
                answer="Ann",
                answer_letter=letter,
                num_needles=num_needles,
                prompt=f"ATC {item_id} {rotation}",
                prompt_style="reasoning" if config.endswith("_reasoning") else "direct",
                context_length=0,
            )
        )
    return rows


def counting_stars_row(config: str = "counting_stars_acquisition_en_128k", **values: Any) -> dict[str, Any]:
    """A Counting-Stars row with four stars."""
    spec = get_config(config)
    base = {
        "task_variant": spec.variant,
        "num_stars": len(STAR_COUNTS),
        "star_counts": STAR_COUNTS,
        "wrong_counts": WRONG_COUNTS if spec.variant == "reasoning" else [],
        "context_length": 4000,
    }
    return fixture_row(config, **{**base, **values})


def build_data(configs: list[str], folder: Path) -> Path:
    """Build real configs (the pinned release seed) into a dataset folder, as ``needlebench build`` does."""
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions

    build_dataset(configs, folder, BuildOptions(), progress=False)
    return folder


def write_samples(
    folder: Path, task: str, records: list[dict[str, Any]], date: str = "2025-01-01T00-00-00.000000"
) -> Path:
    """Write an lm-eval style ``samples_<task>_<date>.jsonl`` file: each record needs ``doc``, metrics, ``resp``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"samples_{task}_{date}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for index, record in enumerate(records):
            metrics = {k: v for k, v in record.items() if k not in ("doc", "resp")}
            line = {
                "doc_id": index,
                "doc": record["doc"],
                "target": record["doc"].get("answer", ""),
                "resps": [[record.get("resp", "")]],
                "filtered_resps": [record.get("resp", "")],
                "filter": "none",
                "metrics": list(metrics),
                **metrics,
            }
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def results_with_health(path: Path) -> dict[str, Any]:
    """An lm-eval ``results_*.json`` with ``needlebench eval``'s run health (its own file beside it) merged in as
    lm-eval style ``key,none`` entries, tasks not run included: what ``needlebench report`` reads."""
    import json

    from needlebench.evaluation.report import read_health

    data = json.loads(path.read_text(encoding="utf-8"))
    health = read_health(path)
    for task, counts in health["not_run"].items():
        data.setdefault("results", {}).setdefault(task, {"alias": task})
        data.setdefault("n-samples", {})[task] = counts
    for task, values in health["tasks"].items():
        data["results"].setdefault(task, {}).update({f"{key},none": value for key, value in values.items()})
    return data
