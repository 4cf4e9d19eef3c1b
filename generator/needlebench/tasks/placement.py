"""Needles into a haystack window: exact token length, each needle within 1 point of its requested depth, on the
best kind of boundary available there.

A context is described as segments (corpus spans and inserted strings) over a :class:`TokenizedCorpus`; its
text is rendered once, its token count computed exactly without re-tokenising it (see `tokenized`).

**Depth.** The depth of a needle is ``100 * B / H``: ``B`` is the number of cl100k tokens of the haystack text
before the needle (the window's text from its start to the insertion point, other needles left out, encoded
on its own) and ``H`` the tokens of the whole haystack window encoded on its own. Depth 0 opens the context
(``needle + "\\n"`` before the window) and depth 100 closes it (``"\\n" + needle`` after it).

**Tolerance.** Every other needle sits where ``|B - H * depth / 100| <= max(H / 100, 3)``: within 1 point of
its requested depth, or within 3 tokens where 1 point is less than 3 tokens (:func:`tolerance_tokens`).

**Boundary.** Among the insertion points inside that window (:mod:`needlebench.tasks.boundaries`) placement takes
the best kind present - sentence end, clause end, paragraph break, line break, word boundary - and of that
kind the point nearest the requested depth. The kind is recorded per needle (``Context.boundaries``; for the
opening and closing needle, the kind of boundary the window starts or ends on). At a point followed by a
space or newline the needle is joined with that same character (``... end. Needle. Next ...``), elsewhere
(Chinese) it joins directly (``...。针。下...``).

Layout rules: the window starts at the best boundary start at or after the cell's seeded hint (a sentence
start in ordinary text) and ends at a cut point (never inside a word, never after whitespace) chosen so that
haystack + needles is exactly the target token count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenized import TokenizedCorpus, Utf8Text
from needlebench.tasks import boundaries
from needlebench.tasks.sentence_table import sentence_points

START = -1
END = -2

#: How many window starts to try before giving up on an exact fill (each is a different boundary start).
_MAX_START_ATTEMPTS = 64
#: How many cut points to walk from the estimated end before trying another start.
_MAX_END_STEPS = 96
#: Re-plans of the needle positions on one window when the exact haystack length moved a needle out of tolerance.
_MAX_REPLANS = 3
#: Characters around the target looked at first for word boundaries (dense: almost always found there).
_WORD_NEAR_CHARS = 256
#: How far after a hint a window start is looked for (characters).
_START_SPAN = 20_000
#: Longest in-piece prefix re-encoded to refine a point's token offset.
_REFINE_CHARS = 4096


def tolerance_tokens(haystack_tokens: int) -> float:
    """How far (haystack tokens) a needle may sit from its requested depth: 1 point, at least 3 tokens."""
    return max(haystack_tokens / 100.0, 3.0)


def within_tolerance(before: int, haystack_tokens: int, depth: float) -> bool:
    """True when `before` haystack tokens ahead of a needle are within tolerance of `depth` percent."""
    return abs(before - haystack_tokens * depth / 100.0) <= tolerance_tokens(haystack_tokens) + 1e-9


class NoInsertionPoint(Exception):
    """No insertion point within tolerance of a depth on this window (placement then tries another start)."""

    def __init__(self, depth: float, tolerance: float):
        super().__init__(f"no insertion point within {tolerance:g} tokens of depth {depth:g}%")
        self.depth = depth


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
    boundaries: list[str]  # per needle, in request order: the kind of boundary it sits on
    positions: list[int]  # per needle: START, END or the char position in the corpus stream

    @property
    def text(self) -> str:
        return self.corpus.render(self.segments)

    def framed(self, before: str, after: str, utf8: bool = False) -> tuple[str | Utf8Text, int]:
        """The prompt with the context between `before` and `after` (with `utf8`, its UTF-8 bytes as unjoined
        parts, see :class:`~needlebench.sources.tokenized.Utf8Text`), and its exact token count."""
        segments = [before, *self.segments, after]
        text = self.corpus.utf8_parts(segments) if utf8 else self.corpus.render(segments)
        return text, self.corpus.count(segments)


def _insertion_literal(corpus: TokenizedCorpus, position: int, needle: str) -> str:
    if position == START:
        return needle + "\n"
    if position == END:
        return "\n" + needle
    follower = corpus.text[position] if position < len(corpus.text) else ""
    if follower in (" ", "\n", "\t"):
        return follower + needle
    return needle


def window_start_at_or_after(corpus: TokenizedCorpus, char: int) -> int:
    """The window start for a hint: the first sentence start at or after `char` (else the first clause,
    paragraph, line or word start; see :func:`needlebench.tasks.boundaries.start_at_or_after`)."""
    text = corpus.text
    for point in _sentence_array(corpus, char, min(len(text), char + _START_SPAN)):  # the common case, from the table
        position = int(point)
        while position < len(text) and text[position].isspace():
            position += 1
        if position < len(text):
            return position
    return boundaries.start_at_or_after(text, char, _START_SPAN)[0]


#: Former name of :func:`window_start_at_or_after`.
sentence_start_at_or_after = window_start_at_or_after


class _Offsets:
    """Token offsets (from the window start) of insertion points: exact at hard boundaries, refined by encoding
    the in-piece prefix elsewhere (estimates: the placement is checked exactly after the fill)."""

    def __init__(self, corpus: TokenizedCorpus, start: int):
        self.corpus = corpus
        self.base = corpus.approx_token_index(start)

    def bounds(self, positions: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lowest offset, highest offset, hard boundary char) per position: a position inside a piece lies
        between the piece's start and that plus the UTF-8 bytes (at most 4 per character) before it."""
        corpus = self.corpus
        chars = np.asarray(positions, dtype=np.int64)
        index = np.maximum(0, np.searchsorted(corpus.hard_chars, chars, side="right") - 1)
        low = (corpus.hard_tokens[index] - self.base).astype(np.float64)
        hard = corpus.hard_chars[index]
        inside = (hard != chars) & (chars - hard <= _REFINE_CHARS)
        high = low + np.where(inside, 4 * (chars - hard), 0)
        return low, high, hard

    def exact(self, position: int, low: float, hard: int) -> float:
        if hard == position or position - hard > _REFINE_CHARS:
            return low
        return low + self.corpus.encode_count(self.corpus.text[hard:position])


