"""Multi-needle reasoning (M-RS) needle chains: leak-free synthetic chains, or the reference JSON files.

A synthetic chain of ``k`` needles (2..5, from ``data/reasoning_needles.yaml``) links ``k`` invented entities:
needle 1 mentions the question's entity E0 and introduces E1, needle i mentions E(i-1) (introduced only by
needle i-1) and introduces E(i), and the last needle states the answer about E(k-1). The question composes the
hops ("When did the teacher of the author of The Lanterns of Velmora die?"), so only the full chain yields the
answer, and no real-world knowledge can: every name, title, place and date is invented and drawn by seed.

The reference data (``multi_needle_reasoning_{en,zh}.json``) is a JSON list of records with ``derivations``,
``derivation_count``, ``question`` and ``answer``; file records are kept verbatim (byte-exact needles).
"""

from __future__ import annotations

import json
import numbers
import os
import string
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.sources.pinned import read_user_file
from needlebench.tasks.names import normalize_language
from needlebench.yamlload import safe_load

__all__ = [
    "MAX_NEEDLES",
    "MIN_NEEDLES",
    "ReasoningNeedleSet",
    "choose_reasoning_set",
    "generate_reasoning_set",
    "load_reasoning_file",
]

MIN_NEEDLES = 2
MAX_NEEDLES = 5
SYNTHETIC_SOURCE = "needlebench-synthetic"
#: Fields every record of a reference reasoning file must have.
REQUIRED_FIELDS = {"derivations": list, "derivation_count": int, "question": str, "answer": str}
#: Redraws allowed when a drawn chain fails the leak checks (rare: invented words colliding).
_MAX_ATTEMPTS = 200


@dataclass(frozen=True)
class ReasoningNeedleSet:
    """One M-RS item: the needles in chain order, the question and its single answer.

    ``entities`` (synthetic sets only) are E0 .. E(k-1): E0 is named by the question and the first needle,
    E(i) by needles i-1 and i only. ``source`` is ``needlebench-synthetic`` or ``<file basename>#<index>``.
    """

    needles: tuple[str, ...]
    question: str
    answer: str
    language: str
    source: str
    entities: tuple[str, ...] = ()


# ----------------------------------------------------------------------------------------------- data


@cache
def reasoning_data() -> dict:
    """The parsed ``data/reasoning_needles.yaml``."""
    text = resources.files("needlebench").joinpath("data/reasoning_needles.yaml").read_text(encoding="utf-8")
    return safe_load(text)


def _check_count(num_needles: int) -> None:
    """M-RS chains have 2 to 5 needles."""
    if (
        isinstance(num_needles, bool)
        or not isinstance(num_needles, numbers.Integral)
        or not MIN_NEEDLES <= num_needles <= MAX_NEEDLES
    ):
        raise NeedlebenchError(
            f"reasoning needle count {num_needles!r} is not allowed; allowed: {MIN_NEEDLES} to {MAX_NEEDLES}"
        )


