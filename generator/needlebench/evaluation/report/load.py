"""Reading lm-eval output: the one sample model every table and figure of ``needlebench report`` works on.

Input is any number of lm-eval ``--output_path`` folders (or single files) run with ``--log_samples``:
``results_<date>.json`` and ``samples_<task>_<date>.jsonl``. Every file is read; per model and task the newest
file wins; tasks are kept apart by task name (a custom task over ``single_en_4k`` is its own table row and
heatmap, never merged with ``needlebench_single_en_4k``). A model is named after ``--model_args pretrained``
(the last path part of a local folder, or the Hub repo id), else the lm-eval model name (``dummy``), unless
``--name PATH=NAME`` says otherwise.

Each logged sample becomes a :class:`Sample` (its config, dataset row and metrics), the samples of one task and
model a :class:`TaskRun`, everything read a :class:`Results`. Custom configs (experiment files) are found in the
dataset folder the run recorded (task metadata ``data_dir``) or given with ``--data-dir``, else binned by their
rows' own lengths and depths (:func:`observed_spec`). A ``judged_samples_*.jsonl`` beside a samples file
(``needlebench judge``) is read instead of it when its tag verifies (written by this user's judge for exactly that
samples file; else it is ignored, counted in one warning line, and the samples file read): rows of a NeedleBench
haystack family (S-RT/M-RT/M-RS) are scored with the judge's 1-10 rating x 10, unrated ones left out and counted.
Run health (``needlebench eval``) is read from ``needlebench_health_<date>.json`` beside each results file.

``--scoring reference`` (:func:`apply_scoring`) puts the reference-exact ``*_reference`` metrics in place of the
default ones (computed from the logged outputs for runs logged without them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.verify import MANIFEST_NAME
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.families import eval_family, metric_shape, per_needle_metrics
from needlebench.evaluation.families.base import CIRCULAR, NUMBERS, RELATION_PAIR
from needlebench.evaluation.families.cells import entity_order
from needlebench.evaluation.families.hooks import REFERENCE_SUFFIX
from needlebench.evaluation.harness.lm_eval_files import (
    JUDGED_PREFIX,
    RESULTS_FILE_RE,
    SAMPLES_FILE_RE,
    TAG_SUFFIX,
    health_path,
    response_text,
)
from needlebench.evaluation.judge.files import read_lines, verified_judged
from needlebench.evaluation.report.safety import (
    MAX_JSON_BYTES,
    MAX_MAGNITUDE,
    is_finite_number,
    loads,
    not_regular,
    open_binary,
    open_text,
    regular_file,
    shown,
    walk_files,
)
from needlebench.safe_fs import Folder
from needlebench.safe_json import JSONLimitError
from needlebench.tasks.experiment import experiment_from_record, experiment_spec
from needlebench.tasks.grid import ConfigSpec, Grid, registry
from needlebench.terminal import printable, warn


@dataclass
class Sample:
    """One logged lm-eval sample: its dataset row and its metrics."""

    spec: ConfigSpec
    doc: dict[str, Any]
    metrics: dict[str, Any]
    response: str = ""
    #: Judged (``judged_samples_*``): the 1-10 rating (None = the judge gave no usable rating); ``metrics`` then
    #: holds the rating x 10 under the family's headline metric (nothing when unrated), ``rule_metrics`` the
    #: rule-based metrics lm-eval logged.
    judged: bool = False
    judge: int | None = None
    judge_model: str = ""
    rule_metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskRun:
    """The samples of one task for one model (the newest samples file), with lm-eval's own numbers."""

    model: str
    task: str
    spec: ConfigSpec
    path: Path
    date: str
    samples: list[Sample] = field(default_factory=list)
    reported: dict[str, float] = field(default_factory=dict)  # lm-eval's results JSON: metric -> value
    #: Where the grid came from: ``built-in``, ``experiment (DIR)`` (a dataset manifest) or ``observed``.
    grid_source: str = "built-in"
    #: Which rule-based metrics the samples hold: ``default`` or ``reference`` (see :func:`apply_scoring`).
    scoring: str = "default"

    @property
    def standard(self) -> bool:
        """Is this the project's task of its config (``needlebench_<config>``)?"""
        return self.task == f"needlebench_{self.spec.name}"

    @property
    def custom(self) -> bool:
        """Is its config user-defined (an experiment file, or a config known only from its samples)?"""
        return self.spec.name not in registry()

    @property
    def label(self) -> str:
        """The task as figure titles name it: a custom config by its own name."""
        return self.spec.name if self.custom and self.standard else self.task

    @property
    def judged(self) -> bool:
        return any(sample.judged for sample in self.samples)

    @property
    def unscored(self) -> int:
        """Judged samples the judge gave no usable rating (left out of every mean)."""
        return sum(1 for sample in self.samples if sample.judged and sample.judge is None)

    @property
    def scorer(self) -> str:
        """Which scorer the numbers of this run come from (stated in the tables and figures)."""
        if not self.judged:
            return "rule (lm-eval metric)" if self.scoring == "default" else "rule (lm-eval *_reference metric)"
        models = sorted({s.judge_model for s in self.samples if s.judge_model})
        text = f"judge {', '.join(models) or '?'} (1-10 rating x 10)"
        return text + (f"; {self.unscored} unscored" if self.unscored else "")

    @property
    def entity(self) -> str:
        """Table row label: the model, plus the task name for a custom task."""
        return self.model if self.standard else f"{self.model} ({self.task})"

    @property
    def coverage(self) -> tuple[bool, str]:
        """(complete?, text) of what part of its config the run covers (its family's ``coverage``)."""
        return eval_family(self.spec).coverage(self)


