"""Counting-Stars rows: multi-evidence acquisition and reasoning, English and Chinese, 32 to 1024 stars.

A sample is a haystack with M "star sentences" (``The little penguin counted 15 ★`` or, in the reasoning task,
a wrong count corrected in place), followed by ``"\\n\\n\\n\\n"`` and the question asking for the counts as JSON.
The texts are in ``data/counting_stars.yaml``.

Default build (one row per context length L, seed ``derive_seed(release_seed, config, L)``):

* haystack + star sentences are exactly L cl100k tokens (:func:`needlebench.placement.build_context`); the
  question follows the reference separator, and ``prompt_tokens`` is exact;
* star i (0-based) goes within 1 point of depth (i+1)/M of the haystack, on the best boundary there (sentence
  end first, word boundary last; :mod:`needlebench.placement`), so the last one closes the context. Every star
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
short inserted strings (:meth:`needlebench.tokenized.TokenizedCorpus.count`), never by re-encoding a context.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np

from . import __version__
from .corpus import Corpus, read_jsonl_documents, read_text_file
from .errors import NeedlebenchError
from .grid import (
    COUNTING_STARS_LENGTHS,
    COUNTING_STARS_TASKS,
    LANGUAGES,
    STAR_COUNTS,
    ConfigSpec,
)
from .haystack_tasks import corpus_label
from .haystacks import corpus_for, tokenized_corpus, window_start_hint
from .options import BuildOptions
from .placement import Context, NeedleRequest, build_context
from .schema import check_row
from .seeding import derive_seed, rng
from .tokenized import TokenizedCorpus, tokenize_corpus
from .tokenizer import TiktokenTokenizer, get_tokenizer
from .yamlload import safe_load

__all__ = [
    "StarCell",
    "answer_json",
    "compat_counts",
    "compat_haystack_text",
    "counting_stars_rows",
    "draw_counts",
    "place_stars",
    "question_separator",
    "question_text",
    "star_sentence",
    "star_tokens",
]

FAMILY = "counting_stars"
COMPAT_MODE = "counting-stars"
#: The `needle_boundaries` value of compat rows (stars at the reference's word/character offsets).
COMPAT_BOUNDARY = "compat"


# ---- texts ---------------------------------------------------------------------------------------------------
@cache
def star_data() -> dict:
    """The parsed ``data/counting_stars.yaml`` (sentences, questions, count rules, compat constants)."""
    text = resources.files("needlebench").joinpath("data/counting_stars.yaml").read_text(encoding="utf-8")
    return safe_load(text)


def _check_task(task: str) -> str:
    if task not in COUNTING_STARS_TASKS:
        raise NeedlebenchError(
            f"unknown Counting-Stars task {task!r}; allowed: {', '.join(COUNTING_STARS_TASKS)}"
        )
    return task


def _check_language(language: str) -> str:
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
    template = star_data()["stars"][_check_task(task)][_check_language(language)]
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
    return star_data()["questions"][_check_task(task)][_check_language(language)]


def question_separator() -> str:
    """What goes between the context and the question (the reference's four newlines)."""
    return star_data()["question_separator"]


def answer_json(counts: Sequence[int], language: str) -> str:
    """The reference answer as the JSON object the question asks for, e.g. ``{"little_penguin": [15, 117]}``."""
    key = star_data()["answer_keys"][_check_language(language)]
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
    _check_task(task)
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


def _random_cell(spec: ConfigSpec, options: BuildOptions, length: int) -> StarCell:
    seed = derive_seed(options.release_seed, spec.name, length)
    correct, wrong = draw_counts(spec.stars, seed, spec.variant)
    wrongs: list[int | None] = list(wrong) if wrong else [None] * len(correct)
    sentences = tuple(star_sentence(spec.variant, spec.language, c, w) for c, w in zip(correct, wrongs))
    return StarCell(length, seed, tuple(correct), tuple(wrong), sentences)


def compat_counts(task: str) -> tuple[list[int], list[int]]:
    """The reference's fixed M=32 lists: correct counts and (reasoning) wrong counts, else an empty list."""
    compat = star_data()["compat"]
    correct = [int(value) for value in compat["a_stars"]]
    if _check_task(task) == "acquisition":
        return correct, []
    return correct, [a + 1 if sign == "+" else a - 1 for a, sign in zip(correct, compat["r_signs"])]


def _compat_cell(spec: ConfigSpec, options: BuildOptions, length: int) -> StarCell:
    correct, wrong = compat_counts(spec.variant)
    wrongs: list[int | None] = list(wrong) if wrong else [None] * len(correct)
    sentences = tuple(
        star_sentence(spec.variant, spec.language, c, w, wrapped=True) for c, w in zip(correct, wrongs)
    )
    return StarCell(length, derive_seed(options.release_seed, spec.name, length), tuple(correct), tuple(wrong), sentences)


# ---- validation ----------------------------------------------------------------------------------------------
def _check_spec(spec: ConfigSpec) -> None:
    if spec.family != FAMILY:
        raise NeedlebenchError(f"config {spec.name!r} is not a Counting-Stars config; allowed: counting_stars_*")
    _check_task(spec.variant)
    _check_language(spec.language)
    if spec.size not in COUNTING_STARS_LENGTHS:
        raise NeedlebenchError(
            f"Counting-Stars size {spec.size!r} of {spec.name} is unknown; allowed: {', '.join(COUNTING_STARS_LENGTHS)}"
        )
    if spec.stars not in STAR_COUNTS:
        raise NeedlebenchError(
            f"M={spec.stars} stars is not allowed ({spec.name}); allowed M: {', '.join(map(str, STAR_COUNTS))}"
        )


def _check_options(spec: ConfigSpec, options: BuildOptions) -> None:
    if options.compat not in (None, COMPAT_MODE):
        raise NeedlebenchError(f"compat mode {options.compat} does not apply to {spec.name}; use --compat {COMPAT_MODE}")
    if options.question_position != "end":
        raise NeedlebenchError(
            f"question position {options.question_position!r} is not supported by {spec.name}; "
            "Counting-Stars asks after the context (allowed: end)"
        )
    if options.compat == COMPAT_MODE and spec.stars != star_data()["compat"]["stars"]:
        raise NeedlebenchError(
            f"compat mode {COMPAT_MODE} has fixed star lists only for M={star_data()['compat']['stars']}; "
            f"{spec.name} has M={spec.stars}"
        )


# ---- default build: slots and placement ----------------------------------------------------------------------
def star_tokens(corpus: TokenizedCorpus, sentences: Iterable[str]) -> int:
    """Tokens placement reserves for the star sentences (each counted as joined after a newline)."""
    return sum(corpus.encode_count("\n" + sentence) for sentence in sentences)


def place_stars(spec: ConfigSpec, corpus: TokenizedCorpus, cell: StarCell) -> Context:
    """The context of a cell: exactly `cell.length` tokens, star i within 1 point of depth (i+1)/M on the best
    boundary there (:mod:`needlebench.placement`), every star on its own insertion point, the last closing
    the context."""
    count = len(cell.sentences)
    requests = [NeedleRequest(sentence, 100.0 * (i + 1) / count) for i, sentence in enumerate(cell.sentences)]
    return build_context(corpus, cell.length, requests, window_start_hint(corpus, cell.length, cell.seed), distinct=True)


# ---- rows ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Layout:
    """What a row records about its rendered prompt."""

    prompt: str
    prompt_tokens: int
    haystack_tokens: int
    depths: list[float]
    cycles: int
    corpus: str
    compat: str
    boundaries: list[str]


def _row(spec: ConfigSpec, options: BuildOptions, cell: StarCell, layout: _Layout) -> dict:
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
        "tokenizer": options.tokenizer,
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
    check_row(FAMILY, row)
    return row


def _default_rows(
    spec: ConfigSpec, options: BuildOptions, corpus: TokenizedCorpus, cells: Sequence[StarCell]
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
        layout = _Layout(
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            haystack_tokens=context.tokens,
            depths=context.actual_depths,
            cycles=context.cycles,
            corpus=label,
            compat="",
            boundaries=context.boundaries,
        )
        yield _row(spec, options, cell, layout)


def counting_stars_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None = None
) -> Iterator[dict]:
    """Rows of a Counting-Stars config, one per context length (only `lengths` when given), in grid order.

    Inputs are checked before the first row: the config, options, lengths and (default build) whether every
    length of the config can give each star its own sentence boundary."""
    _check_spec(spec)
    _check_options(spec, options)
    chosen = spec.select_lengths(lengths)
    if options.compat == COMPAT_MODE:
        haystack = _compat_haystack(
            options.haystack(spec.language), spec.language, options.tokenizer, _compat_units(spec, max(spec.lengths))
        )
        return _compat_rows(spec, options, haystack, [_compat_cell(spec, options, length) for length in chosen])
    corpus = tokenized_corpus(spec, options)
    return _default_rows(spec, options, corpus, [_random_cell(spec, options, length) for length in chosen])


# ---- compat: the reference construction ----------------------------------------------------------------------
#: The original's regex class lists ASCII punctuation with `\]` as an escaped bracket: backslash is kept.
_ZH_DELETE = str.maketrans("", "", string.punctuation.replace("\\", "") + string.ascii_letters)


def compat_haystack_text(documents: Iterable[str], language: str) -> str:
    """The reference haystack from documents (each the content of one text file, in order): English replaces
    every newline by a space and concatenates; Chinese strips each line, removes the section rule and all
    spaces, concatenates, then deletes ASCII punctuation and ASCII letters."""
    if _check_language(language) == "en":
        return "".join(document.replace("\n", " ") for document in documents)
    rule = star_data()["compat"]["zh_section_rule"]
    lines = (line for document in documents for line in document.split("\n"))
    joined = "".join(line.strip().replace(rule, " ").replace(" ", "") for line in lines)
    return joined.translate(_ZH_DELETE)


def _is_builtin_spec(haystack: str | None) -> bool:
    if haystack is None or haystack in ("default", "opencompass"):
        return True
    return haystack.startswith(("hub:", "opencompass@"))


def _as_file(document: str) -> str:
    """A normalised document as the content of a text file (which ends with a newline)."""
    return document if document.endswith("\n") else document + "\n"


def _compat_documents(haystack: str | None, language: str) -> tuple[list[str], str, str]:
    """(file contents, name, revision) of a haystack for the reference construction: local ``.txt`` files are
    read raw (a directory's files in sorted order, where the reference used glob order), other documents are
    taken as text files ending with a newline."""
    corpus = corpus_for(haystack, language)  # validates the input with the usual one-line errors
    if _is_builtin_spec(haystack):
        return [_as_file(document) for document in corpus.documents], corpus.name, corpus.revision
    path = Path(haystack).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".txt" and p.is_file())
        return [text for file in files for text in read_text_file(file)], path.name, ""
    if path.suffix == ".jsonl":
        return [_as_file(document) for document in read_jsonl_documents(path)], path.name, ""
    return read_text_file(path), path.name, ""