def _char_window(corpus: TokenizedCorpus, base: int, low: float, high: float) -> tuple[int, int]:
    """Char range covering token offsets [low, high] from the window's start token `base`."""
    lo = corpus.char_at_token(base + max(0, math.floor(low)))
    i = int(np.searchsorted(corpus.hard_tokens, base + math.ceil(high), side="right"))
    hi = int(corpus.hard_chars[min(len(corpus.hard_chars) - 1, i)])
    return lo, hi


def _best_point(
    corpus: TokenizedCorpus, offsets: _Offsets, lo: int, hi: int, target: float, reach: float, after: int
) -> tuple[int, int] | None:
    """(position, kind) of the best insertion point in chars [lo, hi] whose offset is within `reach` tokens of
    `target` and which lies after `after`: best kind first, then nearest (then earliest)."""
    text = corpus.text
    lo = max(lo, after + 1)
    if hi < lo:
        return None
    for kind in range(len(boundaries.KINDS)):
        windows = [(lo, hi)]
        if kind == boundaries.WORD:
            centre = corpus.char_at_token(offsets.base + int(target))
            near = (max(lo, centre - _WORD_NEAR_CHARS), min(hi, centre + _WORD_NEAR_CHARS))
            windows = [near, (lo, hi)] if near[0] <= near[1] else [(lo, hi)]
        for a, b in windows:
            found = (
                boundaries.points(kind, text, a, b) if kind != boundaries.SENTENCE else _sentence_array(corpus, a, b)
            )
            if len(found) == 0:
                continue
            best = _nearest(offsets, found, target, reach)
            if best is not None:
                return best, kind
    return None


