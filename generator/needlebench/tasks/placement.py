"""Needles into a haystack window: exact token length, needles on sentence boundaries nearest their depth.

A context is described as segments (corpus spans and inserted strings) over a :class:`TokenizedCorpus`; its
text is rendered once, its token count computed exactly without re-tokenising it (see `tokenized`).

Layout rules (default mode):

* the window starts at a sentence start chosen by the cell's seed and ends at a cut point (never inside a
  word, never after whitespace) chosen so that haystack + needles is exactly the target token count;
* a needle goes at the sentence boundary nearest its requested depth (measured in haystack tokens); at a
  boundary followed by a space or newline it is joined with that same character (so English reads
  ``... end. Needle. Next ...``), Chinese needles join directly (``...。针。下...``);
* at depth 0 the context opens with the needle and a newline, at the window end it closes with a newline and
  the needle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenized import TokenizedCorpus

START = -1
END = -2

#: How many window starts to try before giving up on an exact fill (each is a different sentence start).
_MAX_START_ATTEMPTS = 64
#: How many cut points to walk from the estimated end before trying another start.
_MAX_END_STEPS = 96


@dataclass(frozen=True)
class NeedleRequest:
    """A needle sentence and the depth (percent of haystack tokens) it was requested at."""

    text: str
    depth: float


@dataclass
class Context:
    """A context (as segments over the corpus) and what made it; `text` renders it."""

    corpus: TokenizedCorpus
    tokens: int  # exact, haystack + needles
    haystack_tokens: int  # exact, the haystack window alone
    start: int  # window, char positions in the corpus stream
    end: int
    actual_depths: list[float]  # per needle, in request order
    cycles: int  # how often the window wrapped around the corpus
    segments: list  # strings and corpus spans; frames are added around these

    @property
    def text(self) -> str:
        return self.corpus.render(self.segments)

    def framed(self, before: str, after: str) -> tuple[str, int]:
        """The prompt with the context between `before` and `after`, and its exact token count."""
        segments = [before, *self.segments, after]
        return self.corpus.render(segments), self.corpus.count(segments)


def _insertion_literal(corpus: TokenizedCorpus, position: int, needle: str) -> str:
    if position == START:
        return needle + "\n"
    if position == END:
        return "\n" + needle
    follower = corpus.text[position] if position < len(corpus.text) else ""
    if follower in (" ", "\n"):
        return follower + needle
    return needle


def sentence_start_at_or_after(corpus: TokenizedCorpus, char: int) -> int:
    """The first sentence start (first non-space character after a sentence end) at or after `char`."""
    index = int(np.searchsorted(corpus.sentence_chars, char, side="left"))
    while index < len(corpus.sentence_chars):
        position = int(corpus.sentence_chars[index])
        while position < len(corpus.text) and corpus.text[position].isspace():
            position += 1
        if position >= char:
            return position
        index += 1
    return 0


def choose_positions(
    corpus: TokenizedCorpus, start: int, end_estimate: int, haystack_tokens: int, depths: list[float]
) -> list[int]:
    """Insertion point of each depth: START, END or a sentence boundary char position, the one whose
    haystack token offset is nearest the requested depth."""
    lo = int(np.searchsorted(corpus.sentence_chars, start, side="right"))
    hi = int(np.searchsorted(corpus.sentence_chars, end_estimate, side="left"))
    inner_chars = corpus.sentence_chars[lo:hi]
    inner_tokens = corpus.sentence_tokens[lo:hi] - corpus.approx_token_index(start)
    positions = []
    for depth in depths:
        if not 0 <= depth <= 100:
            raise NeedlebenchError(f"depth {depth} is outside 0-100; depths are percentages")
        target = haystack_tokens * depth / 100.0
        # the nearest inner candidate (sorted by token), compared with the window's start and end
        best, best_distance = START, target
        if haystack_tokens - target < best_distance:
            best, best_distance = END, haystack_tokens - target
        at = int(np.searchsorted(inner_tokens, target))
        for index in (at - 1, at):
            if 0 <= index < len(inner_chars) and abs(inner_tokens[index] - target) < best_distance:
                best, best_distance = int(inner_chars[index]), abs(inner_tokens[index] - target)
        positions.append(best)
    return positions


def assemble(corpus: TokenizedCorpus, start: int, end: int, positions: list[int], needles: list[str]) -> list:
    """Segments of the context: the window [start, end) with each needle inserted at its position."""
    order = sorted(range(len(needles)), key=lambda i: (_sort_key(positions[i], end), i))
    segments: list = []
    cursor = start
    for i in order:
        position = positions[i]
        literal = _insertion_literal(corpus, position, needles[i])
        if position == START:
            segments.append(literal)
            continue
        stop = end if position == END else position
        if stop > cursor:
            segments.append((cursor, stop))
            cursor = stop
        segments.append(literal)
    if end > cursor:
        segments.append((cursor, end))
    return _merge_literals(segments)


def _sort_key(position: int, end: int) -> int:
    if position == START:
        return -1
    if position == END:
        return end + 1
    return position


def _merge_literals(segments: list) -> list:
    merged: list = []
    for segment in segments:
        if isinstance(segment, str) and merged and isinstance(merged[-1], str):
            merged[-1] += segment
        else:
            merged.append(segment)
    return merged


def _cut_points(corpus: TokenizedCorpus, around: int, direction: int, limit: int):
    position = around
    steps = 0
    text_length = len(corpus.text)
    while 0 < position <= text_length and steps < limit:
        position += direction
        if corpus.is_cut_point(position):
            steps += 1
            yield position


def build_context(
    corpus: TokenizedCorpus,
    target_tokens: int,
    needles: list[NeedleRequest],
    start_hint: int,
) -> Context:
    """A context of exactly `target_tokens` tokens (haystack + needles) whose window starts at the first
    sentence start at or after `start_hint`, trying later sentence starts when no cut point hits the count."""
    needle_texts = [needle.text for needle in needles]
    needle_tokens = sum(corpus.encode_count(_insertion_literal(corpus, END, text)) for text in needle_texts)
    haystack_estimate = target_tokens - needle_tokens
    if haystack_estimate < 1:
        raise NeedlebenchError(
            f"the needles take {needle_tokens} tokens but the context has room for {target_tokens}; "
            "use a longer length or a smaller buffer"
        )
    start = sentence_start_at_or_after(corpus, start_hint)
    for _ in range(_MAX_START_ATTEMPTS):
        context = _fill_from(corpus, start, target_tokens, haystack_estimate, needles)
        if context is not None:
            return context
        start = sentence_start_at_or_after(corpus, start + 1)
    raise NeedlebenchError(
        f"could not fit a haystack of exactly {target_tokens} tokens from corpus {corpus.corpus.name!r}; "
        "the corpus may be too small or lack sentence boundaries"
    )


def _fill_from(
    corpus: TokenizedCorpus, start: int, target: int, haystack_estimate: int, needles: list[NeedleRequest]
) -> Context | None:
    start_token = corpus.approx_token_index(start)
    if start_token + haystack_estimate >= corpus.num_tokens:
        return None
    end = corpus.char_at_token(start_token + haystack_estimate)
    end = next(_cut_points(corpus, end - 1, +1, 1), None)
    if end is None:
        return None
    positions = choose_positions(corpus, start, end, haystack_estimate, [n.depth for n in needles])
    texts = [n.text for n in needles]
    last_inner = max([p for p in positions if p >= 0], default=start)

    def total(at: int) -> int:
        return corpus.count(assemble(corpus, start, at, positions, texts))

    # coarse: jump by the token difference a few times, then walk cut points one by one
    count = total(end)
    for _ in range(4):
        if count == target:
            break
        jump = corpus.char_at_token(corpus.approx_token_index(end) + (target - count))
        moved = next(_cut_points(corpus, jump - 1, +1, 1), None)
        if moved is None or moved == end or moved <= last_inner:
            break
        end, count = moved, total(moved)
    if count != target:
        direction = 1 if count < target else -1
        for candidate in _cut_points(corpus, end, direction, _MAX_END_STEPS):
            if candidate <= last_inner or candidate >= len(corpus.text):
                return None
            value = total(candidate)
            if value == target:
                end, count = candidate, value
                break
            if (value - target) * direction > 0:  # stepped over the target
                return None
        else:
            return None
    segments = assemble(corpus, start, end, positions, texts)
    haystack_tokens = corpus.count([(start, end)])
    return Context(
        corpus=corpus,
        tokens=count,
        haystack_tokens=haystack_tokens,
        start=start,
        end=end,
        actual_depths=[_actual_depth(corpus, start, end, p, haystack_tokens) for p in positions],
        cycles=corpus.copy_index(end - 1),
        segments=segments,
    )


def _actual_depth(corpus: TokenizedCorpus, start: int, end: int, position: int, haystack_tokens: int) -> float:
    if position == START:
        return 0.0
    if position == END:
        return 100.0
    before = corpus.count([(start, position)])
    return round(100.0 * before / haystack_tokens, 4)
