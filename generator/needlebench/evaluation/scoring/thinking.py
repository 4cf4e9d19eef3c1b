"""Reasoning ("thinking") output: what the scorers see of it, and whether a final answer was given.

Reasoning models write ``<think> ... </think>`` before the answer. Two readings of an output are used:

* **Default metrics** see only what follows the last end marker (as lm-eval's ``think_end_token`` model argument
  does inside the ``hf``/``vllm``/API models, ``generation.split(think_end_token)[-1]``). The end marker is
  ``</think>`` unless the task metadata's ``think_end`` names another one (``needlebench eval --think-end MARK``,
  or ``lm_eval --metadata '{"think_end": "MARK"}'``); an empty value turns stripping off. An output that opened a
  reasoning block and never closed it (the model ran out of ``max_gen_toks`` while thinking) is scored on its
  whole text by default (``keep``, what OpenCompass's reasoning-model configs do), or on an empty answer with the
  metadata ``think_unclosed: empty`` (``needlebench eval --think-unclosed empty``); either way ``needlebench eval``
  reports the share of such rows as ``no_final_answer``.
* **``*_reference`` metrics** see the text OpenCompass hands its evaluators when a model config sets
  ``pred_postprocessor=extract_non_reasoning_content`` (``opencompass/utils/text_postprocessors.py``): every
  closed ``<think>...</think>`` pair removed, an unclosed block kept, and with an end marker but no start marker
  the text after the last end marker. An output without a marker is passed on untouched (the raw text, what the
  NeedleBench evaluators and the Counting-Stars notebook score).

The policy travels as data. lm-eval hands a task's metadata (its YAML's ``metadata`` merged with ``--metadata``)
to the task's loader only (``ConfigurableTask.download`` calls ``custom_dataset(**metadata)``,
``lm_eval/api/task.py``), and a ``process_results`` hook gets ``(doc, results)``. So the loader reads the policy
(:func:`policy_from`) and records it for the config whose rows it returns (:func:`set_policy`), and a hook looks it
up by its row's ``config`` column (:func:`policy_for`): the rows lm-eval logs stay as they were built.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from needlebench.errors import NeedlebenchError

#: Task metadata key naming the end-of-reasoning marker (empty: no stripping).
THINK_END_KEY = "think_end"
DEFAULT_THINK_END = "</think>"
DEFAULT_THINK_START = "<think>"
#: Task metadata key choosing what the default metrics score of an unclosed reasoning block.
THINK_UNCLOSED_KEY = "think_unclosed"
#: ``keep``: the whole output (OpenCompass's reasoning configs); ``empty``: no answer (needlebench 0.3's rule).
UNCLOSED_CHOICES = ("keep", "empty")
DEFAULT_UNCLOSED = "keep"


class ThinkPolicy(NamedTuple):
    """What the default metrics score of a reasoning output: the end marker and the rule for an unclosed block.

    (A named tuple, not a dataclass: ``needlebench export-tasks`` copies this module into a ``utils.py`` that lm-eval
    loads from its file without registering it in ``sys.modules``, where a dataclass cannot be made.)"""

    end: str = DEFAULT_THINK_END
    unclosed: str = DEFAULT_UNCLOSED


DEFAULT_POLICY = ThinkPolicy()


def check_unclosed(value: Any, source: str = "--think-unclosed") -> str:
    """``value`` when it is one of :data:`UNCLOSED_CHOICES`, else a one-line error naming it."""
    if value not in UNCLOSED_CHOICES:
        raise NeedlebenchError(f"{source} {value!r} is not allowed; allowed: {', '.join(UNCLOSED_CHOICES)}")
    return str(value)


def policy_from(metadata: Mapping[str, Any], source: str = "metadata") -> ThinkPolicy:
    """The policy a task's metadata chooses (``think_end``, ``think_unclosed``; the defaults when absent); a value
    of the wrong kind is a one-line error naming the key (``source`` says where it was written)."""
    end = metadata.get(THINK_END_KEY)
    if end is None:
        end = DEFAULT_THINK_END
    elif not isinstance(end, str):
        raise NeedlebenchError(
            f"{source} {THINK_END_KEY} {end!r} is not a string; allowed: an end-of-reasoning marker such as "
            f"{DEFAULT_THINK_END!r} (a JSON string), or an empty string to score the whole output"
        )
    unclosed = metadata.get(THINK_UNCLOSED_KEY)
    if unclosed in (None, ""):
        unclosed = DEFAULT_UNCLOSED
    return ThinkPolicy(end, check_unclosed(unclosed, f"{source} {THINK_UNCLOSED_KEY}"))


#: The policy of each config whose rows the task loader returned in this process (config name -> policy).
_POLICIES: dict[str, ThinkPolicy] = {}


def set_policy(config: str, policy: ThinkPolicy) -> None:
    """Record the policy the rows of ``config`` are scored under (the task loader calls it with the policy of the
    task's metadata; a later load of the config replaces it)."""
    _POLICIES[str(config)] = policy


def policy_for(doc: Mapping[str, Any]) -> ThinkPolicy:
    """The policy a row is scored under: the one recorded for its ``config``, else the default."""
    return _POLICIES.get(str(doc.get("config")), DEFAULT_POLICY)


def _start_marker(end: str) -> str:
    """``<think>`` for ``</think>``; for another marker ``</x>`` its opening ``<x>``, else none."""
    if end.startswith("</") and end.endswith(">"):
        return "<" + end[2:]
    return ""


def has_final_answer(text: str, end: str = DEFAULT_THINK_END) -> bool:
    """False when the text opened a reasoning block (start marker present) and never closed it."""
    if not end or end in text:
        return True
    start = _start_marker(end)
    return not (start and start in text)


def strip_reasoning(text: str, end: str = DEFAULT_THINK_END, unclosed: str = DEFAULT_UNCLOSED) -> str:
    """The answer part of an output for the default metrics: the text after the last end marker; for an unclosed
    reasoning block the whole text (``unclosed="keep"``) or ``""`` (``"empty"``)."""
    if not end:
        return text
    if end in text:
        return text.rsplit(end, 1)[-1].lstrip()
    if not has_final_answer(text, end):
        return "" if unclosed == "empty" else text
    return text


@functools.lru_cache(maxsize=16)
def _pair_pattern(start: str, end: str) -> re.Pattern[str]:
    return re.compile(re.escape(start) + "(.*?)" + re.escape(end), re.DOTALL)


def reference_text(text: str, end: str = DEFAULT_THINK_END) -> str:
    """The text the ``*_reference`` metrics score: OpenCompass's ``extract_non_reasoning_content`` of ``text``.

    Without a marker in ``text`` (or with stripping off, an empty ``end``) the text is returned untouched. With the
    end marker but not the start marker: the text after the last end marker, stripped. Otherwise every closed
    ``start...end`` pair (shortest match) is removed and the rest stripped, so an unclosed block keeps its text.
    A marker other than ``</x>`` has no start marker: the text after its last occurrence. The markers are matched
    literally (OpenCompass puts them into a regular expression unescaped; the same for ``<think>``).
    """
    if not end:
        return text
    start = _start_marker(end)
    has_start = bool(start) and start in text
    if end not in text and not has_start:
        return text
    if not has_start:
        return text.split(end)[-1].strip()
    return _pair_pattern(start, end).sub("", text).strip()
