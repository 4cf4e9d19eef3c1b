"""Insertion points of a haystack text and their kinds, best first: sentence, clause, paragraph, line, word.

An insertion point is a char position `p` of the text: a needle goes between ``text[p-1]`` and ``text[p]``. Every
point follows a non-space character, never splits a word (two Latin letters/digits/apostrophes/hyphens) or a
character, and is never glued to a word: in space-delimited text the point is followed by whitespace (the needle
is joined with that same whitespace character, see :mod:`needlebench.tasks.placement`); in Chinese the point lies
before a CJK character or after Chinese punctuation.

Kinds, in order of preference:

``sentence``
    right after a sentence end (``. ! ? … 。！？`` and closing quotes/brackets), not followed by a word character
    or by punctuation (so ``3.5`` is not a sentence end and ``?”，`` ends no sentence before the comma);
``clause``
    right after ``; :`` followed by whitespace, or after Chinese ``；：，、`` (closing quotes included);
``paragraph``
    at a blank line (``\\n`` then an empty or whitespace-only line) after a non-space character;
``line``
    at a single line break after a non-space character, unless the paragraph is hard-wrapped there (see
    :func:`is_wrapped_break`): such a break is only a ``word`` boundary;
``word``
    between two whitespace-separated words (the point is the start of the whitespace), or, in Chinese, between
    two characters (before a CJK ideograph, not after an opening bracket or quote).
"""

from __future__ import annotations

import re

KINDS = ("sentence", "clause", "paragraph", "line", "word")
SENTENCE, CLAUSE, PARAGRAPH, LINE, WORD = range(5)

_CLOSERS = "\"'”’」』)）\\]》】"
_WORD = r"A-Za-z0-9\u00C0-\u024F'’\-"
#: Punctuation a point never precedes (it would detach it from its clause).
_STOPS = r",;:.!?，、；：。！？…"
_CJK = r"\u3400-\u4DBF\u4E00-\u9FFF\uF900-\uFAFF"

_PATTERNS = {
    SENTENCE: re.compile(rf"(?<=\S)[.!?…。！？]+[{_CLOSERS}]*(?![{_WORD}{_STOPS}])"),
    CLAUSE: re.compile(rf"(?<=\S)(?:[;:][{_CLOSERS}]*(?=\s)|[；：，、][{_CLOSERS}]*(?![{_WORD}{_STOPS}]))"),
    PARAGRAPH: re.compile(r"(?<=\S)\n(?=[ \t\r]*\n)"),
    LINE: re.compile(r"(?<=\S)\n(?=[ \t]*\S)"),
}
#: English word boundaries: the start of a run of blanks between two non-space characters.
_WORD_SPACE = re.compile(r"(?<=\S)[ \t]+(?=\S)")
#: Chinese word boundaries: before a CJK ideograph, after anything but whitespace or an opening bracket/quote.
_WORD_CJK = re.compile(rf"(?<=[^\s（(“‘「『《【\[])(?=[{_CJK}])")

#: Longest line (characters) of a paragraph that can still be hard-wrapped.
MAX_WRAP_WIDTH = 120
#: Lines looked at on each side of a break to find its paragraph's wrap width.
_WIDTH_LINES = 12


def _positions(kind: int, text: str, lo: int, hi: int) -> list[int]:
    """Points of one kind (not wrap-checked) in [lo, hi]; the regexes see a little context on each side."""
    left = max(0, lo - 8)
    chunk = text[left : hi + 8]
    found: list[int] = []
    if kind in _PATTERNS:
        pattern = _PATTERNS[kind]
        for match in pattern.finditer(chunk):
            position = left + (match.start() if kind in (PARAGRAPH, LINE) else match.end())
            if lo <= position <= hi:
                found.append(position)
        return found
    for pattern in (_WORD_SPACE, _WORD_CJK):
        for match in pattern.finditer(chunk):
            position = left + match.start()
            if lo <= position <= hi:
                found.append(position)
    return found


