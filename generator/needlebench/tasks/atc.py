"""Ancestral Trace Challenge (ATC): kinship chains, multiple choice with circular evaluation, few-shot prompts.

An item is a chain of N distinct names, eldest first, and N-1 relation sentences: sentence i says that
``names[i]`` is an elder relative of ``names[i+1]`` (one of the 8 templates with one of the 10 relation terms of
``data/atc.yaml``). The sentences are shuffled; the question asks for the eldest relative the last person can
trace back to, and the answer is ``names[0]``. Our items join the sentences with the language's
``sentence_separator`` (a space in English, nothing in Chinese); the reference joins them with nothing.

* Multiple-choice configs (direct, reasoning, extended): the options are ``names[0:4]`` (padded with other
  names when the chain is shorter), the answer is always option A before rotation, and every item becomes 4
  rows with the options rotated ABCD, BCDA, CDAB, DABC. The prompt is a 4-shot dialogue flattened to one
  text (shots are generated chains from a fixed seed, never test items) ending in the row's question.
* Open configs: one row per item, the reference open-ended question block, the answer is the eldest name.
* The reference construction (``--compat opencompass``: the reference ``atc_choice`` items with a local
  ``random.Random(repeat)`` and the reference config's few-shot dialogues) is
  :mod:`needlebench.compat.opencompass_atc`; it renders its rows with :func:`item_rows` as this module does.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.seeding import RELEASE_SEED, derive_seed
from needlebench.sources.tokenizer import (
    DEFAULT_TOKENIZER,
    TextTokenizer,
    get_tokenizer,
)
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.names import (
    builtin_names,
    distinct_names,
    load_names,
    names_corpus_label,
    normalize_language,
)
from needlebench.tasks.schema import check_row, columns_for
from needlebench.tasks.settings import HaystackSettings
from needlebench.yamlload import safe_load

__all__ = [
    "AtcItem",
    "RowContext",
    "atc_data",
    "atc_item",
    "atc_rows",
    "check_needle_count",
    "choice_question",
    "few_shot_prompt",
    "item_rows",
    "iter_atc_rows",
    "open_question",
    "prompt_style",
    "relation_sentence",
    "rotate_options",
    "too_few_names",
]

LETTERS = "ABCD"
#: The option rotations (circular evaluation): each shows the options starting from another letter.
ROTATIONS = tuple(LETTERS[i:] + LETTERS[:i] for i in range(len(LETTERS)))
#: Prompt style of each ATC config variant.
PROMPT_STYLES = {"direct": "direct", "reasoning": "reasoning", "extended": "direct", "open": "open"}
#: Seed label of the few-shot chains (distinct from every config name, so never a test item's seed).
SHOT_SEED_LABEL = "atc-few-shot"


@dataclass(frozen=True)
class AtcItem:
    """One ATC item.

    ``names`` is the chain, eldest first; ``sentences[i]`` relates ``names[i]`` (elder) and ``names[i+1]``;
    ``order`` lists sentence indices in prompt order; ``story`` is the shuffled relation text; ``question`` is
    ``story`` plus the multiple-choice question frame (no options); ``options`` are the 4 unrotated options,
    answer first (empty for open-ended reference items).
    """

    language: str
    names: tuple[str, ...]
    sentences: tuple[str, ...]
    order: tuple[int, ...]
    story: str
    question: str
    options: tuple[str, ...]

    @property
    def answer(self) -> str:
        """The eldest relative (the chain's first name)."""
        return self.names[0]

    @property
    def last_person(self) -> str:
        """The person the question asks about (the chain's last name)."""
        return self.names[-1]

    @property
    def needles(self) -> tuple[str, ...]:
        """The relation sentences in prompt order."""
        return tuple(self.sentences[index] for index in self.order)


# ----------------------------------------------------------------------------------------------- data


@cache
def atc_data() -> dict:
    """The parsed ``data/atc.yaml`` (templates, relation terms, question and few-shot frames per language)."""
    text = resources.files("needlebench").joinpath("data/atc.yaml").read_text(encoding="utf-8")
    return safe_load(text)


def _lang(language: str) -> dict:
    """The ``atc.yaml`` section of a language."""
    return atc_data()[normalize_language(language)]


def relation_sentence(template: str, elder: str, younger: str, term: str) -> str:
    """One relation sentence: ``template`` filled with the elder (A), the younger (B) and the relation term."""
    return template.format(A=elder, B=younger, relationship=term)


def question_text(story: str, last_person: str, language: str, *, open_ended: bool = False) -> str:
    """``story`` + ``' '`` + the reference question frame (multiple choice or open-ended)."""
    frame = _lang(language)["open_question" if open_ended else "question"]
    return story + " " + frame.format(last_person=last_person)


def rotate_options(options: Sequence[str], rotation: str) -> tuple[tuple[str, ...], str]:
    """Options in the displayed order of a rotation (``BCDA`` shows original B first) and the answer's letter.

    The answer is the original option A, so its letter is the position of ``A`` in the rotation.
    """
    if rotation not in ROTATIONS:
        raise NeedlebenchError(f"unknown ATC rotation {rotation!r}; allowed: {', '.join(ROTATIONS)}")
    displayed = tuple(options[LETTERS.index(letter)] for letter in rotation)
    return displayed, LETTERS[rotation.index("A")]


def options_block(options: Sequence[str]) -> str:
    """The reference option block: ``"A. x\\nB. y\\nC. z\\nD. w\\n"``."""
    return "".join(f"{letter}. {option}\n" for letter, option in zip(LETTERS, options))


def choice_question(item: AtcItem, rotation: str) -> str:
    """A row's multiple-choice question: the item question, stripped, ``'\\n'`` and the rotated option block."""
    displayed, _ = rotate_options(item.options, rotation)
    return item.question.strip() + "\n" + options_block(displayed)


def open_question(item: AtcItem) -> str:
    """The open-ended prompt: the story and the reference open-ended question block."""
    return question_text(item.story, item.last_person, item.language, open_ended=True)


# ----------------------------------------------------------------------------------------------- items


def check_needle_count(num_needles: int) -> None:
    """ATC chains need at least two names (one relation sentence)."""
    if isinstance(num_needles, bool) or not isinstance(num_needles, numbers.Integral) or num_needles < 2:
        raise NeedlebenchError(f"ATC needle count {num_needles!r} is not allowed; allowed: an integer of at least 2")


def too_few_names(needed: int, available: int, language: str) -> NeedlebenchError:
    """The error for a names list too short for a chain."""
    return NeedlebenchError(
        f"ATC needs {needed} distinct {language} names but the names list has only {available}; "
        "use a longer names file or fewer needles"
    )


def atc_item(num_needles: int, language: str, seed: int, names: Sequence[str]) -> AtcItem:
    """One ATC item drawn with a local numpy Generator seeded by ``seed`` from ``names`` (distinct names).

    Draw order: the chain (``num_needles`` distinct names), then a template and a relation term per link, then
    the shuffle of the sentences, then (chains shorter than 4) the padding options from the other names.
    """
    check_needle_count(num_needles)
    data = _lang(language)
    needed = max(num_needles, len(LETTERS))
    if len(names) < needed:
        raise too_few_names(needed, len(names), language)
    gen = np.random.Generator(np.random.PCG64(seed))
    picked = gen.choice(len(names), size=num_needles, replace=False)
    chain = tuple(names[int(index)] for index in picked)
    templates, terms = data["templates"], data["relationship_terms"]
    template_ids = gen.integers(0, len(templates), size=num_needles - 1)
    term_ids = gen.integers(0, len(terms), size=num_needles - 1)
    sentences = tuple(
        relation_sentence(templates[t], chain[i], chain[i + 1], terms[r])
        for i, (t, r) in enumerate(zip(template_ids.tolist(), term_ids.tolist()))
    )
    order = tuple(int(index) for index in gen.permutation(num_needles - 1))
    options = list(chain[: len(LETTERS)])
    if len(options) < len(LETTERS):
        used = set(picked.tolist())
        others = [index for index in range(len(names)) if index not in used]
        extra = gen.choice(len(others), size=len(LETTERS) - len(options), replace=False)
        options += [names[others[int(index)]] for index in extra]
    story = data["sentence_separator"].join(sentences[index] for index in order)
    question = question_text(story, chain[-1], language)
    return AtcItem(normalize_language(language), chain, sentences, order, story, question, tuple(options))


# ----------------------------------------------------------------------------------------------- prompts


def few_shot_prompt(turns: Sequence[tuple[str, str]], question: str, language: str) -> str:
    """The few-shot dialogue as one text: each ``(question, answer)`` shot, then the final question."""
    frame = _lang(language)["prompt"]
    shots = "".join(
        frame["human"].format(question=shot_question) + shot_answer + frame["turn_separator"]
        for shot_question, shot_answer in turns
    )
    return shots + frame["human"].format(question=question)


def shot_answer(item: AtcItem, letter: str, style: str) -> str:
    """A shot's answer: ``Answer: X`` (direct) or the chain walked from the last person upward (reasoning)."""
    frame = _lang(item.language)["prompt"]
    if style == "direct":
        return frame["direct_answer"].format(letter=letter)
    steps = "\n".join(frame["reasoning_step"].format(sentence=sentence) for sentence in reversed(item.sentences))
    return frame["reasoning_answer"].format(
        steps=steps, last_person=item.last_person, eldest=item.answer, letter=letter
    )


@cache
def few_shot_items(language: str, release_seed: int = RELEASE_SEED) -> tuple[tuple[AtcItem, str], ...]:
    """The few-shot chains of a language and their rotations: built-in names, a fixed seed per shot, each shot
    drawing from the names no earlier shot used."""
    code = normalize_language(language)
    spec = _lang(code)["shots"]
    pool = list(builtin_names(code))
    shots = []
    for index, (count, rotation) in enumerate(zip(spec["needle_counts"], spec["rotations"])):
        item = atc_item(count, code, derive_seed(release_seed, SHOT_SEED_LABEL, code, index), pool)
        used = set(item.names) | set(item.options)
        pool = [name for name in pool if name not in used]
        shots.append((item, rotation))
    return tuple(shots)


def few_shot_names(language: str, release_seed: int = RELEASE_SEED) -> frozenset[str]:
    """Every name shown in the few-shot chains (kept out of the test items)."""
    return frozenset(name for item, _ in few_shot_items(language, release_seed) for name in item.names + item.options)


def generated_turns(language: str, style: str, release_seed: int = RELEASE_SEED) -> list[tuple[str, str]]:
    """The 4 generated ``(question, answer)`` shots of a language and prompt style (direct or reasoning)."""
    turns = []
    for item, rotation in few_shot_items(language, release_seed):
        _, letter = rotate_options(item.options, rotation)
        turns.append((choice_question(item, rotation), shot_answer(item, letter, style)))
    return turns


# ----------------------------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class RowContext:
    """Everything a row needs besides its item."""

    spec: ConfigSpec
    style: str
    turns: tuple[tuple[str, str], ...]
    corpus: str
    version: str
    compat: str
    tokenizer: TextTokenizer

    @property
    def columns(self) -> tuple[str, ...]:
        """Row columns in schema order."""
        return tuple(columns_for(self.spec.schema_family))


def prompt_style(spec: ConfigSpec) -> str:
    """The prompt style of a v1 ATC config (by its variant); any other config is an error."""
    if spec.variant not in PROMPT_STYLES:
        raise NeedlebenchError(
            f"config {spec.name!r} is not an ATC config; allowed: atc_en, atc_zh and their _reasoning, _512, "
            "_open variants"
        )
    return PROMPT_STYLES[spec.variant]


def _base_row(item: AtcItem, ctx: RowContext, num_needles: int, repeat: int, seed: int, haystack_tokens: int) -> dict:
    """The columns every row of an item shares."""
    return {
        "task": ctx.spec.task_label,
        "config": ctx.spec.name,
        "language": ctx.spec.language,
        "size": None,
        "depth_percent": None,
        "needle_depths": [],
        "keywords": [item.answer],
        "needles": list(item.needles),
        "repeat": repeat,
        "seed": seed,
        "corpus": ctx.corpus,
        "tokenizer": DEFAULT_TOKENIZER,
        "haystack_tokens": haystack_tokens,
        "version": ctx.version,
        "num_needles": num_needles,
        "item_id": f"{ctx.spec.name}-n{num_needles}-r{repeat}",
        "prompt_style": ctx.style,
        "compat": ctx.compat,
    }


def _finish(row: dict, prompt: str, ctx: RowContext) -> dict:
    """Add the prompt and its token count (counted once), in schema column order."""
    tokens = ctx.tokenizer.count(prompt)
    row.update(prompt=prompt, context_length=tokens, prompt_tokens=tokens)
    ordered = {name: row[name] for name in ctx.columns}
    check_row(ctx.spec.schema_family, ordered)
    return ordered


def item_rows(item: AtcItem, ctx: RowContext, num_needles: int, repeat: int, seed: int) -> list[dict]:
    """The rows of one item: 4 rotations (multiple choice) or 1 row (open)."""
    haystack_tokens = ctx.tokenizer.count(item.story)
    base = _base_row(item, ctx, num_needles, repeat, seed, haystack_tokens)
    if ctx.style == "open":
        prompt = open_question(item)
        row = {
            **base,
            "id": base["item_id"],
            "question": prompt,
            "answer": item.answer,
            "rotation": "",
            "options": [],
            "answer_letter": "",
        }
        return [_finish(row, prompt, ctx)]
    rows = []
    for rotation in ctx.spec.family_object.rotations:
        displayed, letter = rotate_options(item.options, rotation)
        question = choice_question(item, rotation)
        row = {
            **base,
            "id": f"{base['item_id']}-{rotation}",
            "question": question,
            "answer": letter,
            "rotation": rotation,
            "options": list(displayed),
            "answer_letter": letter,
        }
        rows.append(_finish(row, few_shot_prompt(ctx.turns, question, item.language), ctx))
    return rows


def iter_atc_rows(
    spec: ConfigSpec,
    *,
    release_seed: int = RELEASE_SEED,
    version: str = __version__,
    names_path: str | None = None,
) -> Iterator[dict]:
    """Rows of a v1 ATC config (keys exactly its schema's columns), needle count outer, repeat inner.

    Seeds: ``derive_seed(release_seed, config, num_needles, repeat)`` per item."""
    style = prompt_style(spec)
    language = spec.language
    all_names = load_names(names_path, language)
    tokenizer = get_tokenizer()
    turns = () if style == "open" else tuple(generated_turns(language, style, release_seed))
    reserved = few_shot_names(language, release_seed)
    pool = [name for name in distinct_names(all_names) if name not in reserved]
    ctx = RowContext(spec, style, turns, names_corpus_label(names_path), version, "", tokenizer)
    for num_needles in spec.needle_counts:
        for repeat in range(spec.repeats):
            seed = derive_seed(release_seed, spec.name, num_needles, repeat)
            item = atc_item(num_needles, language, seed, pool)
            yield from item_rows(item, ctx, num_needles, repeat, seed)


def atc_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...] = (), utf8_prompts: bool = False
) -> Iterator[dict]:
    """The family's default generator: ATC reads the release seed and the names list (`settings.needles`); it
    has no context lengths and gives text prompts."""
    return iter_atc_rows(spec, release_seed=settings.release_seed, names_path=settings.needles)