def _compat_units(spec: ConfigSpec, length: int) -> int:
    """The reference context size of a length: words (en) or characters (zh)."""
    return int(length * float(star_data()["compat"]["scalar"][spec.language]))


def _space_positions(text: str) -> np.ndarray:
    return np.flatnonzero(np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32) == ord(" ")).astype(np.int64)


@dataclass(frozen=True)
class CompatHaystack:
    """The cleaned reference haystack, cycled if needed and cut to the longest context, tokenised once."""

    corpus: TokenizedCorpus
    language: str
    copy_chars: int  # characters of one copy of the cleaned text
    spaces: np.ndarray  # char positions of the spaces in the stream (English word boundaries)
    label: str

    @property
    def stream_chars(self) -> int:
        """Characters of the stream (the longest context without stars)."""
        return len(self.corpus.corpus.documents[0])

    def context_end(self, units: int) -> int:
        """End of the first `units` words (English: before the units-th space) or characters (Chinese)."""
        if self.language == "en":
            return int(self.spaces[units - 1]) if 1 <= units <= len(self.spaces) else self.stream_chars
        return min(units, self.stream_chars)


@cache
def _compat_haystack(haystack: str | None, language: str, tokenizer_spec: str, units: int) -> CompatHaystack:
    documents, name, revision = _compat_documents(haystack, language)
    text = compat_haystack_text(documents, language)
    per_copy = text.count(" ") if language == "en" else len(text)
    if per_copy == 0:
        unit = "spaces" if language == "en" else "characters"
        raise NeedlebenchError(f"haystack {name!r} has no {unit} left after the Counting-Stars cleaning; it needs text")
    stream = text * max(1, math.ceil(units / per_copy))
    spaces = np.zeros(0, dtype=np.int64)
    if language == "en":
        positions = _space_positions(stream)
        stream = stream[: int(positions[units - 1])] if units >= 1 else ""
        spaces = positions[: max(units - 1, 0)]
    else:
        stream = stream[:units]
    tokenizer = get_tokenizer(tokenizer_spec)
    if not isinstance(tokenizer, TiktokenTokenizer):
        raise NeedlebenchError(
            f"tokenizer {tokenizer_spec!r} cannot count Counting-Stars prompts exactly; use cl100k_base"
        )
    corpus = Corpus(
        name=name, language=language, documents=(stream,), source=f"Counting-Stars haystack from {name}",
        license="see source", revision=revision,
    )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    label = f"{name}@{revision}" if revision else f"{name}@sha256:{digest}"
    return CompatHaystack(tokenize_corpus(corpus, tokenizer), language, len(text), spaces, label)