def _generator(seed: int) -> np.random.Generator:
    """A local numpy Generator for a non-negative integer seed."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise NeedlebenchError(f"seed {seed!r} is not allowed; allowed: a non-negative integer")
    return np.random.Generator(np.random.PCG64(int(seed)))


# ----------------------------------------------------------------------------------------------- synthetic


def _pick(gen: np.random.Generator, items: list):
    """One element of ``items``, drawn by ``gen``."""
    return items[int(gen.integers(len(items)))]


def invented_word(gen: np.random.Generator, data: dict, used: set[str]) -> str:
    """A fresh word of ``word_syllables`` syllables (capitalised when the syllables are Latin), not in ``used``."""
    low, high = data["word_syllables"]
    while True:
        count = int(gen.integers(low, high + 1))
        word = "".join(_pick(gen, data["syllables"]) for _ in range(count))
        word = word[:1].upper() + word[1:]
        if word not in used:
            used.add(word)
            return word


def fill_pattern(pattern: str, gen: np.random.Generator, data: dict, used: set[str], **fixed: str) -> str:
    """Fill a name pattern: ``{word}``/``{word2}`` get fresh invented words, ``fixed`` values are used as given,
    any other placeholder picks from ``pools``."""
    fields = [name for _, name, _, _ in string.Formatter().parse(pattern) if name]
    values: dict[str, str] = {}
    for field in fields:
        if field in fixed:
            values[field] = fixed[field]
        elif field.startswith("word"):
            values[field] = invented_word(gen, data, used)
        else:
            values[field] = str(_pick(gen, data["pools"][field]))
    return pattern.format(**values)


def make_answer(kind: str, gen: np.random.Generator, data: dict, used: set[str]) -> str:
    """An invented answer of a kind (date, year, village, river)."""
    low, high = data["years"]
    year = str(int(gen.integers(low, high + 1)))
    month = str(_pick(gen, data["months"]))
    day = str(int(gen.integers(1, 29)))
    return fill_pattern(data["answers"][kind], gen, data, used, year=year, month=month, day=day)


def draw_chain_kinds(gen: np.random.Generator, data: dict, num_needles: int) -> tuple[list[dict], dict]:
    """The link of every hop (``num_needles - 1`` of them) and the final fact, following entity kinds."""
    kind = _pick(gen, sorted({link["from"] for link in data["links"]}))
    links = []
    for _ in range(num_needles - 1):
        link = _pick(gen, [link for link in data["links"] if link["from"] == kind])
        links.append(link)
        kind = link["to"]
    fact = _pick(gen, [fact for fact in data["facts"] if fact["kind"] == kind])
    return links, fact


def compose_set(
    links: list[dict], fact: dict, entities: list[str], answer: str, data: dict, language: str
) -> ReasoningNeedleSet:
    """Needles and question of a chain whose entities and answer are drawn."""
    needles = [link["needle"].format(a=entities[i], b=entities[i + 1]) for i, link in enumerate(links)]
    needles.append(fact["needle"].format(a=entities[-1], answer=answer))
    first_kind = links[0]["from"] if links else fact["kind"]
    phrase = data["entities"][first_kind]["mention"].format(name=entities[0])
    for link in links:
        phrase = link["phrase"].format(x=phrase)
    question = fact["question"].format(x=phrase)
    return ReasoningNeedleSet(tuple(needles), question, answer, language, SYNTHETIC_SOURCE, tuple(entities))


def is_leak_free(item: ReasoningNeedleSet) -> bool:
    """True when only the full chain yields the answer.

    Entities and answer are distinct and none contains another; the question names E0 and neither another
    entity nor the answer; needle i names exactly E(i) and E(i+1) (the last: E(k-1) and the answer).
    """
    strings = [*item.entities, item.answer]
    for i, text in enumerate(strings):
        if any(i != j and text in other for j, other in enumerate(strings)):
            return False
    if [s for s in strings if s in item.question] != [item.entities[0]]:
        return False
    for i, needle in enumerate(item.needles):
        if [s for s in strings if s in needle] != strings[i : i + 2]:
            return False
    return True


def draw_reasoning_set(gen: np.random.Generator, num_needles: int, language: str) -> ReasoningNeedleSet:
    """One chain drawn by ``gen`` (not yet checked for leaks)."""
    data = reasoning_data()[language]
    links, fact = draw_chain_kinds(gen, data, num_needles)
    kinds = [link["from"] for link in links] + [fact["kind"]]
    used: set[str] = set()
    entities = [fill_pattern(data["entities"][kind]["name"], gen, data, used) for kind in kinds]
    answer = make_answer(fact["answer"], gen, data, used)
    return compose_set(links, fact, entities, answer, data, language)


def generate_reasoning_set(num_needles: int, language: str, seed: int) -> ReasoningNeedleSet:
    """A synthetic M-RS chain of ``num_needles`` needles, pinned by ``seed`` (redrawn until leak-free)."""
    _check_count(num_needles)
    code = normalize_language(language)
    gen = _generator(seed)
    for _ in range(_MAX_ATTEMPTS):
        item = draw_reasoning_set(gen, num_needles, code)
        if is_leak_free(item):
            return item
    raise NeedlebenchError(
        f"no leak-free {code} reasoning chain in {_MAX_ATTEMPTS} draws (seed {seed}); try another seed"
    )


# ----------------------------------------------------------------------------------------------- files


def _read_records(path: str) -> list:
    """The JSON list of a reasoning file; unreadable or malformed files raise a one-line error."""

    try:
        records = json.loads(read_user_file(path, "reasoning file", 64 * 1024 * 1024).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NeedlebenchError(f"cannot read reasoning file {path!r}: {error}") from error
    if not isinstance(records, list):
        raise NeedlebenchError(
            f"reasoning file {path!r} is not a JSON list; expected records with derivations, derivation_count, "
            "question, answer"
        )
    return records


def _check_record(path: str, index: int, record: object) -> dict:
    """A record with every required field of the right type; otherwise a one-line error naming file and field."""
    if not isinstance(record, dict):
        raise NeedlebenchError(f"reasoning file {path!r}: record {index} is not a JSON object")
    for field, kind in REQUIRED_FIELDS.items():
        if field not in record:
            raise NeedlebenchError(
                f"reasoning file {path!r}: record {index} has no {field!r} field; required: "
                f"{', '.join(REQUIRED_FIELDS)}"
            )
        value = record[field]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise NeedlebenchError(
                f"reasoning file {path!r}: record {index} field {field!r} is a {type(value).__name__}; "
                f"expected {kind.__name__}"
            )
    if len(record["derivations"]) != record["derivation_count"] or not record["derivations"]:
        raise NeedlebenchError(
            f"reasoning file {path!r}: record {index} has {len(record['derivations'])} derivations but "
            f"derivation_count {record['derivation_count']}; they must agree (at least 1)"
        )
    if not all(isinstance(needle, str) for needle in record["derivations"]):
        raise NeedlebenchError(
            f"reasoning file {path!r}: record {index} field 'derivations' holds non-strings; expected a list of "
            "sentences"
        )
    return record


@cache
def _load_counted(path: str, language: str) -> tuple[tuple[int, ReasoningNeedleSet], ...]:
    """Every record of a reference file as ``(derivation_count, set)``."""
    code = normalize_language(language)
    name = os.path.basename(path)
    counted = []
    for index, raw in enumerate(_read_records(path)):
        record = _check_record(path, index, raw)
        item = ReasoningNeedleSet(
            tuple(record["derivations"]), record["question"], record["answer"], code, f"{name}#{index}"
        )
        counted.append((record["derivation_count"], item))
    return tuple(counted)


def load_reasoning_file(path: str, language: str) -> list[ReasoningNeedleSet]:
    """The records of a reference ``multi_needle_reasoning_{en,zh}.json`` file, in file order, verbatim."""
    return [item for _, item in _load_counted(path, language)]


def choose_reasoning_set(num_needles: int, language: str, seed: int, path: str | None = None) -> ReasoningNeedleSet:
    """The M-RS set of a sample: synthetic (``path`` None) or a file record with ``derivation_count ==
    num_needles`` picked by ``seed``."""
    _check_count(num_needles)
    if path is None:
        return generate_reasoning_set(num_needles, language, seed)
    candidates = [item for count, item in _load_counted(path, language) if count == num_needles]
    if not candidates:
        raise NeedlebenchError(
            f"reasoning file {path!r} has no record with derivation_count {num_needles}; allowed: a file holding "
            f"records for each count {MIN_NEEDLES}..{MAX_NEEDLES}"
        )
    return candidates[int(_generator(seed).integers(len(candidates)))]
