"""Counting-Stars, compat mode: the reference notebook's construction (``nick7nlp/Counting-Stars:
gen_test_data.ipynb``: word/character lengths x0.8/x0.7, fixed star lists, approximate offsets), replayed byte for
byte."""

from __future__ import annotations

import hashlib
import math
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.seeding import derive_seed
from needlebench.sources.corpus import Corpus, read_jsonl_documents, read_text_file
from needlebench.sources.haystacks import corpus_for
from needlebench.sources.tokenized import TokenizedCorpus, tokenize_corpus
from needlebench.sources.tokenizer import TiktokenTokenizer, get_tokenizer
from needlebench.tasks.counting_stars import (
    COMPAT_BOUNDARY,
    COMPAT_MODE,
    Layout,
    StarCell,
    check_language,
    check_spec,
    check_task,
    question_separator,
    question_text,
    star_data,
    star_row,
    star_sentence,
)
from needlebench.tasks.families import counting_stars
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.settings import HaystackSettings


def compat_counts(task: str) -> tuple[list[int], list[int]]:
    """The reference's fixed M=32 lists: correct counts and (reasoning) wrong counts, else an empty list."""
    compat = star_data()["compat"]
    correct = [int(value) for value in compat["a_stars"]]
    if check_task(task) == "acquisition":
        return correct, []
    return correct, [a + 1 if sign == "+" else a - 1 for a, sign in zip(correct, compat["r_signs"])]


def _compat_cell(spec: ConfigSpec, settings: HaystackSettings, length: int) -> StarCell:
    correct, wrong = compat_counts(spec.variant)
    wrongs: list[int | None] = list(wrong) if wrong else [None] * len(correct)
    sentences = tuple(star_sentence(spec.variant, spec.language, c, w, wrapped=True) for c, w in zip(correct, wrongs))
    return StarCell(
        length, derive_seed(settings.release_seed, spec.name, length), tuple(correct), tuple(wrong), sentences
    )


# ---- compat: the reference construction ----------------------------------------------------------------------
#: The original's regex class lists ASCII punctuation with `\]` as an escaped bracket: backslash is kept.
_ZH_DELETE = str.maketrans("", "", string.punctuation.replace("\\", "") + string.ascii_letters)


def compat_haystack_text(documents: Iterable[str], language: str) -> str:
    """The reference haystack from documents (each the content of one text file, in order): English replaces
    every newline by a space and concatenates; Chinese strips each line, removes the section rule and all
    spaces, concatenates, then deletes ASCII punctuation and ASCII letters."""
    if check_language(language) == "en":
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
        name=name,
        language=language,
        documents=(stream,),
        source=f"Counting-Stars haystack from {name}",
        license="see source",
        revision=revision,
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
    spec: ConfigSpec, settings: HaystackSettings, haystack: CompatHaystack, cells: Sequence[StarCell]
) -> Iterator[dict]:
    tail = question_separator() + question_text(spec.variant, spec.language)
    corpus = haystack.corpus
    for cell in cells:
        pieces = _compat_pieces(haystack, cell, _compat_units(spec, cell.length))
        segments = _segments(pieces)
        last = max((piece[1] for piece in pieces if isinstance(piece, tuple)), default=0)
        layout = Layout(
            prompt=corpus.render(segments) + tail,
            prompt_tokens=corpus.count([*segments, tail]),
            haystack_tokens=corpus.count(segments),
            depths=_compat_depths(corpus, pieces, len(cell.sentences)),
            cycles=(last - 1) // haystack.copy_chars if last > 0 else 0,
            corpus=haystack.label,
            compat=COMPAT_MODE,
            boundaries=[COMPAT_BOUNDARY] * len(cell.sentences),  # the reference's word/character offsets
        )
        yield star_row(spec, settings, cell, layout)


def counting_stars_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...] | None = None, utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of a Counting-Stars config built as the reference notebook builds them (M=32 only), one per context
    length (only `lengths` when given), in grid order."""
    check_spec(spec)
    if spec.stars != star_data()["compat"]["stars"]:
        raise NeedlebenchError(
            f"compat mode {COMPAT_MODE} has fixed star lists only for M={star_data()['compat']['stars']}; "
            f"{spec.name} has M={spec.stars}"
        )
    chosen = spec.select_lengths(lengths)
    haystack = _compat_haystack(
        settings.haystack, spec.language, settings.tokenizer, _compat_units(spec, max(spec.lengths))
    )
    return _compat_rows(spec, settings, haystack, [_compat_cell(spec, settings, length) for length in chosen])


#: This module's generators: (family key, mode, edition) -> rows.
GENERATORS = {(counting_stars.FAMILY.key, COMPAT_MODE, "v1"): counting_stars_rows}