def _nearest(offsets: _Offsets, found: list[int] | np.ndarray, target: float, reach: float) -> int | None:
    """The point of `found` nearest `target` within `reach` tokens (the earliest of equals). Candidates are
    refined in order of their lowest possible distance, so only the few near the target are encoded."""
    low, high, hard = offsets.bounds(found)
    floor = np.maximum(0.0, np.maximum(low - target, target - high))
    best, best_distance = None, math.inf
    for i in np.argsort(floor, kind="stable"):
        if floor[i] > reach or floor[i] > best_distance:
            break
        point = int(found[i])
        distance = abs(offsets.exact(point, float(low[i]), int(hard[i])) - target)
        if distance <= reach and (distance < best_distance or (distance == best_distance and point < best)):
            best, best_distance = point, distance
    return best


def _sentence_array(corpus: TokenizedCorpus, lo: int, hi: int) -> np.ndarray:
    """Sentence points in [lo, hi] (a read-only slice), from a table of the whole stream (computed once per
    corpus and cached on disk, see :mod:`needlebench.tasks.sentence_table`: the same points
    :func:`needlebench.tasks.boundaries.points` finds in any chunk, as its patterns look one character around)."""
    table = sentence_points(corpus)
    return table[table.searchsorted(lo, side="left") : table.searchsorted(hi, side="right")]


def choose_positions(
    corpus: TokenizedCorpus,
    start: int,
    end_estimate: int,
    haystack_tokens: int,
    depths: list[float],
    margin: float = 0.0,
    distinct: bool = False,
) -> tuple[list[int], list[int | None]]:
    """Insertion point and kind of each depth: START for 0, END for 100 (kind None: that of the window's end),
    else the best point within tolerance (less `margin` tokens) of the depth, see the module doc. With
    `distinct`, depths must be non-decreasing and every position comes strictly after the previous one."""
    offsets = _Offsets(corpus, start)
    tolerance = tolerance_tokens(haystack_tokens)
    reach = max(tolerance - margin, min(tolerance, 1.0))
    positions: list[int] = []
    kinds: list[int | None] = []
    previous = start
    for depth in depths:
        if not 0 <= depth <= 100:
            raise NeedlebenchError(f"depth {depth} is outside 0-100; depths are percentages")
        if depth == 0 and not (distinct and positions):
            positions.append(START)
            kinds.append(boundaries.start_kind(corpus.text, start))
            continue
        if depth == 100:
            positions.append(END)
            kinds.append(None)
            continue
        target = haystack_tokens * depth / 100.0
        lo, hi = _char_window(corpus, offsets.base, target - tolerance, target + tolerance)
        hi = min(hi, end_estimate - 1)
        after = previous if distinct else start
        found = _best_point(corpus, offsets, lo, hi, target, reach, after)
        if found is None and reach < tolerance:
            found = _best_point(corpus, offsets, lo, hi, target, tolerance, after)
        if found is None:
            if target <= tolerance and not (distinct and positions):
                positions.append(START)
                kinds.append(boundaries.start_kind(corpus.text, start))
                continue
            if haystack_tokens - target <= tolerance:
                positions.append(END)
                kinds.append(None)
                continue
            raise NoInsertionPoint(depth, tolerance)
        positions.append(found[0])
        kinds.append(found[1])
        previous = found[0]
    return positions, kinds


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
    distinct: bool = False,
) -> Context:
    """A context of exactly `target_tokens` tokens (haystack + needles) whose window starts at the first
    boundary start at or after `start_hint`, trying later starts when no cut point hits the count or a needle
    cannot be kept within tolerance. With `distinct` (depths non-decreasing) no two needles share a point."""
    needle_texts = [needle.text for needle in needles]
    for needle in needles:
        if not 0 <= needle.depth <= 100:
            raise NeedlebenchError(f"depth {needle.depth} is outside 0-100; depths are percentages")
    needle_tokens = sum(corpus.encode_count(_insertion_literal(corpus, END, text)) for text in needle_texts)
    haystack_estimate = target_tokens - needle_tokens
    if haystack_estimate < 1:
        raise NeedlebenchError(
            f"the needles take {needle_tokens} tokens but the context has room for {target_tokens}; "
            "use a longer length or a smaller buffer"
        )
    start = window_start_at_or_after(corpus, start_hint)
    missing: NoInsertionPoint | None = None
    for _ in range(_MAX_START_ATTEMPTS):
        try:
            context = _fill_from(corpus, start, target_tokens, haystack_estimate, needles, distinct)
        except NoInsertionPoint as error:
            context, missing = None, error
        if context is not None:
            return context
        following = window_start_at_or_after(corpus, start + 1)
        if following <= start:
            break
        start = following
    if missing is not None:
        raise NeedlebenchError(
            f"haystack {corpus.corpus.name!r} offers no insertion point within 1 point of depth {missing.depth:g}% "
            f"at {target_tokens} tokens; it needs whitespace, punctuation or Chinese characters between words"
        )
    raise NeedlebenchError(
        f"could not fit a haystack of exactly {target_tokens} tokens with every needle within 1 point of its depth "
        f"from corpus {corpus.corpus.name!r}; the corpus may be too small or lack boundaries between words"
    )