@dataclass
class Results:
    """Everything read: task runs by (model, task) and lm-eval's reported metrics."""

    runs: list[TaskRun]
    reported: list[list[Any]]  # [model, task or group, metric, value, samples]
    sources: list[Path]
    scoring: str = "default"
    #: Values left out as not finite numbers or scores (NaN, Infinity, beyond 1e15, a row's score outside 0-100),
    #: each (file, where in it).
    left_out: list[tuple[str, str]] = field(default_factory=list)
    #: judged_samples_*.jsonl files read as their samples file instead (no tag, or a tag that does not verify).
    ignored_judged: int = 0
    #: Rows left out as off their known config's grid (:func:`off_grid`), each (file, line, what).
    off_grid: list[tuple[str, int, str]] = field(default_factory=list)

    def entities(self) -> list[str]:
        return sorted({run.entity for run in self.runs}, key=entity_order(self.runs))


def _bad(path: Path, line: int, what: str) -> NeedlebenchError:
    return NeedlebenchError(
        printable(f"{path}:{line}: {what}; pass lm-eval --output_path folders written with --log_samples")
    )


def _value(value: Any) -> str:
    """A value from a results file as a one-line message shows it (repr, at most 60 characters)."""
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_metrics(
    path: Path,
    line: int,
    metrics: dict[str, Any],
    left_out: list[tuple[str, str]] | None = None,
    highs: Mapping[str, float] | None = None,
) -> None:
    """A metric of the wrong type is a one-line error; one that is not a finite number in its range (``NaN``,
    ``Infinity``, a score outside 0-100, in a list too) is taken out of ``metrics`` and named in ``left_out`` (the
    means go on without it, never ``nan`` nor one row's outlier)."""
    for name, value in list(metrics.items()):
        shape = metric_shape(name)  # a family's (``EvalFamily.value_shapes``); None: one number
        if shape == CIRCULAR:
            if not (isinstance(value, list) and len(value) == 3):
                raise _bad(
                    path,
                    line,
                    f"metric {name} is {_value(value)}, not [item_id, rotation, correct]",
                )
            # the ATC hook logs `correct` as a bool (evaluation/families/atc.py); 2 or 0.5 is no verdict
            if not isinstance(value[2], (bool, int, float)) or value[2] not in (0, 1):
                del metrics[name]
                if left_out is not None:
                    left_out.append((printable(path), printable(f"line {line} metric {name}")))
            continue
        listed = shape in (NUMBERS, RELATION_PAIR)
        if listed != isinstance(value, list):
            raise _bad(
                path, line, f"metric {name} is {_value(value)}, not {'a list of numbers' if listed else 'a number'}"
            )
        if isinstance(value, list):
            if not all(isinstance(item, (int, float)) and not isinstance(item, bool) for item in value):
                raise _bad(path, line, f"metric {name} holds a non-number")
            finite = all(is_finite_number(item) for item in value) and _in_range(shape, value)
        elif not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _bad(path, line, f"metric {name} is {_value(value)}, not a number")
        else:
            high = max(SCORE_RANGE[1], (highs or {}).get(name, SCORE_RANGE[1]))
            finite = is_finite_number(value) and SCORE_RANGE[0] <= value <= high
        if not finite:
            del metrics[name]
            if left_out is not None:
                left_out.append((printable(path), printable(f"line {line} metric {name}")))


#: Every per-row score the needlebench hooks log is a percentage (evaluation/families/*.py: 100.0 for a hit); a value
#: outside it (one row's 1e14 would be the headline of its cell) is left out and counted like a NaN.
SCORE_RANGE = (0.0, 100.0)
#: The relation count of a ``(relations, score)`` pair (v2 ATC): at most the names of the longest chain (atc_*_512).
MAX_RELATIONS = 100_000


def _highs(doc: Mapping[str, Any], spec: ConfigSpec) -> dict[str, float]:
    """Scores a row may log above 100, for the metrics a family says so of (``EvalFamily.per_needle_ceiling``: M-RT's
    OpenCompass recall, which divides the hits by the distinct integer depths of the row). Only a config whose own
    depth grid truncates to fewer integers than it has depths can have such rows (the papers' grids cannot): there,
    at most 100 x the row's needles over its distinct integer depths, the needles no more than the config places.
    The row's own keywords and depths come from whoever wrote the samples file, so they never lift the ceiling
    beyond what the config allows."""
    depths = [float(depth) for depth in spec.depths] if spec.depths else []
    if len({int(depth) for depth in depths}) == len(depths):
        return {}
    keywords, requested = doc.get("keywords"), doc.get("requested_depths")
    if not isinstance(keywords, list) or not isinstance(requested, list) or len(keywords) != len(requested):
        return {}
    needles = min(len(keywords), max(spec.needle_counts or (1,)))
    slots = len({int(depth) for depth in requested if is_finite_number(depth)}) or 1
    return {name: 100.0 * needles / slots for name in per_needle_metrics()}


def _in_range(shape: str | None, value: list) -> bool:
    """The items of a list metric within their range: scores per star or needle, or a (relations, score) pair."""
    low, high = SCORE_RANGE
    if shape == RELATION_PAIR:
        return len(value) == 2 and 0 <= value[0] <= MAX_RELATIONS and low <= value[1] <= high
    return all(low <= item <= high for item in value)


def _number(value: Any, integer: bool = False) -> bool:
    return is_finite_number(value) and (not integer or isinstance(value, int))


#: Longest context a row may carry (tokens): built-in configs go to 1M, experiments to 2M
#: (data/experiment.schema.json); a longer one is no row of any needlebench dataset.
MAX_CONTEXT_LENGTH = 100_000_000
#: Most needles (or relations) of a row: v2 ATC chains reach 512, an experiment 10,000 needles (the schema's
#: maxItems); a needle count weights ATC's means, so 10**12 would outweigh every other item.
MAX_NUM_NEEDLES = MAX_RELATIONS

