"""Reasoning ("thinking") output: what the scorers see of it, and whether a final answer was given.

Reasoning models write ``<think> ... </think>`` before the answer. Two readings of an output are used:

* **Default metrics** see only what follows the last end marker (as lm-eval's ``think_end_token`` model argument
  does inside the ``hf``/``vllm``/API models, ``generation.split(think_end_token)[-1]``). The end marker is
  ``</think>`` unless the environment variable ``NEEDLEBENCH_THINK_END`` names another one (``needlebench eval
  --think-end MARK`` sets it); an empty value turns stripping off. An output that opened a reasoning block and
  never closed it (the model ran out of ``max_gen_toks`` while thinking) is scored on its whole text by default
  (``keep``, what OpenCompass's reasoning-model configs do), or on an empty answer with
  ``NEEDLEBENCH_THINK_UNCLOSED=empty`` (``needlebench eval --think-unclosed empty``); either way
  ``needlebench eval`` reports the share of such rows as ``no_final_answer``.
* **``*_reference`` metrics** see the text OpenCompass hands its evaluators when a model config sets
  ``pred_postprocessor=extract_non_reasoning_content`` (``opencompass/utils/text_postprocessors.py``): every
  closed ``<think>...</think>`` pair removed, an unclosed block kept, and with an end marker but no start marker
  the text after the last end marker. An output without a marker is passed on untouched (the raw text, what the
  NeedleBench evaluators and the Counting-Stars notebook score).
"""

from __future__ import annotations

import functools
import os
import re

from needlebench.errors import NeedlebenchError

#: Environment variable naming the end-of-reasoning marker (empty: no stripping).
THINK_END_ENV = "NEEDLEBENCH_THINK_END"
DEFAULT_THINK_END = "</think>"
DEFAULT_THINK_START = "<think>"
#: Environment variable choosing what the default metrics score of an unclosed reasoning block.
THINK_UNCLOSED_ENV = "NEEDLEBENCH_THINK_UNCLOSED"
#: ``keep``: the whole output (OpenCompass's reasoning configs); ``empty``: no answer (needlebench 0.3's rule).
UNCLOSED_CHOICES = ("keep", "empty")
DEFAULT_UNCLOSED = "keep"


def think_end_marker() -> str:
    """The configured end marker (``</think>`` by default, ``""`` when stripping is off)."""
    return os.environ.get(THINK_END_ENV, DEFAULT_THINK_END)


def check_unclosed(value: str, source: str = "--think-unclosed") -> str:
    """``value`` when it is one of :data:`UNCLOSED_CHOICES`, else a one-line error naming it."""
    if value not in UNCLOSED_CHOICES:
        raise NeedlebenchError(f"{source} {value!r} is not allowed; allowed: {', '.join(UNCLOSED_CHOICES)}")
    return value


def unclosed_policy() -> str:
    """What the default metrics score of an unclosed reasoning block: ``keep`` (default) or ``empty``."""
    return check_unclosed(os.environ.get(THINK_UNCLOSED_ENV, DEFAULT_UNCLOSED) or DEFAULT_UNCLOSED, THINK_UNCLOSED_ENV)


def _start_marker(end: str) -> str:
    """``<think>`` for ``</think>``; for another marker ``</x>`` its opening ``<x>``, else none."""
    if end.startswith("</") and end.endswith(">"):
        return "<" + end[2:]
    return ""


def has_final_answer(text: str, end: str | None = None) -> bool:
    """False when the text opened a reasoning block (start marker present) and never closed it."""
    end = think_end_marker() if end is None else end
    if not end or end in text:
        return True
    start = _start_marker(end)
    return not (start and start in text)


def strip_reasoning(text: str, end: str | None = None, unclosed: str | None = None) -> str:
    """The answer part of an output for the default metrics: the text after the last end marker; for an unclosed
    reasoning block the whole text (``unclosed="keep"``) or ``""`` (``"empty"``); see :func:`unclosed_policy`."""
    end = think_end_marker() if end is None else end
    if not end:
        return text
    if end in text:
        return text.rsplit(end, 1)[-1].lstrip()
    if not has_final_answer(text, end):
        return "" if (unclosed or unclosed_policy()) == "empty" else text
    return text


@functools.lru_cache(maxsize=16)
def _pair_pattern(start: str, end: str) -> re.Pattern[str]:
    return re.compile(re.escape(start) + "(.*?)" + re.escape(end), re.DOTALL)


def reference_text(text: str, end: str | None = None) -> str:
    """The text the ``*_reference`` metrics score: OpenCompass's ``extract_non_reasoning_content`` of ``text``.

    Without a marker in ``text`` (or with stripping off, an empty ``end``) the text is returned untouched. With the
    end marker but not the start marker: the text after the last end marker, stripped. Otherwise every closed
    ``start...end`` pair (shortest match) is removed and the rest stripped, so an unclosed block keeps its text.
    A marker other than ``</x>`` has no start marker: the text after its last occurrence. The markers are matched
    literally (OpenCompass puts them into a regular expression unescaped; the same for ``<think>``).
    """
    end = think_end_marker() if end is None else end
    if not end:
        return text
    start = _start_marker(end)
    has_start = bool(start) and start in text
    if end not in text and not has_start:
        return text
    if not has_start:
        return text.split(end)[-1].strip()
    return _pair_pattern(start, end).sub("", text).strip()