def _exact_end(corpus: TokenizedCorpus, start: int, end: int, target: int, positions, texts) -> tuple[int, int] | None:
    """The cut point at or near `end` where haystack + needles is exactly `target` tokens, with its count."""
    last_inner = max([p for p in positions if p >= 0], default=start)

    prefixes: dict[tuple, tuple[int, list[str]]] = {}

    def total(at: int) -> int:
        # only the last corpus span (up to `at`) and what follows it change between candidates: the count of the
        # segments before it is kept (count is a left-to-right fold, so resuming from its state is exact)
        segments = assemble(corpus, start, at, positions, texts)
        last = max((i for i, segment in enumerate(segments) if not isinstance(segment, str)), default=0)
        key = tuple(segments[:last])
        state = prefixes.get(key)
        if state is None:
            state = prefixes[key] = corpus.count_state(segments[:last])
        return corpus.count(segments[last:], state)

    if end <= last_inner:
        end = next(_cut_points(corpus, last_inner, +1, 1), None)
        if end is None:
            return None
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
                return candidate, value
            if (value - target) * direction > 0:  # stepped over the target
                return None
        return None
    return end, count


def _fill_from(
    corpus: TokenizedCorpus,
    start: int,
    target: int,
    haystack_estimate: int,
    needles: list[NeedleRequest],
    distinct: bool,
) -> Context | None:
    start_token = corpus.approx_token_index(start)
    if start_token + haystack_estimate >= corpus.num_tokens:
        return None
    end = corpus.char_at_token(start_token + haystack_estimate)
    end = next(_cut_points(corpus, end - 1, +1, 1), None)
    if end is None:
        return None
    texts = [n.text for n in needles]
    depths = [n.depth for n in needles]
    haystack_tokens = haystack_estimate
    for attempt in range(_MAX_REPLANS):
        margin = min(1.0 + attempt, tolerance_tokens(haystack_tokens) / 3)
        positions, kinds = choose_positions(corpus, start, end, haystack_tokens, depths, margin, distinct)
        found = _exact_end(corpus, start, end, target, positions, texts)
        if found is None:
            return None
        end, count = found
        haystack_tokens = corpus.count([(start, end)])
        befores = [_before(corpus, start, end, p, haystack_tokens) for p in positions]
        if all(within_tolerance(b, haystack_tokens, d) for b, d in zip(befores, depths)):
            segments = assemble(corpus, start, end, positions, texts)
            closing = boundaries.end_kind(corpus.text, end)
            return Context(
                corpus=corpus,
                tokens=count,
                haystack_tokens=haystack_tokens,
                start=start,
                end=end,
                actual_depths=[round(100.0 * b / haystack_tokens, 4) for b in befores],
                cycles=corpus.copy_index(end - 1),
                segments=segments,
                boundaries=[boundaries.KINDS[closing if k is None else k] for k in kinds],
                positions=positions,
            )
    return None


def _before(corpus: TokenizedCorpus, start: int, end: int, position: int, haystack_tokens: int) -> int:
    """Haystack tokens before a needle (the window's text up to it, encoded on its own)."""
    if position == START:
        return 0
    if position == END:
        return haystack_tokens
    return corpus.count([(start, position)])