#: Dataset-row fields the report reads, with what each may hold when present: (test, what is allowed).
_DOC_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "context_length": (
        lambda v: _number(v, integer=True) and 0 <= v <= MAX_CONTEXT_LENGTH,
        f"an integer 0 to {MAX_CONTEXT_LENGTH:,}",
    ),
    "depth_percent": (lambda v: v is None or (_number(v) and 0 <= v <= 100), "a number 0 to 100 or null"),
    "num_needles": (
        lambda v: v is None or (_number(v, integer=True) and 1 <= v <= MAX_NUM_NEEDLES),
        f"an integer 1 to {MAX_NUM_NEEDLES:,} or null",
    ),
    "language": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "question_type": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "needles": (lambda v: v is None or isinstance(v, list), "a list or null"),
    "requested_depths": (
        lambda v: v is None or (isinstance(v, list) and all(_number(d) for d in v)),
        "a list of finite numbers or null",
    ),
    "needle_depths": (
        lambda v: v is None or (isinstance(v, list) and all(_number(d) for d in v)),
        "a list of finite numbers or null",
    ),
}


def _grid_values(values: Sequence[Any]) -> str:
    shown = sorted(values)
    return ", ".join(map(str, shown)) if len(shown) <= 6 else f"{shown[0]}-{shown[-1]}, {len(shown)} values"


def off_grid(spec: ConfigSpec, doc: Mapping[str, Any], record: Mapping[str, Any]) -> str | None:
    """What puts a row of a known config (built in, or recorded in a dataset manifest) off that config's grid: a
    language, context length, needle count or number of star scores no row of it has; None for a row on it. Such a
    row would be a grid cell of its own and move the paper mean (each cell counts alike) while the coverage counts
    the config's cells; it is left out instead. A config known only from its rows (:func:`observed_spec`) is their
    grid."""
    if is_observed(spec):
        return None
    language = doc.get("language")
    if spec.language and language is not None and language != spec.language:
        return f"language {_value(language)} is not {spec.name}'s ({spec.language})"
    length = doc.get("context_length")
    if spec.lengths and length is not None and length not in spec.lengths:
        return f"context_length {_value(length)} is not one of {spec.name}'s lengths ({_grid_values(spec.lengths)})"
    needles = doc.get("num_needles")
    if (
        spec.needle_counts
        and needles is not None
        and needles not in spec.needle_counts
        and _by_needle_count(spec, record)
    ):
        return (
            f"num_needles {_value(needles)} is not one of {spec.name}'s needle counts "
            f"({_grid_values(spec.needle_counts)})"
        )
    return eval_family(spec).off_grid(spec, record)


def _by_needle_count(spec: ConfigSpec, record: Mapping[str, Any]) -> bool:
    """Whether the report groups a config's rows by their needle count: M-RS grid cells, v1 ATC's CircularEval
    (weighted by needle count), v2 ATC's relation-weighted mean."""
    metrics = record.get("metrics")
    return eval_family(spec).cells_by_needle_count or "num_needles" in _required_fields(
        spec, dict.fromkeys(metrics) if isinstance(metrics, list) and all(isinstance(m, str) for m in metrics) else {}
    )


def _check_doc(path: Path, line: int, doc: Mapping[str, Any]) -> None:
    """Each field the report reads is of its type when present (a one-line error naming it otherwise)."""
    for key, (test, allowed) in _DOC_FIELDS.items():
        if key in doc and not test(doc[key]):
            raise _bad(path, line, f"doc {key} is {_value(doc[key])}, not {allowed}")


def _required_fields(spec: ConfigSpec, metrics: Mapping[str, Any]) -> tuple[str, ...]:
    """The dataset-row fields the tables and figures of a config cannot do without."""
    return eval_family(spec).required_fields(spec, metrics)


def is_observed(spec: ConfigSpec) -> bool:
    """Is the config known only from its samples (:func:`observed_spec`)?"""
    return spec.grid is not None and spec.grid.observed


#: Task label (a row's ``task``) -> the haystack family whose rows of an unknown config can be binned.
_FAMILY_OF_LABEL = {spec.task_label: spec.family for spec in registry().values() if eval_family(spec).haystack}


def _observable(doc: Mapping[str, Any]) -> str | None:
    """The family of a row of an unknown config that can be binned by its own length and depth, else None."""
    family = _FAMILY_OF_LABEL.get(str(doc.get("task")))
    depth = doc.get("depth_percent")
    if (
        family is None
        or not isinstance(doc.get("config"), str)
        or not isinstance(doc.get("context_length"), int)
        or isinstance(depth, bool)
        or not isinstance(depth, (int, float))
    ):
        return None
    return family


#: Most grid cells (lengths x depths x needle counts) of a config the report draws and counts; a paper config has
#: at most a few thousand.
MAX_GRID_CELLS = 250_000


def grid_cells(spec: ConfigSpec) -> int:
    return max(1, len(spec.lengths)) * max(1, len(spec.depths)) * max(1, len(spec.needle_counts or ()))


def _bounded(specs: dict[str, ConfigSpec], where: Path) -> dict[str, ConfigSpec]:
    """`specs` when each grid is at most :data:`MAX_GRID_CELLS` cells, else a one-line error naming the config."""
    for name, spec in specs.items():
        if grid_cells(spec) > MAX_GRID_CELLS:
            raise NeedlebenchError(
                printable(
                    f"{where}: the grid of {name} has {grid_cells(spec):,} cells; the report draws at most "
                    f"{MAX_GRID_CELLS:,}"
                )
            )
    return specs


def observed_spec(name: str, family: str, docs: Sequence[Mapping[str, Any]]) -> ConfigSpec:
    """A config known only from its rows (no registry entry, no dataset manifest at hand): its grid is the
    lengths, depths, repeats and needle counts its rows carry; one row per grid cell of its family and run."""
    first = docs[0]
    repeats = [doc.get("repeat") for doc in docs]
    grid = Grid(
        lengths=tuple(sorted({int(doc["context_length"]) for doc in docs})),
        depths=tuple(sorted({float(doc["depth_percent"]) for doc in docs})),
        repeats=len({r for r in repeats if isinstance(r, int)}) or 1,
        needle_counts=tuple(
            sorted({int(doc.get("num_needles") or len(doc.get("needles") or []) or 1) for doc in docs})
        ),
        observed=True,
    )
    return ConfigSpec(name, family, str(first.get("language") or ""), "custom", grid=grid)


