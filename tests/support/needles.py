"""The reference needles: records in the format of the paper's ``needles.jsonl`` (opencompass/NeedleBench on the
Hugging Face Hub: ``needle``, ``arg1`` the place, ``arg2`` the answer, ``language``, ``retrieval_question``), two
English and two Chinese, shared by the tests that build from local copies of the paper's inputs."""

from __future__ import annotations

import json
from pathlib import Path

#: Field order of a ``needles.jsonl`` record.
FIELDS = ("needle", "arg1", "arg2", "language", "retrieval_question")

REFERENCE_NEEDLES: list[dict[str, str]] = [
    dict(zip(FIELDS, record))
    for record in (
        (
            "Hidden on Red Island is the Blue Gem.",
            "Red Island",
            "Blue Gem",
            "English",
            "What is hidden on Red Island? Please answer in the format 'The item hidden on Red Island is ______.'",
        ),
        (
            "Hidden on Green Island is the Gold Cup.",
            "Green Island",
            "Gold Cup",
            "English",
            "What is hidden on Green Island? Please answer in the format 'The item hidden on Green Island is ______.'",
        ),
        ("红岛上藏着蓝宝石。", "红岛", "蓝宝石", "Chinese", "红岛上藏着什么？请按照'红岛上藏着______。'的格式回答。"),
        ("绿岛上藏着金杯。", "绿岛", "金杯", "Chinese", "绿岛上藏着什么？请按照'绿岛上藏着______。'的格式回答。"),
    )
]
ENGLISH_NEEDLES = [needle for needle in REFERENCE_NEEDLES if needle["language"] == "English"]


def write_needles(path: Path, needles: list[dict[str, str]] = REFERENCE_NEEDLES) -> Path:
    """``needles`` as a ``needles.jsonl`` file (one JSON object a line, UTF-8)."""
    path.write_text("".join(json.dumps(needle, ensure_ascii=False) + "\n" for needle in needles), encoding="utf-8")
    return path
