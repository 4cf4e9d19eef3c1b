"""Row schema of every config: shared columns plus the columns of each family, as explicit `datasets.Features`.

Rows are plain dicts whose keys are exactly the columns of their family (see :func:`columns_for`).
"""

from __future__ import annotations

import pyarrow as pa

#: Columns every config has, with their Arrow types.
BASE_COLUMNS: dict[str, pa.DataType] = {
    "id": pa.string(),
    "task": pa.string(),  # S-RT, M-RT, M-RS, ATC, Counting-Stars
    "config": pa.string(),
    "language": pa.string(),
    "size": pa.string(),
    "context_length": pa.int64(),  # the grid length L (cl100k tokens)
    "depth_percent": pa.float64(),  # requested depth; null where a row has no single depth
    "needle_depths": pa.list_(pa.float64()),  # actual depth of each needle, percent of haystack tokens
    "prompt": pa.string(),
    "question": pa.string(),
    "answer": pa.string(),
    "keywords": pa.list_(pa.string()),
    "needles": pa.list_(pa.string()),
    "repeat": pa.int64(),
    "seed": pa.int64(),
    "corpus": pa.string(),
    "tokenizer": pa.string(),
    "prompt_tokens": pa.int64(),
    "haystack_tokens": pa.int64(),  # haystack + needles, cl100k tokens (= length - buffer where it applies)
    "version": pa.string(),
}

#: Columns every haystack family (S-RT, M-RT, M-RS) adds, in schema order.
_HAYSTACK_COLUMNS = {
    "buffer": pa.int64(),
    "requested_depths": pa.list_(pa.float64()),
    "needle_boundaries": pa.list_(pa.string()),  # per needle: sentence, clause, paragraph, line, word; compat
    "corpus_cycles": pa.int64(),  # > 0 when the haystack wrapped around the corpus
    "compat": pa.string(),
}

#: Extra columns by family.
FAMILY_COLUMNS: dict[str, dict[str, pa.DataType]] = {
    "single": dict(_HAYSTACK_COLUMNS),
    "multi_retrieval": {**_HAYSTACK_COLUMNS, "num_needles": pa.int64()},
    "multi_reasoning": {**_HAYSTACK_COLUMNS, "num_needles": pa.int64()},
    "atc": {
        "num_needles": pa.int64(),
        "item_id": pa.string(),
        "rotation": pa.string(),
        "options": pa.list_(pa.string()),
        "answer_letter": pa.string(),
        "prompt_style": pa.string(),  # direct, reasoning, open
        "compat": pa.string(),
    },
    # NeedleBench v2 ATC: no options (0-shot, answer in \boxed{}), four question types
    "atc_v2": {
        "num_needles": pa.int64(),  # relation sentences; the chain has num_needles + 1 names
        "question_type": pa.string(),  # ELDEST_ANCESTOR, NTH_ANCESTOR, NTH_DESCENDANT, RELATIONSHIP_DISTANCE
        "generations": pa.int64(),  # generations between the chain's ends (parents 1, grandparents 2)
        "compat": pa.string(),
    },
    "counting_stars": {
        "buffer": pa.int64(),
        "task_variant": pa.string(),  # acquisition, reasoning
        "num_stars": pa.int64(),
        "star_counts": pa.list_(pa.int64()),  # correct counts in star order
        "wrong_counts": pa.list_(pa.int64()),  # reasoning: the first, wrong count of each star
        "needle_boundaries": pa.list_(pa.string()),  # per star, as in the haystack families
        "corpus_cycles": pa.int64(),
        "compat": pa.string(),
    },
}


def columns_for(family: str) -> dict[str, pa.DataType]:
    return {**BASE_COLUMNS, **FAMILY_COLUMNS[family]}


def arrow_schema(family: str) -> pa.Schema:
    return pa.schema([pa.field(name, dtype) for name, dtype in columns_for(family).items()])


def features_for(family: str):
    """`datasets.Features` of a family (imported lazily: `datasets` is slow to import)."""
    from datasets import Features

    return Features.from_dict(features_dict(family))


#: `datasets` dtype names of the Arrow types the schema uses.
_DTYPES = {pa.string(): "string", pa.int64(): "int64", pa.float64(): "float64"}


def _feature_dict(dtype: pa.DataType) -> dict:
    if pa.types.is_list(dtype):
        return {"_type": "List", "feature": _feature_dict(dtype.value_type)}
    return {"_type": "Value", "dtype": _DTYPES[dtype]}


def features_dict(family: str) -> dict:
    """``datasets.Features.to_dict()`` of a family, written without importing `datasets` (a test checks the
    two agree): what the Parquet schema metadata and the card carry."""
    return {name: _feature_dict(dtype) for name, dtype in columns_for(family).items()}


def features_yaml(family: str) -> list[dict]:
    """The ``features`` list of a card's ``dataset_info`` (``datasets.Features._to_yaml_list()``)."""
    items = []
    for name, dtype in columns_for(family).items():
        if pa.types.is_list(dtype):
            items.append({"name": name, "list": _DTYPES[dtype.value_type]})
        else:
            items.append({"name": name, "dtype": _DTYPES[dtype]})
    return items


def check_row(family: str, row: dict) -> None:
    """Raise if a row's keys differ from its family's columns (a programming error, not user input)."""
    expected = columns_for(family).keys()
    if row.keys() != expected:
        missing = sorted(set(expected) - row.keys())
        extra = sorted(row.keys() - set(expected))
        raise ValueError(f"row columns differ from the {family} schema: missing {missing}, extra {extra}")
