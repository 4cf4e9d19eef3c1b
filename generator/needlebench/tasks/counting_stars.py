"""Counting-Stars rows: multi-evidence acquisition and reasoning, English and Chinese, 32 to 1024 stars.

A sample is a haystack with M "star sentences" (``The little penguin counted 15 ★`` or, in the reasoning task,
a wrong count corrected in place), followed by ``"\n\n\n\n"`` and the question asking for the counts as JSON.
The texts are in ``data/counting_stars.yaml``.

Default build (one row per context length L, seed ``derive_seed(release_seed, config, L)``):

* haystack + star sentences are exactly L cl100k tokens (:func:`needlebench.tasks.placement.build_context`); the
  question follows the reference separator, and ``prompt_tokens`` is exact;
* star i (0-based) goes within 1 point of depth (i+1)/M of the haystack, on the best boundary there (sentence
  end first, word boundary last; :mod:`needlebench.tasks.placement`), so the last one closes the context. Every star
  has its own insertion point (placement with ``distinct=True``), so two stars are never put together;
  ``needle_boundaries`` records each star's boundary kind;
* the counts are distinct random integers in random order (:func:`draw_counts`), never a sorted or
  arithmetic run; reasoning wrong counts are the correct count +-1 and never equal any correct count.

``--compat counting-stars`` reproduces the reference generator (``gen_test_data.ipynb``): the fixed M=32 lists,
context sizes of ``int(0.8 L)`` space-split words (English) or ``int(0.7 L)`` characters (Chinese) of the
cleaned haystack, the reference's approximate insertion offsets and its newline-wrapped star strings. Token
counts on those rows are still real cl100k counts. Where the haystack is shorter than a context, it is cycled
(the reference would silently return a shorter context); ``corpus_cycles`` records it.

Haystacks are tokenised once per process (and cached on disk); every count here is made from corpus spans and
short inserted strings (:meth:`needlebench.sources.tokenized.TokenizedCorpus.count`), never by re-encoding a context."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.seeding import derive_seed, rng
from needlebench.sources.haystacks import window_start_hint
from needlebench.sources.tokenized import TokenizedCorpus
from needlebench.tasks.families.base import LANGUAGES, ConfigSpec
from needlebench.tasks.haystack import corpus_label, tokenized_corpus
from needlebench.tasks.placement import Context, NeedleRequest, build_context
from needlebench.tasks.schema import check_row
from needlebench.tasks.settings import HaystackSettings
from needlebench.yamlload import safe_load

__all__ = [
    "StarCell",
    "answer_json",
    "counting_stars_rows",
    "draw_counts",
    "place_stars",
    "question_separator",
    "question_text",
    "star_sentence",
    "star_tokens",
]


COMPAT_MODE = "counting-stars"


#: The `needle_boundaries` value of compat rows (stars at the reference's word/character offsets).
COMPAT_BOUNDARY = "compat"


# ---- texts ---------------------------------------------------------------------------------------------------
@cache
def star_data() -> dict:
    """The parsed ``data/counting_stars.yaml`` (sentences, questions, count rules, compat constants)."""
    text = resources.files("needlebench").joinpath("data/counting_stars.yaml").read_text(encoding="utf-8")
    return safe_load(text)


def check_task(task: str) -> str:
    """A Counting-Stars task: one with star sentences in ``data/counting_stars.yaml`` (acquisition, reasoning)."""
    tasks = tuple(star_data()["stars"])
    if task not in tasks:
        raise NeedlebenchError(f"unknown Counting-Stars task {task!r}; allowed: {', '.join(tasks)}")
    return task


def check_language(language: str) -> str:
    if language not in LANGUAGES:
        raise NeedlebenchError(f"unknown language {language!r}; allowed: {', '.join(LANGUAGES)}")
    return language


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise NeedlebenchError(f"{name} {value!r} is not a star count; allowed: integers from 1 up")
    return int(value)


def star_sentence(task: str, language: str, correct: int, wrong: int | None = None, *, wrapped: bool = False) -> str:
    """The star sentence of one star (Table 1 / reference strings), without the reference's surrounding
    newlines unless `wrapped`. Reasoning sentences need the wrong count; acquisition sentences take none."""
    template = star_data()["stars"][check_task(task)][check_language(language)]
    correct = _check_count("correct count", correct)
    if task == "reasoning":
        if wrong is None:
            raise NeedlebenchError("a reasoning star sentence needs a wrong count; allowed: an integer from 1 up")
        template = template.replace("{wrong}", str(_check_count("wrong count", wrong)))
    elif wrong is not None:
        raise NeedlebenchError(f"wrong count {wrong!r} given for an acquisition star; allowed: None")
    sentence = template.replace("{correct}", str(correct))
    if wrapped:
        wrapper = star_data()["star_wrapper"]
        sentence = wrapper + sentence + wrapper
    return sentence


def question_text(task: str, language: str) -> str:
    """The question of a task and language, exactly as the reference asks it (without the separator)."""
    return star_data()["questions"][check_task(task)][check_language(language)]


def question_separator() -> str:
    """What goes between the context and the question (the reference's four newlines)."""
    return star_data()["question_separator"]


def answer_json(counts: Sequence[int], language: str) -> str:
    """The reference answer as the JSON object the question asks for, e.g. ``{"little_penguin": [15, 117]}``."""
    key = star_data()["answer_keys"][check_language(language)]
    return json.dumps({key: [int(count) for count in counts]}, ensure_ascii=False)


# ---- counts --------------------------------------------------------------------------------------------------
def _is_regular(values: Sequence[int]) -> bool:
    """True for runs a model could continue without reading: sorted either way or with a constant step."""
    if len(values) < 3:
        return False
    steps = np.diff(np.asarray(values, dtype=np.int64))
    return bool(np.all(steps > 0) or np.all(steps < 0) or np.all(steps == steps[0]))


def _distinct_draw(generator: np.random.Generator, count: int, pool: int, gap: int) -> list[int]:
    """`count` distinct integers from 1..pool, pairwise at least `gap` apart, in random order (uniform over
    such sets: draw from a pool shrunk by the gaps, then spread the sorted draw back out)."""
    span = pool - (gap - 1) * (count - 1)
    base = np.sort(generator.choice(span, size=count, replace=False)) + 1
    values = base + (gap - 1) * np.arange(count)
    return [int(value) for value in generator.permutation(values)]


def _wrong_counts(generator: np.random.Generator, correct: Sequence[int]) -> list[int]:
    """Per star the correct count +-1 (sign from the generator; the other sign when that one is below 1, a
    correct count or another star's wrong count)."""
    taken = set(correct)
    wrong: list[int] = []
    for value, sign in zip(correct, generator.choice((-1, 1), size=len(correct))):
        options = [value + int(sign), value - int(sign)]
        choice = next((r for r in options if r >= 1 and r not in taken), None)
        if choice is None:
            raise NeedlebenchError(
                f"correct count {value} leaves no free wrong count; raise counts.reasoning_min_gap to 3 or more"
            )
        taken.add(choice)
        wrong.append(choice)
    return wrong


def draw_counts(num_stars: int, seed: int, task: str) -> tuple[list[int], list[int]]:
    """Correct and wrong counts of one sample: `num_stars` distinct integers from 1..max(128, 4 M) in random,
    irregular order; for reasoning also one wrong count per star (correct +-1, never a correct count, all
    distinct), else an empty list. Deterministic in `seed`."""
    check_task(task)
    num_stars = _check_count("number of stars", num_stars)
    rules = star_data()["counts"]
    pool = max(int(rules["pool_min"]), int(rules["pool_per_star"]) * num_stars)
    gap = int(rules["reasoning_min_gap"]) if task == "reasoning" else 1
    if pool - (gap - 1) * (num_stars - 1) < num_stars:
        raise NeedlebenchError(f"{num_stars} stars do not fit in counts 1..{pool} {gap} apart; lower the gap")
    generator = rng(seed, "counts", task)
    correct = _distinct_draw(generator, num_stars, pool, gap)
    for _ in range(int(rules["max_redraws"])):
        if not _is_regular(correct):
            break
        correct = _distinct_draw(generator, num_stars, pool, gap)
    wrong = _wrong_counts(generator, correct) if task == "reasoning" else []
    return correct, wrong


# ---- cells ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StarCell:
    """One row of a config: its length, seed, counts and the star sentences as inserted."""

    length: int
    seed: int
    correct: tuple[int, ...]
    wrong: tuple[int, ...]
    sentences: tuple[str, ...]


def _random_cell(spec: ConfigSpec, settings: HaystackSettings, length: int) -> StarCell:
    seed = derive_seed(settings.release_seed, spec.name, length)
    correct, wrong = draw_counts(spec.stars, seed, spec.variant)
    wrongs: list[int | None] = list(wrong) if wrong else [None] * len(correct)
    sentences = tuple(star_sentence(spec.variant, spec.language, c, w) for c, w in zip(correct, wrongs))
    return StarCell(length, seed, tuple(correct), tuple(wrong), sentences)


# ---- validation ----------------------------------------------------------------------------------------------
def check_spec(spec: ConfigSpec) -> None:
    """`spec` is a Counting-Stars config (it has a star count) of a known task, language, size and star count."""
    if spec.stars is None:
        raise NeedlebenchError(f"config {spec.name!r} is not a Counting-Stars config; allowed: counting_stars_*")
    check_task(spec.variant)
    check_language(spec.language)
    family = spec.family_object
    if spec.size not in family.lengths_by_size:
        raise NeedlebenchError(
            f"Counting-Stars size {spec.size!r} of {spec.name} is unknown; allowed: {', '.join(family.lengths_by_size)}"
        )
    if spec.stars not in family.star_counts:
        raise NeedlebenchError(
            f"M={spec.stars} stars is not allowed ({spec.name}); allowed M: {', '.join(map(str, family.star_counts))}"
        )


def star_tokens(corpus: TokenizedCorpus, sentences: Iterable[str]) -> int:
    """Tokens placement reserves for the star sentences (each counted as joined after a newline)."""
    return sum(corpus.encode_count("\n" + sentence) for sentence in sentences)


def place_stars(spec: ConfigSpec, corpus: TokenizedCorpus, cell: StarCell) -> Context:
    """The context of a cell: exactly `cell.length` tokens, star i within 1 point of depth (i+1)/M on the best
    boundary there (:mod:`needlebench.tasks.placement`), every star on its own insertion point, the last closing
    the context."""
    count = len(cell.sentences)
    requests = [NeedleRequest(sentence, 100.0 * (i + 1) / count) for i, sentence in enumerate(cell.sentences)]
    return build_context(
        corpus, cell.length, requests, window_start_hint(corpus, cell.length, cell.seed), distinct=True
    )


# ---- rows ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """What a row records about its rendered prompt."""

    prompt: str
    prompt_tokens: int
    haystack_tokens: int
    depths: list[float]
    cycles: int
    corpus: str
    compat: str
    boundaries: list[str]


def star_row(spec: ConfigSpec, settings: HaystackSettings, cell: StarCell, layout: Layout) -> dict:
    row = {
        "id": f"{spec.name}-L{cell.length}",
        "task": spec.task_label,
        "config": spec.name,
        "language": spec.language,
        "size": spec.size,
        "context_length": cell.length,
        "depth_percent": None,
        "needle_depths": [float(depth) for depth in layout.depths],
        "needle_boundaries": list(layout.boundaries),
        "prompt": layout.prompt,
        "question": question_text(spec.variant, spec.language),
        "answer": answer_json(cell.correct, spec.language),
        "keywords": [str(count) for count in cell.correct],
        "needles": list(cell.sentences),
        "repeat": 0,
        "seed": cell.seed,
        "corpus": layout.corpus,
        "tokenizer": settings.tokenizer,
        "prompt_tokens": layout.prompt_tokens,
        "haystack_tokens": layout.haystack_tokens,
        "version": __version__,
        "buffer": 0,
        "task_variant": spec.variant,
        "num_stars": len(cell.correct),
        "star_counts": list(cell.correct),
        "wrong_counts": list(cell.wrong),
        "corpus_cycles": layout.cycles,
        "compat": layout.compat,
    }
    check_row(spec.schema_family, row)
    return row


def _default_rows(
    spec: ConfigSpec, settings: HaystackSettings, corpus: TokenizedCorpus, cells: Sequence[StarCell]
) -> Iterator[dict]:
    tail = question_separator() + question_text(spec.variant, spec.language)
    label = corpus_label(corpus)
    for cell in cells:
        context = place_stars(spec, corpus, cell)
        if context.tokens != cell.length:
            raise NeedlebenchError(
                f"{spec.name}: the context at length {cell.length} came out at {context.tokens} tokens; "
                "it must be exact"
            )
        prompt, prompt_tokens = context.framed("", tail)
        layout = Layout(
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            haystack_tokens=context.tokens,
            depths=context.actual_depths,
            cycles=context.cycles,
            corpus=label,
            compat="",
            boundaries=context.boundaries,
        )
        yield star_row(spec, settings, cell, layout)


def counting_stars_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...] | None = None, utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of a Counting-Stars config, one per context length (only `lengths` when given), in grid order.

    The config and the lengths are checked before the first row. (The reference construction is
    :func:`needlebench.compat.counting_stars.counting_stars_rows`.)"""
    check_spec(spec)
    chosen = spec.select_lengths(lengths)
    corpus = tokenized_corpus(spec, settings)
    return _default_rows(spec, settings, corpus, [_random_cell(spec, settings, length) for length in chosen])
