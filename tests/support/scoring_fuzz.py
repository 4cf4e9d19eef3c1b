"""Generated model outputs for the scorer property test and the scoring benchmark (deterministic).

Kinds: random unicode (any code point, lone surrogates included), JSON fragments (truncated, repaired, wrong
types, both Counting-Stars keys), nested brackets and braces (``[[[[``, ``{{{{``, ``\\boxed{\\boxed{``), answer-like
texts in both languages and, once every `big_every` outputs, a 1 MB string.
"""

from __future__ import annotations

import numpy as np

_FRAGMENTS = [
    '{"little_penguin": [',
    '{"小企鹅":[',
    "]",
    "}",
    ",",
    "15",
    "-3",
    "1e309",
    "NaN",
    "null",
    "true",
    '"x"',
    "[",
    "{",
    '"little_penguin"',
    ":",
    "```json",
    "```",
    "\\boxed{",
    "Answer: ",
    "回答：",
    "The answer is ",
    "Ｂ",
    "A",
    "B",
    "C",
    "D",
    " ",
    "\n",
    "\u200b",
    "伦敦",
    "Sergei Prokofiev",
    "Stardust Shard",
    "★",
    "\\text{",
    "(",
    ")",
    "所以答案是：",
]


def _random_unicode(rng: np.random.Generator, size: int) -> str:
    points = rng.integers(0, 0x110000, size=size)
    return "".join(map(chr, points.tolist()))


def _fragments(rng: np.random.Generator, size: int) -> str:
    return "".join(_FRAGMENTS[i] for i in rng.integers(0, len(_FRAGMENTS), size=size))


def _nested(rng: np.random.Generator, depth: int) -> str:
    opener, closer = [("[", "]"), ("{", "}"), ("\\boxed{", "}"), ("(", ")"), ('{"little_penguin": [', "]}")][
        int(rng.integers(0, 5))
    ]
    closed = int(rng.integers(0, depth + 1))
    return opener * depth + str(int(rng.integers(0, 200))) + closer * closed


def _big(rng: np.random.Generator, kind: int) -> str:
    """A 1 MB (2**20 characters) output of one of four kinds."""
    megabyte = 1 << 20
    unit = [
        _random_unicode(rng, 4096),
        "{",
        '{"little_penguin": [' + ", ".join(map(str, range(200))) + "]} ",
        "[" * 1000 + "A" + "]" * 1000 + " 回答：Ｃ ",
    ][kind]
    return (unit * (megabyte // len(unit) + 1))[:megabyte]


def outputs(count: int, seed: int = 0, big_every: int = 2500) -> list[str]:
    """`count` generated outputs; every `big_every`-th is a 1 MB string (0: none)."""
    rng = np.random.default_rng(seed)
    result = []
    for i in range(count):
        if big_every and i % big_every == big_every - 1:
            result.append(_big(rng, (i // big_every) % 4))
            continue
        kind = i % 4
        size = int(rng.integers(0, 400))
        if kind == 0:
            result.append(_random_unicode(rng, size))
        elif kind == 1:
            result.append(_fragments(rng, size // 4))
        elif kind == 2:
            result.append(_nested(rng, int(rng.integers(0, 300))))
        else:
            result.append(_fragments(rng, 3) + _random_unicode(rng, size // 8) + _fragments(rng, 3))
    return result


def scorers():
    """(name, function of one output, (low, high)) for every scorer of the library; None is allowed where the
    scorer returns no answer (option extraction)."""
    from needlebench.evaluation.scoring import (
        counting_stars_score,
        extract_option,
        multi_retrieval_recall,
        open_answer_score,
        reasoning_reference_score,
        reasoning_strict_score,
        single_retrieval_score,
    )

    needle = "Hidden on Emerald Island is the legendary Stardust Shard."
    stars, wrong = [15, 117, 42, 69], [16, 116, 43, 70]
    names = ["Carol Adams", "David House", "Bob Smith", "Alice Brown"]
    return [
        ("single_retrieval", lambda p: single_retrieval_score(p, needle, "Stardust Shard"), (0, 100)),
        ("multi_retrieval", lambda p: multi_retrieval_recall(p, ["Stardust Shard", "伦敦", "15"]), (0, 100)),
        ("reasoning_reference_en", lambda p: reasoning_reference_score(p, "Sergei Prokofiev", "en"), (0, 100)),
        ("reasoning_reference_zh", lambda p: reasoning_reference_score(p, "伦敦国王学院", "zh"), (0, 100)),
        ("reasoning_strict", lambda p: reasoning_strict_score(p, "伦敦国王学院", "zh"), (0, 100)),
        ("atc_option", lambda p: extract_option(p, "ABCD", names=names), "ABCD"),
        ("atc_open", lambda p: open_answer_score(p, "Carol Adams"), (0, 100)),
        ("stars_acquisition_en", lambda p: counting_stars_score(p, stars, None, "acquisition", "en"), (0, 1)),
        ("stars_reasoning_zh", lambda p: counting_stars_score(p, stars, wrong, "reasoning", "zh"), (0, 1)),
    ]
