"""The files an lm-eval run of our tasks leaves in its output folder, and the copies needlebench writes beside them.

lm-eval's ``EvaluationTracker`` (``lm_eval/loggers/evaluation_tracker.py``: ``save_results_aggregated``,
``save_results_samples``) writes, under ``<output_path>/<model folder>/``, one ``results_<date>.json`` per run and
one ``samples_<task>_<date>.jsonl`` per task with ``--log_samples``; each line of a samples file is one logged
sample (``lm_eval/evaluator.py``: ``doc``, ``resps``, ``filtered_resps``, the metric values...). Beside them
``needlebench eval`` writes ``needlebench_health_<date>.json`` and ``needlebench judge`` writes
``judged_<samples name>`` with its ``.tag``. The report, the judge and the run-health writer read these names and
fields from here only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: lm-eval's date stamp in its file names (``2025-01-31T12-00-00.123456``).
_DATE = r"(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)"
#: First part of a results file's name.
RESULTS_PREFIX = "results_"
#: A results file: ``results_<date>.json``.
RESULTS_FILE_RE = re.compile(rf"^{RESULTS_PREFIX}{_DATE}\.json$")
#: First part of a samples file's name.
SAMPLES_PREFIX = "samples_"
#: Last part of a samples file's name.
SAMPLES_SUFFIX = ".jsonl"
#: A samples file as lm-eval names it: ``samples_<task>_<date>.jsonl``.
SAMPLES_FILE_RE = re.compile(rf"^{SAMPLES_PREFIX}(?P<task>.+)_{_DATE}\.jsonl$")
#: Any file named like a samples file (``needlebench judge`` judges every one of them).
SAMPLES_RE = re.compile(rf"^{SAMPLES_PREFIX}.+\.jsonl$")

#: ``needlebench judge`` writes ``judged_samples_<task>_<date>.jsonl`` beside each samples file ...
JUDGED_PREFIX = "judged_"
#: ... and its tag, ``judged_<samples name>`` + this.
TAG_SUFFIX = ".tag"

#: ``needlebench eval`` writes the run health of ``results_<date>.json`` as ``needlebench_health_<date>.json``.
HEALTH_FILE_PREFIX = "needlebench_health_"

#: The fields of a logged sample holding the model's output: as generated, and after the task's filters (what the
#: metrics scored); each a list (one entry per request) of lists (one per repeat).
RESPONSES = "resps"
FILTERED_RESPONSES = "filtered_resps"


def samples_prefix(task: str) -> str:
    """How the samples files of ``task`` begin (``samples_<task>_``; more than one task can match a prefix, see
    :data:`SAMPLES_FILE_RE` for the task a name is of)."""
    return f"{SAMPLES_PREFIX}{task}_"


def health_path(results_path: Path) -> Path:
    """The run-health file of a ``results_<date>.json``: ``needlebench_health_<date>.json`` beside it."""
    date = results_path.name.removeprefix(RESULTS_PREFIX).removesuffix(".json")
    return results_path.with_name(f"{HEALTH_FILE_PREFIX}{date}.json")


def _first_text(value: Any) -> str:
    """The first string of lm-eval's nested response lists ("" when there is none)."""
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else ""


def response_text(record: Mapping[str, Any]) -> str:
    """The model output the metrics scored of a logged sample: its filtered response, else its raw one."""
    return _first_text(record.get(FILTERED_RESPONSES) or record.get(RESPONSES) or "")


def raw_response(record: Mapping[str, Any]) -> str:
    """The model output of a logged sample as generated (before the task's filters)."""
    return _first_text(record.get(RESPONSES) or "")