@dataclass(frozen=True)
class _Star:
    """A star string (or a fragment of one) inside a compat context."""

    index: int
    text: str


def _size(piece: tuple[int, int] | _Star) -> int:
    return piece[1] - piece[0] if isinstance(piece, tuple) else len(piece.text)


def _split(piece: tuple[int, int] | _Star, cut: int) -> list:
    """The non-empty parts of a piece cut `cut` characters in (the character at the cut kept on the right)."""
    if isinstance(piece, tuple):
        parts: list = [(piece[0], piece[0] + cut), (piece[0] + cut, piece[1])]
    else:
        parts = [_Star(piece.index, piece.text[:cut]), _Star(piece.index, piece.text[cut:])]
    return [part for part in parts if _size(part) > 0]


def _insert_at_char(pieces: list, position: int, star: _Star) -> list:
    """``S[:position] + star + S[position:]`` on a context held as pieces."""
    offset = 0
    for index, piece in enumerate(pieces):
        size = _size(piece)
        if position < offset + size:
            left, right = pieces[:index], pieces[index + 1 :]
            parts = _split(piece, max(0, position - offset))
            if position <= offset:
                return left + [star] + parts + right
            return left + parts[:1] + [star] + parts[1:] + right
        offset += size
    return pieces + [star]


def _spaces_in(piece: tuple[int, int] | _Star, spaces: np.ndarray) -> tuple[int, int]:
    """(count, index of the first) of the stream spaces in a span; for a star, (count, 0)."""
    if isinstance(piece, tuple):
        lo = int(np.searchsorted(spaces, piece[0], side="left"))
        return int(np.searchsorted(spaces, piece[1], side="left")) - lo, lo
    return piece.text.count(" "), 0