def _apply_judge(sample: Sample, record: Mapping[str, Any], path: Path, line: int) -> None:
    """Score a sample of a NeedleBench haystack family with its judge rating (1-10, shown as rating x 10)."""
    family = eval_family(sample.spec)
    if not family.haystack:
        return  # ATC / Counting-Stars keep their rule scores (CircularEval, star lists); the judge never rates them
    judge = record.get("judge")
    if not isinstance(judge, dict):
        raise _bad(path, line, "judged sample without a 'judge' object (rewrite it with `needlebench judge`)")
    score = judge.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 10):
        raise _bad(path, line, f"judge score is {score!r}, not an integer 1-10 or null")
    sample.judged, sample.judge, sample.judge_model = True, score, str(judge.get("model") or "")
    sample.rule_metrics = sample.metrics
    sample.metrics = {} if score is None else {family.headline_metric(sample.spec): 10.0 * score}


#: Largest samples file read (bytes): the largest built-in config (3,960 rows at up to 1M tokens, the prompt logged
#: twice) gives about 40 GB; a larger file is a one-line error, never read for hours.
MAX_SAMPLES_BYTES = 1 << 40
#: Most lines of a samples file read: lm-eval logs one per row and filter, a built-in config has at most 3,960 rows.
MAX_SAMPLES_LINES = 10_000_000


def read_samples(
    path: Path,
    lookup: Callable[[str], ConfigSpec | None] | None = None,
    observe: bool = True,
    left_out: list[tuple[str, str]] | None = None,
    expect: bytes | None = None,
    off: list[tuple[str, int, str]] | None = None,
) -> list[Sample]:
    """The samples of one ``samples_*.jsonl`` (or ``judged_samples_*.jsonl``) file, read line by line (each line at
    most :data:`~needlebench.evaluation.judge.files.MAX_SAMPLES_LINE` bytes; the file is never held whole). With
    `expect` (a sha256), a file whose bytes read differ from it is a one-line error.

    ``lookup`` finds a config by name (default: the built-in registry). Rows of a config it does not know are
    kept when ``observe`` and they carry the NeedleBench haystack columns (``task`` S-RT/M-RT/M-RS,
    ``context_length``, ``depth_percent``): their grid is then what the rows hold (:func:`observed_spec`). Other
    rows are skipped. A malformed line is a one-line error naming the file and the line; a metric that is not a
    finite number is left out and named in ``left_out``; a row off its known config's grid (:func:`off_grid`) is
    left out and named in `off` (file, line, what).
    """
    configs = registry()
    find = lookup or configs.get
    samples = []
    unknown: dict[str, list[tuple[int, dict, Any]]] = defaultdict(list)
    families: dict[str, str] = {}
    seen: dict[tuple[str, ...], int] = {}
    judged_file = path.name.startswith(JUDGED_PREFIX)
    digest = hashlib.sha256()
    # read up to the size the file had when opened: one another process keeps appending to ends there
    with open_binary(path, limit=MAX_SAMPLES_BYTES) as handle:
        for number, raw in enumerate(read_lines(handle, shown(path), digest), start=1):
            if number > MAX_SAMPLES_LINES:
                raise _bad(path, number, f"more than {MAX_SAMPLES_LINES:,} lines; lm-eval logs one per row of a task")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _bad(path, number, "not UTF-8 text") from None
            if not line.strip():
                continue
            _read_record(
                path, number, line, find, observe, judged_file, samples, unknown, families, left_out, seen, off
            )
    if expect is not None and digest.digest() != expect:
        raise NeedlebenchError(f"{shown(path)} changed while it was read; run the report again")
    for name, entries in unknown.items():
        docs = [doc for _n, _r, doc in entries]
        spec = _bounded({name: observed_spec(name, families[name], docs)}, path)[name]
        samples += [_sample(path, number, record, doc, spec, judged_file, left_out) for number, record, doc in entries]
    return samples


def _read_record(
    path: Path,
    number: int,
    line: str,
    find: Callable[[str], ConfigSpec | None],
    observe: bool,
    judged_file: bool,
    samples: list[Sample],
    unknown: dict[str, list[tuple[int, dict, Any]]],
    families: dict[str, str],
    left_out: list[tuple[str, str]] | None,
    seen: dict[tuple[str, ...], int],
    off: list[tuple[str, int, str]] | None = None,
) -> None:
    """One line of a samples file: a sample added to `samples`, a row of an unknown config to `unknown`, or none."""
    try:
        record = loads(line)
    except json.JSONDecodeError as error:
        raise _bad(path, number, f"not a JSON line ({error.msg})") from None
    except JSONLimitError as error:
        raise _bad(path, number, str(error)) from None
    if not isinstance(record, dict):
        raise _bad(path, number, "not a JSON object")
    doc = record.get("doc")
    if not isinstance(doc, dict):
        raise _bad(path, number, "no 'doc' object (the dataset row)")
    _check_doc(path, number, doc)
    # lm-eval logs each (doc_id, filter) of a task once (lm_eval/evaluator.py, the `samples` it writes per task),
    # and a row id is one row of its config: a row repeated under either would count twice in every mean, n and
    # coverage
    keys = []
    if record.get("doc_id") is not None:
        keys.append(("doc_id", repr(record.get("filter")), repr(record.get("doc_id"))))
    if doc.get("id") is not None:
        keys.append(("id", repr(record.get("filter")), repr(doc.get("config")), repr(doc.get("id"))))
    for key in keys:
        first = seen.setdefault(key, number)
        if first != number:
            what = f"row {_value(doc.get('id'))} (doc_id {_value(record.get('doc_id'))}) again, first at line {first}"
            raise _bad(path, number, f"{what}; a samples file holds each row once")
    spec = find(str(doc.get("config")))
    if spec is None:
        family = _observable(doc) if observe else None
        if family:
            unknown[str(doc["config"])].append((number, record, doc))
            families.setdefault(str(doc["config"]), family)
        return
    outside = off_grid(spec, doc, record)
    if outside is not None:
        if off is not None:
            off.append((printable(path), number, printable(outside)))
        return
    samples.append(_sample(path, number, record, doc, spec, judged_file, left_out))


