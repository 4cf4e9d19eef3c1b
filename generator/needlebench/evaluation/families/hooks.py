"""What the ``lm-eval task`` sections of the family modules share: the task template record, the texts a
``process_results`` hook scores, the reference-twin naming and the generic aggregation.

Hooks are module-level functions of the family modules (lm-eval names them ``!function utils.<hook>`` and
``needlebench export-tasks`` copies them by source, :mod:`needlebench.evaluation.harness.bundle`); a template holds the
functions themselves, so their names and modules are read from them, never listed twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from needlebench.evaluation.scoring.thinking import policy_for, reference_text, strip_reasoning

#: A ``process_results`` hook: (row, lm-eval's results) -> metrics of the row.
Hook = Callable[[Mapping[str, Any], Sequence[Any]], dict[str, Any]]
#: A custom aggregation: the metric values of every row -> the task's score.
Aggregation = Callable[[Iterable[Any]], float]

#: lm-eval's built-in mean aggregation.
MEAN = "mean"
#: Suffix of the reference-exact twin of a metric (see :mod:`needlebench.evaluation.scoring.reference`).
REFERENCE_SUFFIX = "_reference"


@dataclass(frozen=True)
class TaskTemplate:
    """What the task YAMLs including one base template (``_default_<key>_template_yaml``) share."""

    key: str  # base file stem, e.g. "single", "atc_open", "v2_single"
    label: str  # the base file's comment
    hook: Hook  # process_results
    aggregations: tuple[tuple[str, str | Aggregation], ...]  # (metric, MEAN or a custom aggregation)
    max_gen_toks: int
    oracle: Callable[[Mapping[str, Any]], str]  # the answer to a row that scores full marks

    @property
    def process_results(self) -> str:
        """The name of the ``process_results`` hook (``!function utils.<name>``)."""
        return self.hook.__name__

    @property
    def metrics(self) -> tuple[tuple[str, str], ...]:
        """``(metric, aggregation)``: ``MEAN`` or the name of a custom aggregation hook."""
        return tuple((metric, agg if isinstance(agg, str) else agg.__name__) for metric, agg in self.aggregations)

    def hooks(self) -> dict[str, Callable[..., Any]]:
        """The functions the template's YAML names (``!function utils.<name>``), by name."""
        functions = [self.hook, *(agg for _metric, agg in self.aggregations if not isinstance(agg, str))]
        return {function.__name__: function for function in functions}

    def metric_names(self) -> tuple[str, ...]:
        return tuple(metric for metric, _agg in self.aggregations)


def reference_metric(metric: str) -> str:
    """The name of a metric's reference-exact twin (``score`` -> ``score_reference``)."""
    return metric + REFERENCE_SUFFIX


# --------------------------------------------------------------------------------------------- hook helpers


def output_text(results: Sequence[Any]) -> str:
    """The generated text of a ``generate_until`` request (lm-eval passes a one-element list)."""
    if not results:
        return ""
    value = results[0]
    return value if isinstance(value, str) else str(value)


def prediction(doc: Mapping[str, Any], results: Sequence[Any]) -> str:
    """The text the default metrics score: the output with its reasoning (``<think>...</think>``) stripped under the
    row's policy (the task metadata's ``think_end``/``think_unclosed``), see
    :func:`needlebench.evaluation.scoring.thinking.strip_reasoning` and ``policy_for``."""
    policy = policy_for(doc)
    return strip_reasoning(output_text(results), policy.end, policy.unclosed)


def reference_prediction(doc: Mapping[str, Any], results: Sequence[Any]) -> str:
    """The text the ``*_reference`` metrics score: what OpenCompass's reasoning-model configs hand the evaluators
    (:func:`needlebench.evaluation.scoring.thinking.reference_text` with the row's end marker; the raw output when it
    has no reasoning marker)."""
    return reference_text(output_text(results), policy_for(doc).end)


def agg_flat_mean(items: Iterable[Sequence[float]]) -> float:
    """Mean over every element of per-row lists (per-needle hits, per-star scores)."""
    values = [float(value) for item in items for value in item]
    return math.fsum(values) / len(values) if values else 0.0
