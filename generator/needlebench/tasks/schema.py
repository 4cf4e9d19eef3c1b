"""Row schema of every config: shared columns plus the columns of each family (declared by the family objects,
:attr:`needlebench.tasks.families.base.Family.schemas`), as explicit `datasets.Features`.

Rows are plain dicts whose keys are exactly the columns of their schema (see :func:`columns_for`).
"""

from __future__ import annotations

import pyarrow as pa

from needlebench.tasks.families.base import FAMILIES

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

#: Arrow type of each column type name the families use (:data:`needlebench.tasks.families.base.HAYSTACK_COLUMNS`).
_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}


def _arrow_type(name: str) -> pa.DataType:
    """``string``, ``int64``, ``float64`` or ``list<TYPE>`` as an Arrow type."""
    if name.startswith("list<") and name.endswith(">"):
        return pa.list_(_arrow_type(name[5:-1]))
    return _ARROW_TYPES[name]


#: Extra columns by schema key (a family key, or ``atc_v2`` for v2 ATC): the family objects' columns.
FAMILY_COLUMNS: dict[str, dict[str, pa.DataType]] = {
    key: {name: _arrow_type(dtype) for name, dtype in columns.items()}
    for entry in FAMILIES.values()
    for key, columns in entry.schemas.items()
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