def _sample(
    path: Path,
    number: int,
    record: dict,
    doc: dict,
    spec: ConfigSpec,
    judged: bool,
    left_out: list[tuple[str, str]] | None = None,
) -> Sample:
    names = record.get("metrics", [])
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise _bad(path, number, "'metrics' is not a list of metric names")
    metrics = {name: record[name] for name in names if name in record}
    _check_metrics(path, number, metrics, left_out, _highs(doc, spec))
    for key in _required_fields(spec, metrics):
        if doc.get(key) is None:
            raise _bad(path, number, f"doc {key} is missing; a {spec.name} row needs it")
    sample = Sample(spec, doc, metrics, response_text(record))
    if judged:
        _apply_judge(sample, record, path, number)
    return sample


def read_results_json(path: Path) -> dict[str, Any]:
    """An lm-eval ``results_*.json``; malformed JSON is a one-line error naming the file and line."""
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
        raise _bad(path, 1, "not an lm-eval results object (no 'results' mapping)")
    return data


def _read_json(path: Path) -> Any:
    """A JSON file of a results folder: a regular file (never a link) of at most 256 MiB, parsed with limits."""
    try:
        with open_text(path, limit=MAX_JSON_BYTES) as handle:
            text = handle.read()
    except UnicodeDecodeError:
        raise _bad(path, 1, "not UTF-8 text") from None
    try:
        return loads(text)
    except json.JSONDecodeError as error:
        raise _bad(path, error.lineno, f"not valid JSON ({error.msg})") from None
    except JSONLimitError as error:
        raise _bad(path, 1, str(error)) from None


def read_health(results_path: Path) -> dict[str, Any]:
    """The run health of a results file: ``{"tasks": {task: {key: value}}, "not_run": {task: n-samples}}``, from
    its ``needlebench_health_<date>.json`` (empty when there is none; older runs carry the keys inline in the
    results, which :func:`load_results` reads as metrics)."""
    path = health_path(results_path)
    if not regular_file(path):
        return {"tasks": {}, "not_run": {}}
    try:
        data = _read_json(path)
    except NeedlebenchError as error:
        raise NeedlebenchError(printable(f"{path}: not a readable run-health file ({error})")) from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks", {}), dict):
        raise _bad(path, 1, "not a needlebench run-health object (no 'tasks' mapping)")
    tasks, not_run = data.get("tasks") or {}, data.get("not_run") or {}
    if not isinstance(not_run, dict):
        raise _bad(path, 1, "not_run is not a mapping of task names")
    for where, mapping in (("tasks", tasks), ("not_run", not_run)):
        for task, value in mapping.items():
            if not isinstance(value, dict):
                raise _bad(path, 1, f"{where}.{task} is {_value(value)}, not an object")
    return {"tasks": tasks, "not_run": not_run}


def _model_args(config: Mapping[str, Any]) -> dict[str, Any]:
    args = config.get("model_args") or {}
    if isinstance(args, dict):
        return args
    parsed: dict[str, Any] = {}
    for part in str(args).split(","):
        key, sep, value = part.partition("=")
        if sep:
            parsed[key.strip()] = value.strip()
    return parsed


def model_display_name(results: Mapping[str, Any]) -> str | None:
    """The model of an lm-eval results JSON: ``pretrained`` (last path part of a folder, or the repo id)."""
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    args = _model_args(config)
    for key in ("pretrained", "model", "path"):
        value = args.get(key)
        if value:
            return short_model_name(str(value))
    model = config.get("model")
    return str(model) if model else None


def short_model_name(value: str) -> str:
    """``/models/SmolLM2-135M/`` -> ``SmolLM2-135M``; a Hub repo id ``ORG/NAME`` stays as it is."""
    text = value.rstrip("/\\")
    looks_local = text.startswith(("/", ".", "~")) or "\\" in text or text.count("/") > 1 or _exists(text)
    return Path(text).name if looks_local else text


def _exists(text: str) -> bool:
    """Whether a local path of that name exists (False for a name no path can have: too long, a NUL)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _apply_names(
    name: str, pretrained: str | None, folder: Path, names: Mapping[str, str], used: set[str] | None = None
) -> str:
    """The ``--name`` given for a model (by its name, its ``pretrained`` value or a folder holding its results),
    else its own name; the key that matched is added to ``used``."""
    for key, value in names.items():
        if key in (name, pretrained):
            (used if used is not None else set()).add(key)
            return value
        try:
            target = Path(key).expanduser().resolve()
        except OSError:
            continue
        if folder == target or target in folder.parents:
            (used if used is not None else set()).add(key)
            return value
    return name


#: Longest model name kept (characters): a longer one (a hostile ``pretrained``) is cut to its start and a hash of
#: the whole, the same wherever it is used, so no table, figure or file name works on a name of megabytes.
MAX_MODEL_CHARS = 300


def bounded_name(name: str) -> str:
    """`name` when at most :data:`MAX_MODEL_CHARS` characters, else its start and the first 12 hex digits of the
    sha256 of the whole (two long names that share their start stay apart)."""
    if len(name) <= MAX_MODEL_CHARS:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[: MAX_MODEL_CHARS - 13]}-{digest}"


def valid_text(text: str) -> str:
    """`text` with each byte a file name held that is not UTF-8 (``os.fsdecode`` keeps it as a lone surrogate,
    PEP 383) as U+FFFD, so that the name can be written to a UTF-8 file."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def _judged_or_samples(path: Path, ignored: list[Path]) -> tuple[Path, bytes | None]:
    """The file to read for the samples file `path` (or a ``judged_samples_*`` file given alone), and the sha256 its
    bytes must have: the judged file beside the samples file when its tag verifies
    (:func:`~needlebench.evaluation.judge.files.verified_judged`), else the samples file (a judged file there is added
    to `ignored`). A judged file given alone whose tag does not verify is read as its samples file, which must then
    be there."""
    if path.name.startswith(JUDGED_PREFIX):
        samples, judged = path.with_name(path.name.removeprefix(JUDGED_PREFIX)), path
    else:
        samples, judged = path, path.with_name(JUDGED_PREFIX + path.name)
    if not regular_file(judged):
        return samples, None
    try:
        with Folder.open(path.parent) as folder:
            digest = verified_judged(folder, samples.name)
    except NeedlebenchError as error:
        raise NeedlebenchError(printable(str(error))) from None
    except OSError as error:
        raise NeedlebenchError(f"cannot read {shown(judged)}{TAG_SUFFIX}: {error.strerror}") from None
    if digest is not None:
        return judged, digest
    ignored.append(judged)
    if not regular_file(samples):
        raise NeedlebenchError(
            f"{shown(judged)} was not written by this user's needlebench judge (no {TAG_SUFFIX} beside it that "
            f"verifies) and {shown(samples.name)} is not beside it; pass the samples file, or run needlebench judge"
        )
    return samples, None