def _line_bounds(text: str, newline: int) -> tuple[int, int]:
    """(start of the line ending at `newline`, end of the next line)."""
    start = text.rfind("\n", 0, newline) + 1
    end = text.find("\n", newline + 1)
    return start, len(text) if end < 0 else end


def is_wrapped_break(text: str, newline: int) -> bool:
    """True when the line break at `newline` continues a hard-wrapped paragraph: the paragraph's lines are at most
    :data:`MAX_WRAP_WIDTH` characters and the next line's first word would not have fitted on this line within
    the paragraph's width (the longest of its nearby lines), i.e. the break was made by the wrapping, not by the
    author."""
    start, next_end = _line_bounds(text, newline)
    line = text[start:newline].rstrip()
    following = text[newline + 1 : next_end].strip()
    if not line or not following:
        return False
    widths = [len(line), len(following)]
    cursor = start
    for _ in range(_WIDTH_LINES):  # earlier lines of the same paragraph
        if cursor <= 0:
            break
        previous = text.rfind("\n", 0, cursor - 1) + 1
        content = text[previous : cursor - 1]
        if not content.strip():
            break
        widths.append(len(content.rstrip()))
        cursor = previous
    cursor = next_end
    for _ in range(_WIDTH_LINES):  # later lines
        if cursor >= len(text):
            break
        after = text.find("\n", cursor + 1)
        after = len(text) if after < 0 else after
        content = text[cursor + 1 : after]
        if not content.strip():
            break
        widths.append(len(content.rstrip()))
        cursor = after
    width = max(widths)
    if width > MAX_WRAP_WIDTH:
        return False
    first_word = following.split()[0]
    return len(line) + 1 + len(first_word) > width


def points(kind: int, text: str, lo: int, hi: int) -> list[int]:
    """Insertion points of `kind` in [lo, hi], sorted. Hard-wrapped line breaks count as ``word``, not ``line``."""
    if kind == LINE:
        return [p for p in _positions(LINE, text, lo, hi) if not is_wrapped_break(text, p)]
    if kind == WORD:
        wrapped = [p for p in _positions(LINE, text, lo, hi) if is_wrapped_break(text, p)]
        return sorted(set(_positions(WORD, text, lo, hi)) | set(wrapped))
    return _positions(kind, text, lo, hi)


def kind_at(text: str, position: int) -> int | None:
    """The kind of insertion point at `position`, or None when it is not one."""
    for kind in range(len(KINDS)):
        if position in points(kind, text, position, position):
            return kind
    return None


def end_kind(text: str, end: int) -> int:
    """Kind of the boundary a haystack ending at `end` closes on (the needle after it goes on its own line)."""
    if end >= len(text):
        return PARAGRAPH
    kind = kind_at(text, end)
    return WORD if kind is None else kind


def start_kind(text: str, start: int) -> int:
    """Kind of the boundary a haystack starting at `start` opens on (the needle before it is on its own line)."""
    if start <= 0:
        return PARAGRAPH
    back = start
    while back > 0 and text[back - 1].isspace():
        back -= 1
    if back == 0:
        return PARAGRAPH
    kind = kind_at(text, back)
    if kind is None:
        return WORD
    return kind


def start_at_or_after(text: str, char: int, span: int = 20_000) -> tuple[int, int]:
    """(position, kind) of the best window start at or after `char`: the first sentence start within `span`
    characters, else the first clause, paragraph, line or word start there (a start is the first non-space
    character after an insertion point)."""
    hi = min(len(text), char + span)
    for kind in range(len(KINDS)):
        lo = char
        while lo < hi:
            found = points(kind, text, lo, min(hi, lo + 4096))
            for point in found:
                position = point
                while position < len(text) and text[position].isspace():
                    position += 1
                if position >= char and position < len(text):
                    return position, kind
            lo += 4096
    return char, WORD