def _replace_nth_space(pieces: list, word: int, star: _Star, spaces: np.ndarray) -> list:
    """``" ".join(S.split(" ")[:word]) + star + " ".join(S.split(" ")[word:])`` on a context held as pieces:
    the space before word `word` becomes the star (a star before the first word, after the last)."""
    if word <= 0:
        return [star] + pieces
    remaining = word
    for index, piece in enumerate(pieces):
        count, first = _spaces_in(piece, spaces)
        if remaining <= count:
            if isinstance(piece, tuple):
                char = int(spaces[first + remaining - 1])
                parts = [(piece[0], char), star, (char + 1, piece[1])]
            else:
                char = [i for i, c in enumerate(piece.text) if c == " "][remaining - 1]
                parts = [_Star(piece.index, piece.text[:char]), star, _Star(piece.index, piece.text[char + 1 :])]
            return pieces[:index] + [part for part in parts if _size(part) > 0] + pieces[index + 1 :]
        remaining -= count
    return pieces + [star]


def _compat_pieces(haystack: CompatHaystack, cell: StarCell, units: int) -> list:
    """The reference context of a cell as pieces (stream spans and stars): the first `units` words or
    characters, star i inserted at the reference's offset ``k + j/M + i * len(star)`` (k = i * int(j/M);
    lengths in words for English, characters for Chinese)."""
    count = len(cell.sentences)
    step = int(units / count)
    if step < 1:
        raise NeedlebenchError(f"length {cell.length} is too short for {count} stars in compat mode; use 4000 or more")
    end = haystack.context_end(units)
    pieces: list = [(0, end)] if end > 0 else []
    for i, (k, sentence) in enumerate(zip(range(0, units, step), cell.sentences)):
        star = _Star(i, sentence)
        if haystack.language == "en":
            pieces = _replace_nth_space(pieces, len(sentence.split(" ")) * i + k + step, star, haystack.spaces)
        else:
            pieces = _insert_at_char(pieces, k + step + len(sentence) * i, star)
    return pieces


def _segments(pieces: list) -> list:
    return [piece if isinstance(piece, tuple) else piece.text for piece in pieces]


def _compat_depths(corpus: TokenizedCorpus, pieces: list, count: int) -> list[float]:
    """Per star, the haystack tokens before it in percent of all haystack tokens."""
    spans = [piece for piece in pieces if isinstance(piece, tuple)]
    total = corpus.count(spans)
    depths = [0.0] * count
    seen: set[int] = set()
    before: list = []
    for piece in pieces:
        if isinstance(piece, tuple):
            before.append(piece)
        elif piece.index not in seen:
            seen.add(piece.index)
            depths[piece.index] = round(100.0 * corpus.count(before) / total, 4) if total else 100.0
    return depths


def _compat_rows(
    spec: ConfigSpec, options: BuildOptions, haystack: CompatHaystack, cells: Sequence[StarCell]
) -> Iterator[dict]:
    tail = question_separator() + question_text(spec.variant, spec.language)
    corpus = haystack.corpus
    for cell in cells:
        pieces = _compat_pieces(haystack, cell, _compat_units(spec, cell.length))
        segments = _segments(pieces)
        last = max((piece[1] for piece in pieces if isinstance(piece, tuple)), default=0)
        layout = _Layout(
            prompt=corpus.render(segments) + tail,
            prompt_tokens=corpus.count([*segments, tail]),
            haystack_tokens=corpus.count(segments),
            depths=_compat_depths(corpus, pieces, len(cell.sentences)),
            cycles=(last - 1) // haystack.copy_chars if last > 0 else 0,
            corpus=haystack.label,
            compat=COMPAT_MODE,
            boundaries=[COMPAT_BOUNDARY] * len(cell.sentences),  # the reference's word/character offsets
        )
        yield _row(spec, options, cell, layout)