def _pretrained(results: Mapping[str, Any]) -> str | None:
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    value = _model_args(config).get("pretrained")
    return str(value) if value else None


def _collect(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """The samples and results files under `paths` (a path the user typed is followed; below it, nothing is: a
    link, FIFO, device or socket under an lm-eval file's name is a one-line error)."""
    samples: list[Path] = []
    results: list[Path] = []
    for path in paths:
        try:
            given = os.stat(path)
            root = path.resolve()
        except (OSError, ValueError, RuntimeError):
            raise NeedlebenchError(
                f"results path {shown(repr(str(path)))} does not exist; pass lm-eval --output_path folders"
            ) from None
        single = not stat.S_ISDIR(given.st_mode)
        candidates = [(root, os.lstat(root))] if single else sorted(walk_files(root))
        for candidate, info in candidates:
            name = candidate.name
            if SAMPLES_FILE_RE.match(name) or (single and SAMPLES_FILE_RE.match(name.removeprefix(JUDGED_PREFIX))):
                found = samples
            elif RESULTS_FILE_RE.match(name):
                found = results
            elif single:
                raise NeedlebenchError(
                    f"{shown(repr(str(path)))} is neither samples_<task>_<date>.jsonl nor results_<date>.json"
                )
            else:
                continue
            if not stat.S_ISREG(info.st_mode):
                raise not_regular(candidate, info)
            found.append(candidate)
    return sorted(set(samples)), sorted(set(results))


def experiment_specs(folder: Path) -> dict[str, ConfigSpec]:
    """The experiment configs recorded in the manifest of the dataset folder ``folder`` (not registered: two
    folders may hold experiments of one name); a folder that is not a dataset is a one-line error."""
    manifest = read_manifest(Path(folder))
    specs: dict[str, ConfigSpec] = {}
    for record in (manifest.get("experiments") or {}).values():
        experiment = experiment_from_record(record)
        specs[experiment.name] = experiment_spec(experiment)
    return specs


def _recorded_data_dir(results: Mapping[str, Any] | None, task: str) -> Path | None:
    """The dataset folder an lm-eval run read a task from (task metadata ``data_dir``), if recorded."""
    configs = (results or {}).get("configs")
    config = configs.get(task) if isinstance(configs, dict) else None
    metadata = config.get("metadata") if isinstance(config, dict) else None
    value = metadata.get("data_dir") if isinstance(metadata, dict) else None
    if not isinstance(value, str) or not value or "\0" in value:
        return None
    return Path(value).expanduser()


class _SpecFinder:
    """Finds the config of a samples file's rows: built-in, else an experiment of the dataset folder the run
    recorded (``data_dir``), else of a ``--data-dir`` folder; the source of each is remembered."""

    def __init__(self, data_dirs: Sequence[Path]) -> None:
        self.builtin = registry()
        self.folders: dict[Path, dict[str, ConfigSpec]] = {}
        self.given = [Path(folder).resolve() for folder in data_dirs]
        for folder in self.given:
            self.folders[folder] = _bounded(experiment_specs(folder), folder / MANIFEST_NAME)
        self.sources: dict[int, str] = {}

    def _recorded(self, folder: Path | None) -> dict[str, ConfigSpec]:
        if folder is None:
            return {}
        try:
            folder = folder.resolve()
        except (OSError, RuntimeError):
            return {}
        if folder not in self.folders:
            self.folders[folder] = {}
            try:  # a results file names this folder, not the user: only a regular manifest is read (no FIFO)
                if stat.S_ISREG(os.lstat(folder / MANIFEST_NAME).st_mode):
                    self.folders[folder] = _bounded(experiment_specs(folder), folder / MANIFEST_NAME)
            except (NeedlebenchError, OSError, ValueError, TypeError, KeyError, RecursionError):
                pass  # moved, or not a dataset on this machine: bin by the rows instead
        return self.folders[folder]

    def lookup(self, recorded: Path | None) -> Callable[[str], ConfigSpec | None]:
        def find(name: str) -> ConfigSpec | None:
            if name in self.builtin:
                return self.builtin[name]
            folders = [(folder, self.folders[folder]) for folder in self.given]  # --data-dir first
            if recorded is not None:
                specs = self._recorded(recorded)
                if specs:
                    folders.append((recorded.resolve(), specs))
            for folder, specs in folders:
                if name in specs:
                    self.sources[id(specs[name])] = f"experiment ({source_label(folder)})"
                    return specs[name]
            return None

        return find

    def source(self, spec: ConfigSpec) -> str:
        if is_observed(spec):
            return "observed in samples"
        return self.sources.get(id(spec), "built-in")


def load_results(
    paths: Sequence[Path | str],
    names: Mapping[str, str] | None = None,
    data_dirs: Sequence[Path | str] = (),
) -> Results:
    """Read every samples and results file under ``paths``; the newest per (model, task) wins.

    A ``judged_samples_*`` file beside a samples file (``needlebench judge``) is read instead of it. Configs that
    are not built in are found in the dataset folder the run recorded (``data_dir``) or in ``data_dirs``, else
    binned by the lengths and depths their rows carry."""
    finder = _SpecFinder([Path(folder) for folder in data_dirs])
    paths = [Path(path) for path in paths]
    if not paths:
        raise NeedlebenchError("no results given; pass lm-eval --output_path folders or files")
    names = dict(names or {})
    sample_files, result_files = _collect(paths)
    if not sample_files:
        raise NeedlebenchError(
            f"no samples_*.jsonl under {', '.join(map(str, paths))}; run lm-eval with --log_samples and --output_path"
        )
    parsed = {path: read_results_json(path) for path in result_files}

    used: set[str] = set()
    matchable: dict[str, None] = {}  # what a --name key may name: models, pretrained values, results paths

    def model_of(results: Mapping[str, Any] | None, folder: Path) -> str:
        raw = bounded_name(valid_text((model_display_name(results) if results else None) or folder.name))
        pretrained = _pretrained(results) if results else None
        matchable.update(dict.fromkeys(bounded_name(item) for item in (raw, pretrained) if item))
        return bounded_name(_apply_names(raw, pretrained, folder, names, used))

    left_out: list[tuple[str, str]] = []
    reported: dict[tuple[str, str], tuple[str, dict[str, float], Any]] = {}
    results_by_folder: dict[Path, list[tuple[str, Path]]] = defaultdict(list)
    for path, data in parsed.items():
        date = RESULTS_FILE_RE.match(path.name).group("date")  # type: ignore[union-attr]
        results_by_folder[path.parent].append((date, path))
        model = model_of(data, path.parent)
        counts = data.get("n-samples") if isinstance(data.get("n-samples"), dict) else {}
        health = read_health(path)
        tasks = dict(data.get("results", {}))
        for task in health["not_run"]:  # none of its rows fit: not in lm-eval's results, counted in the health
            tasks.setdefault(task, {})
            counts = {**counts, task: health["not_run"][task]}
        for task, metrics in tasks.items():
            if not isinstance(metrics, dict):
                continue
            count = counts.get(task)
            original = count.get("original") if isinstance(count, dict) else None
            rows = original if _number(original, integer=True) and original >= 0 else None
            values = _reported_values(
                path, task, metrics, lambda key: "," in key and "_stderr" not in key, left_out, split=True, rows=rows
            )
            values.update(
                _reported_values(
                    health_path(path),
                    task,
                    health["tasks"][task] if task in health["tasks"] else {},
                    HEALTH.__contains__,
                    left_out,
                    rows=rows,
                )
            )
            effective = count.get("effective") if isinstance(count, dict) else None
            key = (model, task)
            if key not in reported or date > reported[key][0]:
                reported[key] = (
                    date,
                    values,
                    effective if _number(effective, integer=True) or effective is None else None,
                )

    newest: dict[tuple[str, str], TaskRun] = {}
    dated: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    ignored: list[Path] = []
    off: list[tuple[str, int, str]] = []
    for path in sample_files:
        match = SAMPLES_FILE_RE.match(path.name.removeprefix(JUDGED_PREFIX))
        task, date = valid_text(match.group("task")), match.group("date")  # type: ignore[union-attr]
        candidates = sorted(results_by_folder.get(path.parent, []))
        same = [p for d, p in candidates if d == date]
        source = same[0] if same else (candidates[-1][1] if candidates else None)
        model = model_of(parsed[source] if source else None, path.parent)
        key = (model, task)
        dated.setdefault(key, []).append((date, path))
        if key in newest and newest[key].date >= date:
            continue
        read, expect = _judged_or_samples(path, ignored)
        recorded = _recorded_data_dir(parsed[source] if source else None, task)
        samples = read_samples(read, finder.lookup(recorded), left_out=left_out, expect=expect, off=off)
        if not samples:
            continue
        run = TaskRun(model, task, samples[0].spec, read, date, samples, grid_source=finder.source(samples[0].spec))
        newest[key] = run
    if ignored:
        warn(
            f"{len(ignored):,} judged_samples_*.jsonl file(s) (first: {shown(ignored[0])}) were not written by this "
            "user's needlebench judge for the samples file beside them (no tag, or a tag that does not verify: from "
            "someone else, another machine, or stale); they are ignored and the samples files' own scores used"
        )
    if off:
        warn(off_grid_text(off))
    superseded = superseded_text(newest, dated)
    if superseded:
        warn(superseded)
    if not newest:
        raise NeedlebenchError(
            f"the samples under {', '.join(map(str, paths))} hold no needlebench task rows (rows with a known config)"
        )
    unmatched = [key for key in names if key not in used]
    if unmatched:
        choices = [*matchable, *(str(path) for path in paths)]
        raise NeedlebenchError(
            printable(
                f"--name {unmatched[0]}={names[unmatched[0]]} matches no model or results path; "
                f"PATH can be: {', '.join(dict.fromkeys(choices))}"
            )
        )
    for (model, task), run in newest.items():
        if (model, task) in reported:
            run.reported = reported[(model, task)][1]
    rows = [
        [model, task, metric, value, count]
        for (model, task), (_date, values, count) in sorted(reported.items())
        for metric, value in values.items()
    ]
    runs = sorted(newest.values(), key=lambda run: (run.model.lower(), run.task))
    return Results(runs, rows, paths, left_out=left_out, ignored_judged=len(ignored), off_grid=off)


def superseded_text(newest: Mapping[tuple[str, str], TaskRun], dated: Mapping[tuple[str, str], list]) -> str | None:
    """The one warning line when a (model, task) has several samples files: the report takes the newest by the date
    in its name, which whoever can write the results folder chooses (a file dated 2099 wins over the user's own
    run), so the line names the file taken, and says so when its date is later than now."""
    import datetime

    several = sorted(key for key, files in dated.items() if len(files) > 1 and key in newest)
    if not several:
        return None
    model, task = several[0]
    run = newest[(model, task)]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%S")
    future = [key for key in several if newest[key].date[:19] > now]
    later = f"; {len(future):,} of them dated later than now (first: {shown(newest[future[0]].path)})" if future else ""
    return (
        f"{len(several):,} model/task pair(s) have several samples files; the newest by the date in its name is "
        f"reported (first: {model} {task}: {shown(run.path)}, over {len(dated[(model, task)]) - 1:,} other(s))"
        f"{later}"
    )


def off_grid_text(off: Sequence[tuple[str, int, str]]) -> str:
    """The one warning line of rows left out as off their config's grid: how many, in how many files, the first."""
    path, line, what = off[0]
    files = len({entry[0] for entry in off})
    return (
        f"left out {len(off):,} row(s) in {files:,} file(s) that are not on their config's grid (first: {path} line "
        f"{line}: {what}); every mean and coverage is over the config's own grid cells"
    )


def _reported_values(
    path: Path,
    task: str,
    metrics: Mapping[str, Any],
    wanted: Callable[[str], bool],
    left_out: list[tuple[str, str]],
    split: bool = False,
    rows: int | None = None,
) -> dict[str, float]:
    """The numbers of a task in a results or health file (metric -> value); a number that is not finite (or
    beyond 1e15) or outside what it can be (:func:`_reported_range`; `rows`: the task's rows, lm-eval's
    ``n-samples`` ``original``) is left out and named in ``left_out``, other types are skipped as lm-eval's own
    notes (``"N/A"`` standard errors, aliases)."""
    values: dict[str, float] = {}
    for key, value in metrics.items():
        if not wanted(key) or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = key.split(",")[0] if split else key
        if not is_finite_number(value) or not _reported_range(name, value, rows):
            left_out.append((printable(path), printable(f"{task} {key}")))
            continue
        values[name] = float(value)
    return values


def _reported_range(name: str, value: float, rows: int | None) -> bool:
    """Whether a reported number is one its metric can be: a needlebench metric (the mean of per-row scores) 0-100
    (a family's per-needle metrics up to 100 per needle, :func:`_highs`), a run-health count a whole number from 0
    to the task's rows (when known), the share ``no_final_answer`` 0-1. Other lm-eval metrics (another task's
    perplexity) are shown as they are."""
    if name in HEALTH:
        if name == "no_final_answer":
            return 0 <= value <= 1
        return float(value).is_integer() and 0 <= value <= (rows if rows is not None else MAX_MAGNITUDE)
    if name in needlebench_metrics():
        return SCORE_RANGE[0] <= value <= SCORE_RANGE[1] * (MAX_NUM_NEEDLES if name in per_needle_metrics() else 1)
    return True


@functools.cache
def needlebench_metrics() -> frozenset[str]:
    """Every metric a needlebench task reports (the aggregations of each built-in config's lm-eval task)."""
    return frozenset(
        metric for spec in registry().values() for metric, _aggregation in eval_family(spec).template(spec).aggregations
    )


#: ``--scoring``: the default metrics, or their reference-exact ``*_reference`` twins.
SCORING_CHOICES = ("default", "reference")


#: What every table title and figure subtitle says about the scoring.
SCORING_LABEL = {
    "default": "scoring: default (needlebench rules)",
    "reference": "scoring: reference (OpenCompass evaluators, Counting-Stars viz.ipynb; the *_reference metrics)",
}


def check_scoring(scoring: str) -> str:
    """``scoring`` when it is one of :data:`SCORING_CHOICES`, else a one-line error naming it."""
    if scoring not in SCORING_CHOICES:
        raise NeedlebenchError(f"--scoring {scoring!r} is not allowed; allowed: {', '.join(SCORING_CHOICES)}")
    return scoring


def _reference_twins(sample: Sample) -> dict[str, Any]:
    """A sample's ``*_reference`` metrics: as lm-eval logged them, or, for samples logged before they existed,
    computed from the logged output with the task's hook."""
    logged = {name: value for name, value in sample.metrics.items() if name.endswith(REFERENCE_SUFFIX)}
    if logged:
        return logged
    hook = eval_family(sample.spec).template(sample.spec).hook
    try:
        computed = hook(sample.doc, [sample.response])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise NeedlebenchError(
            printable(
                f"cannot score row {_value(sample.doc.get('id'))} of {sample.spec.name} by the reference rules "
                f"({_value(error)}); its samples lack the *_reference metrics and its doc the columns to compute "
                "them: rerun the task"
            )
        ) from None
    return {name: value for name, value in computed.items() if name.endswith(REFERENCE_SUFFIX)}


def apply_scoring(results: Results, scoring: str) -> Results:
    """Make ``scoring``'s metrics the ones every table and figure reads.

    ``default`` leaves the samples as read. ``reference`` puts each rule-scored sample's ``<metric>_reference``
    under ``<metric>`` (so every mean, CircularEval and grid follows the reference's aggregation unchanged) and
    drops metrics without a reference twin (M-RS ``strict``); lm-eval's reported numbers are swapped the same way.
    Judged samples keep their judge scores.
    """
    results.scoring = check_scoring(scoring)
    for run in results.runs:
        run.scoring = scoring
    if scoring == "default":
        return results
    for run in results.runs:
        for sample in run.samples:
            if sample.judged:
                continue
            twins = _reference_twins(sample)
            sample.metrics = {name.removesuffix(REFERENCE_SUFFIX): value for name, value in twins.items()}
        run.reported = {
            name.removesuffix(REFERENCE_SUFFIX): value
            for name, value in run.reported.items()
            if name.endswith(REFERENCE_SUFFIX)
        }
    return results


#: Run-health keys ``needlebench eval`` adds to each task of the results JSON (shown in their own table).
HEALTH = ("skipped_too_long", "output_truncated", "no_final_answer")


def source_label(path: Path) -> str:
    """A results path as a report names it (reports are shared): relative to the working folder when inside it,
    else its last two parts, never the machine's absolute path."""
    path = Path(path)
    try:
        return str(path.absolute().relative_to(Path.cwd())) or "."
    except ValueError:
        return str(Path(*path.absolute().parts[1:][-2:]))
