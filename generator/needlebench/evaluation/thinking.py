"""Reasoning ("thinking") output: strip it before scoring, and tell whether a final answer was given.

Reasoning models write ``<think> ... </think>`` before the answer. The scoring hooks see only what follows the
last end marker (as lm-eval's ``think_end_token`` model argument does inside the ``hf``/``vllm``/API models,
``generation.split(think_end_token)[-1]``). The end marker is ``</think>`` unless the environment variable
``NEEDLEBENCH_THINK_END`` names another one (``needlebench eval --think-end MARK`` sets it); an empty value
turns stripping off. An output that opened a reasoning block and never closed it (the model ran out of
``max_gen_toks`` while thinking) has no final answer: it scores on an empty answer, and ``needlebench eval``
reports the share of such rows as ``no_final_answer``.
"""

from __future__ import annotations

import os

#: Environment variable naming the end-of-reasoning marker (empty: no stripping).
THINK_END_ENV = "NEEDLEBENCH_THINK_END"
DEFAULT_THINK_END = "</think>"
DEFAULT_THINK_START = "<think>"


def think_end_marker() -> str:
    """The configured end marker (``</think>`` by default, ``""`` when stripping is off)."""
    return os.environ.get(THINK_END_ENV, DEFAULT_THINK_END)


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


def strip_reasoning(text: str, end: str | None = None) -> str:
    """The answer part of an output: the text after the last end marker; "" for an unclosed reasoning block."""
    end = think_end_marker() if end is None else end
    if not end:
        return text
    if end in text:
        return text.rsplit(end, 1)[-1].lstrip()
    if not has_final_answer(text, end):
        return ""
    return text
