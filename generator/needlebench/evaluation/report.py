"""``needlebench report``: the papers' tables and figures, models side by side, from lm-eval output.

Input is any number of lm-eval ``--output_path`` folders (or single files) run with ``--log_samples``:
``results_<date>.json`` and ``samples_<task>_<date>.jsonl``. Every file is read; per model and task the newest
file wins; tasks are kept apart by task name (a custom task over ``single_en_4k`` is its own table row and
heatmap, never merged with ``needlebench_single_en_4k``). A model is named after ``--model_args pretrained``
(the last path part of a local folder, or the Hub repo id), else the lm-eval model name (``dummy``), unless
``--name PATH=NAME`` says otherwise.

Two means, each under its own name:

* the **paper mean** (the tables' headline numbers): NeedleBench's summariser averages per grid cell, each cell
  the mean over its repeats: S-RT per (length, depth), M-RT per length, M-RS per (length, depth, needle
  count); the per-size overall is ``0.4 S-RT + 0.3 M-RT + 0.3 M-RS``. ATC is CircularEval ``perf_4`` per needle
  count (whole items only), weighted by needle count per category, ATC-CE-Overall the plain mean of the four
  categories. Counting-Stars is the mean over the star x length grid (``viz.ipynb``), Avg. the mean of the
  four tasks.
* the **lm-eval row mean**: what ``lm_eval`` prints (every row weighted alike), shown beside it in the
  ``scores`` table.

Every table value states its sample count (an empty one, ``–``, has none); a value built from part of a config is
marked ``[partial]`` (``[partial: EN only]`` where both languages are expected) and the row's coverage says what
it covers. Figures are drawn by :mod:`needlebench.evaluation.report_figures`.

Custom configs (experiment files) are found in the dataset folder the run recorded (task metadata ``data_dir``)
or given with ``--data-dir``, else binned by their rows' own lengths and depths (:class:`ObservedSpec`); they are
named by their config name and summarised in the ``experiments`` table (mean over cells, std over runs). A
``judged_samples_*.jsonl`` beside a samples file (``needlebench judge``) is read instead of it: S-RT/M-RT/M-RS
rows are scored with the judge's 1-10 rating x 10, unrated ones left out and counted; every table and figure
states the scorer.

``--scoring reference`` (:func:`apply_scoring`) reports the reference-exact ``*_reference`` metrics in place of the
default ones (computed from the logged outputs for runs logged without them); every table title and figure subtitle
says which scoring it shows.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation import scoring
from needlebench.evaluation.scoring import v2 as scoring_v2
from needlebench.tasks.grid import FAMILIES, SIZES, ConfigSpec, registry

SAMPLES_FILE_RE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl$")
#: ``needlebench judge`` writes ``judged_samples_<task>_<date>.jsonl`` beside each samples file.
JUDGED_PREFIX = "judged_"
RESULTS_FILE_RE = re.compile(r"^results_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.json$")
_RESULTS_RE = RESULTS_FILE_RE

LANGUAGE_COLUMNS = (("zh", "ZH"), ("en", "EN"))
#: Metric of each NeedleBench task used by the tables and heatmaps.
HEADLINE_METRIC = {
    "single": "score",
    "multi_retrieval": "recall",
    "multi_reasoning": "reference",
}
FAMILY_LABEL = {"single": "S-RT", "multi_retrieval": "M-RT", "multi_reasoning": "M-RS"}
#: NeedleBench v2: the per-row metric of each family (M-RS is the boxed exact match, ATC its accuracy).
V2_HEADLINE_METRIC = scoring_v2.V2_ROW_METRIC
#: v2 ATC question types, in table order.
ATC_V2_QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")


def headline_metric(spec: ConfigSpec) -> str:
    """The per-row metric the tables and heatmaps average for a NeedleBench haystack config (v1 or v2)."""
    return (V2_HEADLINE_METRIC if spec.is_v2 else HEADLINE_METRIC)[spec.family]


#: The four categories whose plain mean is the paper's ATC-CE-Overall.
ATC_OVERALL_CATEGORIES = (
    "EN-Direct-CE",
    "EN-Reasoning-CE",
    "ZH-Direct-CE",
    "ZH-Reasoning-CE",
)
ATC_OTHER_CATEGORIES = ("EN-Direct-512-CE", "ZH-Direct-512-CE")


# --------------------------------------------------------------------------------------------- data


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


@dataclass
class Results:
    """Everything read: task runs by (model, task) and lm-eval's reported metrics."""

    runs: list[TaskRun]
    reported: list[list[Any]]  # [model, task or group, metric, value, samples]
    sources: list[Path]
    scoring: str = "default"

    def entities(self) -> list[str]:
        return sorted({run.entity for run in self.runs}, key=_entity_order(self.runs))


def _entity_order(runs: Sequence[TaskRun]) -> Callable[[str], tuple[Any, ...]]:
    standard = {run.entity: run.standard for run in runs}
    return lambda entity: (not standard.get(entity, True), entity.lower())


@dataclass
class Cell:
    """A table value with the number of samples behind it (and a note such as ``partial``)."""

    value: float | None
    n: int
    note: str = ""


@dataclass
class Table:
    """A table to write as ``<name>.md``, ``<name>.csv`` and in the HTML page."""

    name: str
    title: str
    header: list[str]
    rows: list[list[Any]]
    digits: int = 2
    note: str = ""


# --------------------------------------------------------------------------------------------- loading


def _bad(path: Path, line: int, what: str) -> NeedlebenchError:
    return NeedlebenchError(f"{path}:{line}: {what}; pass lm-eval --output_path folders written with --log_samples")


def _response_text(record: Mapping[str, Any]) -> str:
    """The filtered model output of a logged sample (lm-eval nests it in lists)."""
    value: Any = record.get("filtered_resps") or record.get("resps") or ""
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else ""


#: Metrics logged as CircularEval tuples ``[item_id, rotation, correct]``.
CIRCULAR_METRICS = ("perf_4", "perf_4_reference")


def _check_metrics(path: Path, line: int, metrics: Mapping[str, Any]) -> None:
    for name, value in metrics.items():
        if name in CIRCULAR_METRICS:
            if not (isinstance(value, list) and len(value) == 3):
                raise _bad(
                    path,
                    line,
                    f"metric {name} is {value!r}, not [item_id, rotation, correct]",
                )
        elif isinstance(value, list):
            if not all(isinstance(item, (int, float)) for item in value):
                raise _bad(path, line, f"metric {name} holds a non-number")
        elif not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _bad(path, line, f"metric {name} is {value!r}, not a number")


@dataclass(frozen=True)
class ObservedSpec(ConfigSpec):
    """A config known only from its samples (no registry entry, no dataset manifest at hand): its grid is the
    lengths, depths and repeats its rows carry."""

    observed_lengths: tuple[int, ...] = ()
    observed_depths: tuple[float, ...] = ()
    observed_repeats: int = 1
    observed_needle_counts: tuple[int, ...] = (1,)

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.observed_lengths

    @property
    def depths(self) -> tuple[float, ...]:
        return self.observed_depths

    @property
    def repeats(self) -> int:
        return self.observed_repeats

    @property
    def needle_counts(self) -> tuple[int, ...]:
        return self.observed_needle_counts

    @property
    def num_rows(self) -> int:
        cells = len(self.lengths) * self.repeats
        if self.family != "multi_retrieval":
            cells *= len(self.depths) * (len(self.needle_counts) if self.family == "multi_reasoning" else 1)
        return cells


_FAMILY_OF_LABEL = {label: family for family, label in FAMILIES.items() if family in HEADLINE_METRIC}


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


def observed_spec(name: str, family: str, docs: Sequence[Mapping[str, Any]]) -> ObservedSpec:
    """The grid of an unknown config from its rows: their lengths, depths, repeats and needle counts."""
    first = docs[0]
    repeats = [doc.get("repeat") for doc in docs]
    return ObservedSpec(
        name,
        family,
        str(first.get("language") or ""),
        "custom",
        observed_lengths=tuple(sorted({int(doc["context_length"]) for doc in docs})),
        observed_depths=tuple(sorted({float(doc["depth_percent"]) for doc in docs})),
        observed_repeats=len({r for r in repeats if isinstance(r, int)}) or 1,
        observed_needle_counts=tuple(
            sorted({int(doc.get("num_needles") or len(doc.get("needles") or []) or 1) for doc in docs})
        ),
    )


def _apply_judge(sample: Sample, record: Mapping[str, Any], path: Path, line: int) -> None:
    """Score a sample of a NeedleBench haystack family with its judge rating (1-10, shown as rating x 10)."""
    judge = record.get("judge")
    if not isinstance(judge, dict):
        raise _bad(path, line, "judged sample without a 'judge' object (rewrite it with `needlebench judge`)")
    score = judge.get("score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 10):
        raise _bad(path, line, f"judge score is {score!r}, not an integer 1-10 or null")
    if sample.spec.family not in HEADLINE_METRIC:
        return  # ATC / Counting-Stars keep their rule scores (CircularEval, star lists)
    sample.judged, sample.judge, sample.judge_model = True, score, str(judge.get("model") or "")
    sample.rule_metrics = sample.metrics
    sample.metrics = {} if score is None else {headline_metric(sample.spec): 10.0 * score}


def read_samples(
    path: Path, lookup: Callable[[str], ConfigSpec | None] | None = None, observe: bool = True
) -> list[Sample]:
    """The samples of one ``samples_*.jsonl`` (or ``judged_samples_*.jsonl``) file.

    ``lookup`` finds a config by name (default: the built-in registry). Rows of a config it does not know are
    kept when ``observe`` and they carry the NeedleBench haystack columns (``task`` S-RT/M-RT/M-RS,
    ``context_length``, ``depth_percent``): their grid is then what the rows hold (:class:`ObservedSpec`). Other
    rows are skipped. A malformed line is a one-line error naming the file and the line.
    """
    configs = registry()
    find = lookup or configs.get
    samples = []
    unknown: dict[str, list[tuple[int, dict, Any]]] = defaultdict(list)
    try:
        handle = path.open(encoding="utf-8")
    except OSError as error:
        raise NeedlebenchError(f"cannot read {path}: {error.strerror}") from None
    with handle:
        try:
            lines = list(handle)
        except UnicodeDecodeError:
            raise _bad(path, 1, "not UTF-8 text") from None
    judged_file = path.name.startswith(JUDGED_PREFIX)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise _bad(path, number, f"not a JSON line ({error.msg})") from None
        if not isinstance(record, dict):
            raise _bad(path, number, "not a JSON object")
        doc = record.get("doc")
        if not isinstance(doc, dict):
            raise _bad(path, number, "no 'doc' object (the dataset row)")
        spec = find(str(doc.get("config")))
        if spec is None:
            if observe and _observable(doc):
                unknown[str(doc["config"])].append((number, record, doc))
            continue
        samples.append(_sample(path, number, record, doc, spec, judged_file))
    for name, entries in unknown.items():
        docs = [doc for _n, _r, doc in entries]
        spec = observed_spec(name, _observable(docs[0]) or "single", docs)
        samples += [_sample(path, number, record, doc, spec, judged_file) for number, record, doc in entries]
    return samples


def _sample(path: Path, number: int, record: dict, doc: dict, spec: ConfigSpec, judged: bool) -> Sample:
    names = record.get("metrics", [])
    if not isinstance(names, list):
        raise _bad(path, number, "'metrics' is not a list of metric names")
    metrics = {name: record[name] for name in names if name in record}
    _check_metrics(path, number, metrics)
    for key in ("context_length",):
        if key in doc and not isinstance(doc[key], int):
            raise _bad(path, number, f"doc {key} is {doc[key]!r}, not an integer")
    sample = Sample(spec, doc, metrics, _response_text(record))
    if judged:
        _apply_judge(sample, record, path, number)
    return sample


def read_results_json(path: Path) -> dict[str, Any]:
    """An lm-eval ``results_*.json``; malformed JSON is a one-line error naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise NeedlebenchError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise _bad(path, 1, "not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise _bad(path, error.lineno, f"not valid JSON ({error.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results", {}), dict):
        raise _bad(path, 1, "not an lm-eval results object (no 'results' mapping)")
    return data


#: Run health ``needlebench eval`` writes beside lm-eval's ``results_<date>.json`` (same date).
HEALTH_FILE_PREFIX = "needlebench_health_"


def health_path(results_path: Path) -> Path:
    """The run-health file of a ``results_<date>.json``: ``needlebench_health_<date>.json`` beside it."""
    date = results_path.name.removeprefix("results_").removesuffix(".json")
    return results_path.with_name(f"{HEALTH_FILE_PREFIX}{date}.json")


def read_health(results_path: Path) -> dict[str, Any]:
    """The run health of a results file: ``{"tasks": {task: {key: value}}, "not_run": {task: n-samples}}``, from
    its ``needlebench_health_<date>.json`` (empty when there is none; older runs carry the keys inline in the
    results, which :func:`load_results` reads as metrics)."""
    path = health_path(results_path)
    if not path.is_file():
        return {"tasks": {}, "not_run": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NeedlebenchError(f"{path}: not a readable run-health file ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tasks", {}), dict):
        raise _bad(path, 1, "not a needlebench run-health object (no 'tasks' mapping)")
    return {"tasks": data.get("tasks") or {}, "not_run": data.get("not_run") or {}}


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
    looks_local = text.startswith(("/", ".", "~")) or "\\" in text or text.count("/") > 1 or Path(text).exists()
    return Path(text).name if looks_local else text


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


def _pretrained(results: Mapping[str, Any]) -> str | None:
    config = results.get("config") if isinstance(results.get("config"), dict) else {}
    value = _model_args(config).get("pretrained")
    return str(value) if value else None


def _collect(paths: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    samples: list[Path] = []
    results: list[Path] = []
    for path in paths:
        if not path.exists():
            raise NeedlebenchError(f"results path {str(path)!r} does not exist; pass lm-eval --output_path folders")
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            if SAMPLES_FILE_RE.match(candidate.name) or (
                path.is_file() and SAMPLES_FILE_RE.match(candidate.name.removeprefix(JUDGED_PREFIX))
            ):
                samples.append(candidate.resolve())
            elif RESULTS_FILE_RE.match(candidate.name):
                results.append(candidate.resolve())
            elif path.is_file():
                raise NeedlebenchError(f"{str(path)!r} is neither samples_<task>_<date>.jsonl nor results_<date>.json")
    return sorted(set(samples)), sorted(set(results))


def experiment_specs(folder: Path) -> dict[str, ConfigSpec]:
    """The experiment configs recorded in the manifest of the dataset folder ``folder`` (not registered: two
    folders may hold experiments of one name); a folder that is not a dataset is a one-line error."""
    from needlebench.dataset.verify import read_manifest
    from needlebench.tasks.experiment import (
        SIZE_LABEL,
        ExperimentSpec,
        experiment_from_record,
    )

    manifest = read_manifest(Path(folder))
    specs: dict[str, ConfigSpec] = {}
    for record in (manifest.get("experiments") or {}).values():
        experiment = experiment_from_record(record)
        specs[experiment.name] = ExperimentSpec(
            experiment.name, experiment.kind, experiment.language, SIZE_LABEL, experiment=experiment
        )
    return specs


def _recorded_data_dir(results: Mapping[str, Any] | None, task: str) -> Path | None:
    """The dataset folder an lm-eval run read a task from (task metadata ``data_dir``), if recorded."""
    configs = (results or {}).get("configs")
    config = configs.get(task) if isinstance(configs, dict) else None
    metadata = config.get("metadata") if isinstance(config, dict) else None
    value = metadata.get("data_dir") if isinstance(metadata, dict) else None
    return Path(str(value)).expanduser() if value else None


class _SpecFinder:
    """Finds the config of a samples file's rows: built-in, else an experiment of the dataset folder the run
    recorded (``data_dir``), else of a ``--data-dir`` folder; the source of each is remembered."""

    def __init__(self, data_dirs: Sequence[Path]) -> None:
        self.builtin = registry()
        self.folders: dict[Path, dict[str, ConfigSpec]] = {}
        self.given = [Path(folder).resolve() for folder in data_dirs]
        for folder in self.given:
            self.folders[folder] = experiment_specs(folder)
        self.sources: dict[int, str] = {}

    def _recorded(self, folder: Path | None) -> dict[str, ConfigSpec]:
        if folder is None:
            return {}
        folder = folder.resolve()
        if folder not in self.folders:
            try:
                self.folders[folder] = experiment_specs(folder)
            except NeedlebenchError:  # moved or not a dataset on this machine: bin by the rows instead
                self.folders[folder] = {}
        return self.folders[folder]

    def lookup(self, recorded: Path | None) -> Callable[[str], ConfigSpec | None]:
        def find(name: str) -> ConfigSpec | None:
            if name in self.builtin:
                return self.builtin[name]
            folders = [(folder, self.folders[folder]) for folder in self.given]  # --data-dir first
            if recorded is not None:
                folders.append((recorded.resolve(), self._recorded(recorded)))
            for folder, specs in folders:
                if name in specs:
                    self.sources[id(specs[name])] = f"experiment ({source_label(folder)})"
                    return specs[name]
            return None

        return find

    def source(self, spec: ConfigSpec) -> str:
        if isinstance(spec, ObservedSpec):
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
        raw = (model_display_name(results) if results else None) or folder.name
        pretrained = _pretrained(results) if results else None
        matchable.update(dict.fromkeys(item for item in (raw, pretrained) if item))
        return _apply_names(raw, pretrained, folder, names, used)

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
            values = {
                key.split(",")[0]: float(value)
                for key, value in metrics.items()
                if "," in key and "_stderr" not in key and isinstance(value, (int, float))
            }
            values.update(
                (key, float(value))
                for key, value in (health["tasks"].get(task) or {}).items()
                if key in HEALTH and isinstance(value, (int, float))
            )
            key = (model, task)
            if key not in reported or date > reported[key][0]:
                reported[key] = (
                    date,
                    values,
                    (counts.get(task) or {}).get("effective"),
                )

    newest: dict[tuple[str, str], TaskRun] = {}
    for path in sample_files:
        match = SAMPLES_FILE_RE.match(path.name.removeprefix(JUDGED_PREFIX))
        task, date = match.group("task"), match.group("date")  # type: ignore[union-attr]
        candidates = sorted(results_by_folder.get(path.parent, []))
        same = [p for d, p in candidates if d == date]
        source = same[0] if same else (candidates[-1][1] if candidates else None)
        model = model_of(parsed[source] if source else None, path.parent)
        key = (model, task)
        if key in newest and newest[key].date >= date:
            continue
        judged = path.with_name(JUDGED_PREFIX + path.name)
        read = judged if judged.is_file() else path
        recorded = _recorded_data_dir(parsed[source] if source else None, task)
        samples = read_samples(read, finder.lookup(recorded))
        if not samples:
            continue
        run = TaskRun(model, task, samples[0].spec, read, date, samples, grid_source=finder.source(samples[0].spec))
        newest[key] = run
    if not newest:
        raise NeedlebenchError(
            f"the samples under {', '.join(map(str, paths))} hold no needlebench task rows (rows with a known config)"
        )
    unmatched = [key for key in names if key not in used]
    if unmatched:
        choices = [*matchable, *(str(path) for path in paths)]
        raise NeedlebenchError(
            f"--name {unmatched[0]}={names[unmatched[0]]} matches no model or results path; "
            f"PATH can be: {', '.join(dict.fromkeys(choices))}"
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
    return Results(runs, rows, paths)


# --------------------------------------------------------------------------------------------- scoring

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
    from needlebench.evaluation import harness

    logged = {name: value for name, value in sample.metrics.items() if name.endswith(harness.REFERENCE_SUFFIX)}
    if logged:
        return logged
    template = harness.FAMILY_TEMPLATES[harness.template_key(sample.spec)]
    hook = getattr(harness, template.process_results)
    try:
        computed = hook(sample.doc, [sample.response])
    except (KeyError, TypeError, ValueError) as error:
        raise NeedlebenchError(
            f"cannot score row {sample.doc.get('id')!r} of {sample.spec.name} by the reference rules ({error!r}); "
            "its samples lack the *_reference metrics and its doc the columns to compute them: rerun the task"
        ) from None
    return {name: value for name, value in computed.items() if name.endswith(harness.REFERENCE_SUFFIX)}


def apply_scoring(results: Results, scoring: str) -> Results:
    """Make ``scoring``'s metrics the ones every table and figure reads.

    ``default`` leaves the samples as read. ``reference`` puts each rule-scored sample's ``<metric>_reference``
    under ``<metric>`` (so every mean, CircularEval and grid follows the reference's aggregation unchanged) and
    drops metrics without a reference twin (M-RS ``strict``); lm-eval's reported numbers are swapped the same way.
    Judged samples keep their judge scores.
    """
    from needlebench.evaluation.harness import REFERENCE_SUFFIX

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


# --------------------------------------------------------------------------------------------- aggregation


def _mean(values: Iterable[float]) -> float | None:
    items = [float(value) for value in values]
    return math.fsum(items) / len(items) if items else None


def grid_cell(sample: Sample) -> tuple[Any, ...]:
    """The summariser's cell of a sample: (language, length, depth, needle count)."""
    doc = sample.doc
    return (
        doc.get("language"),
        doc.get("context_length"),
        doc.get("depth_percent"),
        doc.get("num_needles"),
    )


def cell_mean(samples: Iterable[Sample], metric: str, cell: Callable[[Sample], Any] = grid_cell) -> Cell:
    """Mean over grid cells of the per-cell mean of ``metric`` (the reference summariser's naive mean)."""
    cells: dict[Any, list[float]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            cells[cell(sample)].append(float(sample.metrics[metric]))
    n = sum(len(values) for values in cells.values())
    return Cell(_mean(_mean(values) for values in cells.values()), n)  # type: ignore[misc]


def sample_std(values: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1 in the denominator) of two or more values, else None."""
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((value - mean) ** 2 for value in values) / (len(values) - 1))


def run_of(sample: Sample) -> Any:
    """The run (repeat) a sample belongs to: the row's ``repeat``; a row without one is a run of its own."""
    repeat = sample.doc.get("repeat")
    return repeat if isinstance(repeat, int) and not isinstance(repeat, bool) else ("row", id(sample))


def runs_summary(samples: Sequence[Sample], metric: str) -> tuple[Cell, float | None, int]:
    """(mean over grid cells, standard deviation over runs, number of runs): each run's score is its own mean
    over grid cells; the deviation is the sample standard deviation of those (None with fewer than two runs)."""
    by_run: dict[Any, list[Sample]] = defaultdict(list)
    for sample in samples:
        if metric in sample.metrics:
            by_run[run_of(sample)].append(sample)
    means = [cell_mean(group, metric).value for group in by_run.values()]
    return cell_mean(samples, metric), sample_std([m for m in means if m is not None]), len(by_run)


def row_mean(samples: Iterable[Sample], metric: str) -> Cell:
    """lm-eval's aggregation: the plain mean over rows."""
    values = [
        float(s.metrics[metric]) for s in samples if metric in s.metrics and not isinstance(s.metrics[metric], list)
    ]
    return Cell(_mean(values), len(values))


def expected_cells(spec: ConfigSpec) -> set[tuple[Any, ...]]:
    """The grid cells of a config as (length, depth, needle count)."""
    if spec.family == "single":
        return {(length, float(depth), 1) for length in spec.lengths for depth in spec.depths}
    if spec.family == "multi_reasoning":
        return {
            (length, float(depth), n) for length in spec.lengths for depth in spec.depths for n in spec.needle_counts
        }
    if spec.family == "multi_retrieval":
        return {(length, None, None) for length in spec.lengths}
    if spec.family == "atc":
        return {(None, None, n) for n in spec.needle_counts}
    return {(length, None, None) for length in spec.lengths}


def observed_cell(spec: ConfigSpec, sample: Sample) -> tuple[Any, ...]:
    doc = sample.doc
    if spec.family in ("single", "multi_reasoning"):
        depth = doc.get("depth_percent")
        return (
            doc.get("context_length"),
            None if depth is None else float(depth),
            1 if spec.family == "single" else doc.get("num_needles"),
        )
    if spec.family == "atc":
        return (None, None, doc.get("num_needles"))
    return (doc.get("context_length"), None, None)


def _lengths_text(lengths: Iterable[int]) -> str:
    values = sorted(length for length in lengths if length)
    if not values:
        return "-"
    shown = [_k(value) for value in values]
    return ", ".join(shown) if len(shown) <= 4 else f"{shown[0]}-{shown[-1]} ({len(shown)})"


def _k(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and value >= 1000:
        return f"{value / 1000:g}k"
    return str(value)


def run_coverage(run: TaskRun) -> tuple[bool, str]:
    """(complete?, text) of what part of its config a task run covers."""
    spec = run.spec
    expected = expected_cells(spec)
    seen = {observed_cell(spec, sample) for sample in run.samples}
    cells = len(seen & expected)
    rows = len(run.samples)
    complete = cells >= len(expected) and rows >= spec.num_rows
    if complete:
        return True, f"full ({rows} rows)"
    parts = [f"{rows}/{spec.num_rows} rows", f"{cells}/{len(expected)} cells"]
    if spec.family == "atc":
        counts = sorted({n for _l, _d, n in seen if n is not None})
        parts.append(
            f"needle counts {', '.join(map(str, counts))}" if len(counts) <= 6 else f"{len(counts)} needle counts"
        )
    else:
        lengths = {length for length, _d, _n in seen if length in spec.lengths}
        if len(lengths) == len(spec.lengths):
            parts.append(f"all {len(lengths)} lengths")
        else:
            parts.append(f"lengths {_lengths_text(lengths)} of {_lengths_text(spec.lengths)}")
        if spec.family in ("single", "multi_reasoning"):
            depths = {depth for _l, depth, _n in seen if depth is not None}
            parts.append(f"{len(depths & {float(d) for d in spec.depths})}/{len(spec.depths)} depths")
        if spec.family == "multi_reasoning":
            needles = {n for _l, _d, n in seen} & set(spec.needle_counts)
            parts.append(f"{len(needles)}/{len(spec.needle_counts)} needle counts")
    return False, f"partial ({', '.join(parts)})"


def partial_runs(runs: Iterable[TaskRun]) -> list[TaskRun]:
    """The runs that cover part of their config (:func:`run_coverage`)."""
    return [run for run in runs if not run_coverage(run)[0]]


def partial_note(runs: Sequence[TaskRun], partial: Sequence[TaskRun], both: bool = False) -> str:
    """The note of a table cell built from ``runs`` (``partial`` lists the partial ones): ``partial`` when one of
    them covers part of its config; ``partial: EN only`` when a both-languages cell holds one language."""
    languages = sorted({run.spec.language for run in runs if run.samples})
    if both and len(languages) == 1:
        return f"partial: {languages[0].upper()} only"
    return "partial" if any(run in partial for run in runs) else ""


def _task_note(runs: Sequence[TaskRun], partial: Sequence[TaskRun], label: str, languages: tuple[str, ...]) -> str:
    """:func:`partial_note` of the runs of one task (``S-RT``...) in ``languages`` (two: a both-languages cell)."""
    chosen = [run for run in runs if run.spec.task_label == label and run.spec.language in languages]
    return partial_note(chosen, partial, both=len(languages) == 2)


def _combined_note(cells: Sequence[Cell]) -> str:
    """The note of a cell computed from ``cells``: the most specific of their notes. Cells of one language each,
    but not the same one ("EN only" beside "ZH only"), make a ``partial`` cell (both languages are in it)."""
    notes = {cell.note for cell in cells if cell.note}
    only = {note for note in notes if note.endswith(" only")}
    if len(only) > 1:
        notes = (notes - only) | {"partial"}
    ordered = sorted(notes, key=lambda note: (len(note), note))  # never the order of a set (it varies by process)
    return ordered[-1] if ordered else ""


def _noted(cell: Cell, note: str) -> Cell:
    """``cell`` with ``note`` when it holds a value; an empty cell has neither a count nor a note."""
    if cell.value is None:
        return Cell(None, 0)
    return Cell(cell.value, cell.n, cell.note or note)


def coverage_text(runs: Sequence[TaskRun], expected_configs: Sequence[str] = ()) -> str:
    """``full`` or ``partial: ...`` for a table row built from ``runs``."""
    notes = [(run.task, *run_coverage(run)) for run in runs]
    present = {run.spec.name for run in runs}
    missing = [config for config in expected_configs if config not in present]
    partial = [f"{task} {text.removeprefix('partial ')}" for task, complete, text in notes if not complete]
    if not partial and not missing:
        return "full"
    parts = partial + ([f"missing {', '.join(missing)}"] if missing else [])
    return "partial: " + "; ".join(parts)


# --------------------------------------------------------------------------------------------- tables


def needlebench_size_table(results: Results, size: str) -> Table | None:
    """Models as rows: S-RT, M-RT, M-RS per language and both, and the weighted overall, for one size."""
    runs = [
        run
        for run in results.runs
        if run.spec.family in HEADLINE_METRIC and run.spec.size == size and not run.spec.is_v2
    ]
    if not runs:
        return None
    header = ["Model"]
    for label in ("S-RT", "M-RT", "M-RS", "Overall"):
        header += [f"{label} ZH", f"{label} EN", label]
    header.append("Coverage")
    rows = []
    for entity in sorted({run.entity for run in runs}, key=_entity_order(runs)):
        mine = [run for run in runs if run.entity == entity]
        partial = partial_runs(mine)
        parts: dict[str, dict[str, Cell]] = {}
        for family, metric in HEADLINE_METRIC.items():
            of_family = [run for run in mine if run.spec.family == family]
            parts[family] = {
                language: _noted(
                    cell_mean([s for run in chosen for s in run.samples], metric),
                    partial_note(chosen, partial, both=language == "all"),
                )
                for language in ("zh", "en", "all")
                for chosen in [[run for run in of_family if language in ("all", run.spec.language)]]
            }
        row: list[Any] = [entity]
        for family in HEADLINE_METRIC:
            row += [parts[family]["zh"], parts[family]["en"], parts[family]["all"]]
        for column in ("zh", "en", "all"):
            cells = [parts[family][column] for family in HEADLINE_METRIC]
            value = (
                scoring.needlebench_overall(*(c.value for c in cells))  # type: ignore[arg-type]
                if all(c.value is not None for c in cells)
                else None
            )
            row.append(_noted(Cell(value, sum(c.n for c in cells)), _combined_note(cells)))
        standard = all(run.standard for run in mine)
        expected = (
            [
                spec.name
                for spec in registry().values()
                if spec.size == size and spec.family in HEADLINE_METRIC and not spec.is_v2
            ]
            if standard
            else []
        )
        row.append(coverage_text(mine, expected))
        rows.append(row)
    return Table(
        f"needlebench_{size}",
        f"NeedleBench {size} (paper mean per grid cell, 0-100; Overall = 0.4 S-RT + 0.3 M-RT + 0.3 M-RS)",
        header,
        rows,
        note="Each cell: paper mean (n = samples); [partial]: built from part of a config, [partial: EN only]: a "
        "both-languages cell from one language. ZH/EN: one language; the third column: both languages.",
    )


def atc_category(spec: ConfigSpec) -> str:
    """CircularEval category of an ATC config, e.g. ``EN-Direct-CE`` or ``ZH-Reasoning-CE``."""
    style = {"direct": "Direct", "reasoning": "Reasoning", "extended": "Direct-512"}[spec.variant]
    return f"{spec.language.upper()}-{style}-CE"


def perf_4_by_needles(
    rows_by_needles: Mapping[int, list[tuple[str, str, bool]]],
) -> dict[int, Cell]:
    """CircularEval ``perf_4`` per needle count over complete items (n = items); counts with none are left out."""
    perf: dict[int, Cell] = {}
    for needles, rows in sorted(rows_by_needles.items()):
        complete = scoring.complete_items(rows)
        if complete:
            items = len({item for item, _r, _c in complete})
            perf[needles] = Cell(scoring.circular_scores(complete)["perf_4"], items)
    return perf


def atc_by_category(samples: Iterable[Sample]) -> dict[str, dict[int, Cell]]:
    by_category: dict[str, dict[int, list[tuple[str, str, bool]]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        if sample.spec.variant == "open" or "perf_4" not in sample.metrics:
            continue
        item_id, rotation, correct = sample.metrics["perf_4"]
        num = int(sample.doc["num_needles"])
        by_category[atc_category(sample.spec)][num].append((str(item_id), str(rotation), bool(correct)))
    return {category: perf_4_by_needles(rows) for category, rows in by_category.items()}


def atc_category_cell(perf: Mapping[int, Cell]) -> Cell:
    if not perf:
        return Cell(None, 0)
    value = scoring.atc_category_score({n: cell.value for n, cell in perf.items()})  # type: ignore[misc]
    return Cell(value, sum(cell.n for cell in perf.values()))


def atc_overall_cell(categories: Mapping[str, Cell]) -> Cell:
    """ATC-CE-Overall: plain mean of the 4 categories; marked partial when some are missing."""
    present = [c for c in ATC_OVERALL_CATEGORIES if categories.get(c) and categories[c].value is not None]
    if not present:
        return Cell(None, 0)
    value = scoring.atc_overall({c: categories[c].value for c in present})  # type: ignore[misc]
    n = sum(categories[c].n for c in present)
    note = "" if len(present) == len(ATC_OVERALL_CATEGORIES) else f"partial: {len(present)} of 4 categories"
    return Cell(value, n, note)


def atc_tables(results: Results) -> list[Table]:
    runs = [run for run in results.runs if run.spec.family == "atc" and not run.spec.is_v2]
    if not runs:
        return []
    entities = sorted({run.entity for run in runs}, key=_entity_order(runs))
    main_rows, detail_rows = [], []
    counts = sorted({int(s.doc["num_needles"]) for run in runs for s in run.samples if s.spec.variant != "open"})
    extra = [
        c for c in ATC_OTHER_CATEGORIES if any(atc_category(r.spec) == c for r in runs if r.spec.variant != "open")
    ]
    for entity in entities:
        mine = [run for run in runs if run.entity == entity]
        samples = [s for run in mine for s in run.samples]
        perf = atc_by_category(samples)
        partial = partial_runs(mine)
        notes = {
            category: partial_note(
                [r for r in mine if r.spec.variant != "open" and atc_category(r.spec) == category], partial
            )
            for category in (*ATC_OVERALL_CATEGORIES, *ATC_OTHER_CATEGORIES)
        }
        categories = {
            category: _noted(atc_category_cell(perf.get(category, {})), notes[category])
            for category in (*ATC_OVERALL_CATEGORIES, *extra)
        }
        overall = atc_overall_cell(categories)
        overall = _noted(overall, _combined_note(list(categories.values())[: len(ATC_OVERALL_CATEGORIES)]))
        row: list[Any] = [entity, *categories.values(), overall]
        for language in ("en", "zh"):
            opened = [s for s in samples if s.spec.variant == "open" and s.spec.language == language]
            open_runs = [r for r in mine if r.spec.variant == "open" and r.spec.language == language]
            row.append(_noted(row_mean(opened, "score"), partial_note(open_runs, partial)))
        row.append(coverage_text(mine))
        main_rows.append(row)
        for category, by_needles in sorted(perf.items()):
            detail_rows.append(
                [entity, category, *[_noted(by_needles.get(n, Cell(None, 0)), notes[category]) for n in counts]]
            )
    tables = [
        Table(
            "atc",
            "Ancestral Trace Challenge (CircularEval perf_4 per needle count, weighted by needle count; 0-100)",
            [
                "Model",
                *ATC_OVERALL_CATEGORIES,
                *extra,
                "ATC-CE-Overall",
                "EN-Open",
                "ZH-Open",
                "Coverage",
            ],
            main_rows,
            note="n = whole items (4 rotations) for CircularEval, rows for open-ended; [partial]: from part of a "
            "config. ATC-CE-Overall is the plain mean of the four categories.",
        )
    ]
    if detail_rows:
        tables.append(
            Table(
                "atc_by_needles",
                "ATC perf_4 by needle count (0-100)",
                ["Model", "Category", *map(str, counts)],
                detail_rows,
                note="n = whole items; [partial]: from part of a config.",
            )
        )
    return tables


# --------------------------------------------------------------------------------------------- v2 tables


def v2_scored_rows(samples: Iterable[Sample]) -> list[dict[str, Any]]:
    """The v2 samples as scored rows (:func:`needlebench.evaluation.scoring.v2.scored_row`); rows without their
    family's metric are left out."""
    return [
        scoring_v2.scored_row(s.doc, s.metrics)
        for s in samples
        if s.spec.is_v2 and V2_HEADLINE_METRIC[s.spec.family] in s.metrics
    ]


def atc_v2_cell(samples: Iterable[Sample]) -> Cell:
    """v2 ATC: the mean score per relation count weighted by the count (n = rows)."""
    pairs = [(int(row["num_needles"]), float(row["score"])) for row in v2_scored_rows(samples)]
    return Cell(scoring_v2.relation_weighted(pairs) if pairs else None, len(pairs))


def needlebench_v2_size_table(results: Results, size: str) -> Table | None:
    """NeedleBench v2 at one size, models as rows: S-RT, M-RT, M-RS per language and both (each the mean over
    grid cells), and Overall = the plain mean of the three (:mod:`needlebench.evaluation.scoring.v2`)."""
    runs = [
        run for run in results.runs if run.spec.is_v2 and run.spec.family in HEADLINE_METRIC and run.spec.size == size
    ]
    if not runs:
        return None
    labels = [FAMILY_LABEL[family] for family in HEADLINE_METRIC]
    header = ["Model"]
    for label in (*labels, "Overall"):
        header += [f"{label} ZH", f"{label} EN", label]
    header.append("Coverage")
    rows = []
    for entity in sorted({run.entity for run in runs}, key=_entity_order(runs)):
        mine = [run for run in runs if run.entity == entity]
        scored = v2_scored_rows(s for run in mine for s in run.samples)
        by_task = scoring_v2.v2_task_table(scored)
        both = scoring_v2.v2_size_table(scored).get(size, {})
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for row in scored:
            spec = registry()[str(row["config"])]
            counts[(spec.task_label, spec.language)] += 1
        partial = partial_runs(mine)
        line: list[Any] = [entity]
        family_cells: dict[str, list[Cell]] = {"zh": [], "en": [], "all": []}
        for label in labels:
            zh, en = (
                _noted(
                    Cell(by_task.get((size, label, lang)), counts[(label, lang)]),
                    _task_note(mine, partial, label, (lang,)),
                )
                for lang in ("zh", "en")
            )
            all_ = _noted(Cell(both.get(label), zh.n + en.n), _task_note(mine, partial, label, ("zh", "en")))
            line += [zh, en, all_]
            for column, cell in (("zh", zh), ("en", en), ("all", all_)):
                family_cells[column].append(cell)
        for lang in ("zh", "en"):
            values = [by_task.get((size, label, lang)) for label in labels]
            overall = Cell(
                scoring_v2.v2_overall(*values) if None not in values else None,  # type: ignore[arg-type]
                sum(counts[(label, lang)] for label in labels),
            )
            line.append(_noted(overall, _combined_note(family_cells[lang])))
        line.append(_noted(Cell(both.get("Overall"), len(scored)), _combined_note(family_cells["all"])))
        standard = all(run.standard for run in mine)
        expected = (
            [
                spec.name
                for spec in registry().values()
                if spec.is_v2 and spec.size == size and spec.family in HEADLINE_METRIC
            ]
            if standard
            else []
        )
        line.append(coverage_text(mine, expected))
        rows.append(line)
    return Table(
        f"needlebench_v2_{size}",
        f"NeedleBench v2 {size} (mean per grid cell, 0-100; Overall = mean of S-RT, M-RT and M-RS)",
        header,
        rows,
        note="Each cell: mean over grid cells of the cells' mean row score (n = samples). S-RT is a binary keyword "
        "match, M-RT the share of needles found, M-RS the exact match of the last \\boxed{} answer. ZH/EN: one "
        "language; the third column: both languages. Computed from the rows, not with the reference summariser.",
    )


def atc_v2_tables(results: Results) -> list[Table]:
    """v2 ATC, models as rows: per language the score weighted by relation count over all question types and per
    question type; and the mean per relation count (detail table)."""
    runs = [run for run in results.runs if run.spec.is_v2 and run.spec.family == "atc"]
    if not runs:
        return []
    languages = [lang for lang, _ in LANGUAGE_COLUMNS[::-1] if any(r.spec.language == lang for r in runs)]
    header = ["Model"]
    for lang in languages:
        header += [f"{lang.upper()} weighted", *(f"{lang.upper()} {t}" for t in ATC_V2_QUESTION_TYPES)]
    header.append("Coverage")
    relation_counts = sorted({int(s.doc["num_needles"]) for run in runs for s in run.samples})
    main_rows, detail_rows = [], []
    for entity in sorted({run.entity for run in runs}, key=_entity_order(runs)):
        mine = [run for run in runs if run.entity == entity]
        scored = v2_scored_rows(s for run in mine for s in run.samples)
        table = scoring_v2.atc_v2_table(scored)
        counts: dict[tuple[str, str], int] = defaultdict(int)
        by_relations: dict[tuple[str, int], list[float]] = defaultdict(list)
        for row in scored:
            lang = registry()[str(row["config"])].language
            counts[(lang, "weighted")] += 1
            counts[(lang, str(row["question_type"]))] += 1
            by_relations[(lang, int(row["num_needles"]))].append(float(row["score"]))
        line: list[Any] = [entity]
        for lang in languages:
            entry = table.get(lang, {})
            for key in ("weighted", *ATC_V2_QUESTION_TYPES):
                line.append(Cell(entry.get(key), counts[(lang, key)]))
        line.append(coverage_text(mine))
        main_rows.append(line)
        for lang in languages:
            if (lang, "weighted") in counts:
                detail_rows.append(
                    [
                        entity,
                        lang.upper(),
                        *(
                            Cell(_mean(by_relations.get((lang, n), [])), len(by_relations.get((lang, n), [])))
                            for n in relation_counts
                        ),
                    ]
                )
    return [
        Table(
            "atc_v2",
            "Ancestral Trace Challenge v2 (boxed exact match, mean per relation count weighted by relation count; 0-100)",
            header,
            main_rows,
            note="n = rows. 'weighted' covers all four question types; each question type is weighted by relation "
            "count on its own rows.",
        ),
        Table(
            "atc_v2_by_relations",
            "ATC v2 mean score by relation count (0-100)",
            ["Model", "Language", *map(str, relation_counts)],
            detail_rows,
            note="n = rows (all question types).",
        ),
    ]


def _star_cell(sample: Sample, index: int) -> tuple[Any, ...]:
    return (sample.doc.get("context_length"), index)


def counting_stars_cell(samples: Iterable[Sample]) -> Cell:
    """The notebook's task score: mean over the star x length grid (each cell the mean of its rows)."""
    cells: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    rows = 0
    for sample in samples:
        values = sample.metrics.get("per_star")
        if not isinstance(values, list):
            continue
        rows += 1
        for index, value in enumerate(values):
            cells[_star_cell(sample, index)].append(float(value))
    return Cell(_mean(_mean(v) for v in cells.values()), rows)  # type: ignore[misc]


def counting_stars_table(results: Results) -> Table | None:
    runs = [run for run in results.runs if run.spec.family == "counting_stars"]
    if not runs:
        return None
    order = (
        ("acquisition", "zh"),
        ("acquisition", "en"),
        ("reasoning", "zh"),
        ("reasoning", "en"),
    )
    rows = []
    keys = sorted(
        {(run.spec.size, int(run.spec.stars or 0)) for run in runs},
        key=lambda k: (SIZES.index(k[0]), k[1]),
    )
    for entity in sorted({run.entity for run in runs}, key=_entity_order(runs)):
        for size, stars in keys:
            mine = [r for r in runs if r.entity == entity and r.spec.size == size and int(r.spec.stars or 0) == stars]
            if not mine:
                continue
            partial = partial_runs(mine)
            chosen = [[r for r in mine if (r.spec.variant, r.spec.language) == key] for key in order]
            cells = [
                _noted(counting_stars_cell(s for r in runs_of for s in r.samples), partial_note(runs_of, partial))
                for runs_of in chosen
            ]
            present = [c for c in cells if c.value is not None]
            average = _noted(
                Cell(_mean(c.value for c in present) if len(present) == 4 else None, sum(c.n for c in cells)),
                _combined_note(cells),
            )  # type: ignore[misc]
            rows.append([entity, size, stars, *cells, average, coverage_text(mine)])
    return Table(
        "counting_stars",
        "Counting-Stars (mean over the star x length grid, 0-1)",
        [
            "Model",
            "Size",
            "Stars",
            "Me-Acq ZH",
            "Me-Acq EN",
            "Me-Rea ZH",
            "Me-Rea EN",
            "Avg.",
            "Coverage",
        ],
        rows,
        digits=3,
        note="n = rows (one prompt of a length). Avg. = mean of the four tasks, only when all four are present.",
    )


#: (metric, paper mean of a task run) per family; the lm-eval row mean of the same metric sits beside it.
def _paper_mean(run: TaskRun, metric: str) -> Cell:
    if run.spec.is_v2:
        if run.spec.family == "atc":
            return atc_v2_cell(run.samples)
        return cell_mean(run.samples, metric)
    if run.spec.family in HEADLINE_METRIC or (run.spec.family == "multi_reasoning" and metric == "strict"):
        return cell_mean(run.samples, metric)
    if run.spec.family == "atc" and run.spec.variant != "open":
        return atc_category_cell(atc_by_category(run.samples).get(atc_category(run.spec), {}))
    if run.spec.family == "counting_stars":
        return counting_stars_cell(run.samples)
    return row_mean(run.samples, metric)


def _task_metrics(run: TaskRun) -> list[str]:
    family = run.spec.family
    if run.judged:
        return [headline_metric(run.spec)]
    if run.spec.is_v2:
        return [V2_HEADLINE_METRIC[family]]
    if family == "multi_reasoning":
        return ["reference"] if run.scoring == "reference" else ["reference", "strict"]
    if family == "atc":
        return ["score"] if run.spec.variant == "open" else ["perf_4", "acc"]
    if family == "counting_stars":
        return ["star_score"]
    return [HEADLINE_METRIC[family]]


def _lm_eval_row_mean(run: TaskRun, metric: str) -> Cell:
    if run.judged:  # lm-eval printed the rule-based metric; this is the plain row mean of the judge scores
        return row_mean(run.samples, metric)
    if metric in run.reported:
        return Cell(run.reported[metric], len(run.samples))
    if metric == "perf_4":
        rows = scoring.complete_items(
            (
                str(s.metrics["perf_4"][0]),
                str(s.metrics["perf_4"][1]),
                bool(s.metrics["perf_4"][2]),
            )
            for s in run.samples
            if "perf_4" in s.metrics
        )
        return Cell(scoring.circular_scores(rows)["perf_4"] if rows else None, len(run.samples))
    if metric == "star_score":
        return row_mean(run.samples, "star_score")
    return row_mean(run.samples, metric)


PAPER_MEAN_NAME = {
    "single": "mean over (length, depth) cells",
    "multi_retrieval": "mean over lengths",
    "multi_reasoning": "mean over (length, depth, needles) cells",
    "atc": "perf_4 weighted by needle count",
    "counting_stars": "mean over star x length grid",
}


PAPER_MEAN_V2_ATC = "v2: mean per relation count, weighted by relation count"


def scores_table(results: Results) -> Table:
    """Per task: the paper mean and lm-eval's row mean side by side, with coverage."""
    rows = []
    for run in sorted(results.runs, key=lambda r: (_entity_order(results.runs)(r.entity), r.task)):
        for metric in _task_metrics(run):
            if run.spec.is_v2:
                paper = _paper_mean(run, metric)
                how = PAPER_MEAN_V2_ATC if run.spec.family == "atc" else "v2: " + PAPER_MEAN_NAME[run.spec.family]
            elif run.spec.family == "atc" and metric == "acc":
                paper = Cell(None, 0)
                how = "(row accuracy, no paper mean)"
            elif run.spec.family == "atc" and run.spec.variant == "open":
                paper, how = row_mean(run.samples, metric), "mean over rows"
            else:
                paper, how = _paper_mean(run, metric), PAPER_MEAN_NAME[run.spec.family]
            rows.append(
                [
                    run.entity,
                    run.task,
                    metric,
                    paper,
                    how,
                    _lm_eval_row_mean(run, metric),
                    run.scorer,
                    run_coverage(run)[1],
                ]
            )
    return Table(
        "scores",
        "Per task: the paper mean beside lm-eval's row mean",
        [
            "Model",
            "Task",
            "Metric",
            "Paper mean",
            "How",
            "lm-eval row mean",
            "Scorer",
            "Coverage",
        ],
        rows,
        note="The paper mean is the reference summariser's (every grid cell weighted alike); lm-eval's row mean is "
        "what lm_eval prints (every row weighted alike). They differ when cells hold different numbers of rows. "
        "Scorer: 'rule' is the metric lm-eval logged; 'judge' is the `needlebench judge` rating (1-10) x 10, "
        "unrated samples left out of the means (the row mean is then the plain mean of the judge scores).",
    )


def experiments_table(results: Results) -> Table | None:
    """Custom configs (experiment files, or configs known only from their samples), each under its own name:
    its grid, the scorer, the mean over grid cells and the standard deviation over runs."""
    runs = [run for run in results.runs if run.custom and run.spec.family in HEADLINE_METRIC]
    if not runs:
        return None
    rows = []
    for run in sorted(runs, key=lambda r: (_entity_order(results.runs)(r.entity), r.task)):
        spec = run.spec
        metric = headline_metric(spec)
        mean, std, count = runs_summary(run.samples, metric)
        rows.append(
            [
                run.entity,
                run.label,
                f"{spec.task_label} {spec.language.upper()}",
                (
                    f"{len(spec.lengths)} lengths ({_lengths_text(spec.lengths)}) x {len(spec.depths)} depths x "
                    f"{spec.repeats} runs"
                ),
                run.grid_source,
                run.scorer,
                mean,
                std,
                count,
                run.unscored,
                run_coverage(run)[1],
            ]
        )
    return Table(
        "experiments",
        "Custom configs (experiment files): mean over grid cells and standard deviation over runs (0-100)",
        [
            "Model",
            "Config",
            "Task",
            "Grid",
            "Grid from",
            "Scorer",
            "Mean",
            "Std over runs",
            "Runs",
            "Unscored",
            "Coverage",
        ],
        rows,
        note="Mean: every (length, depth) cell weighted alike, each cell the mean of its rows (n = scored samples). "
        "Std over runs: the sample standard deviation (n - 1) of the runs' own means over cells. Grid from: the "
        "experiment recorded in the dataset manifest (the run's data_dir or --data-dir), else the lengths and "
        "depths the rows carry. Unscored: judged samples without a usable rating, left out of the means.",
    )


#: Run-health keys ``needlebench eval`` adds to each task of the results JSON (shown in their own table).
HEALTH = ("skipped_too_long", "output_truncated", "no_final_answer")


def lm_eval_table(results: Results) -> Table | None:
    rows = [row for row in results.reported if row[2] not in HEALTH]
    if not rows:
        return None
    return Table(
        "lm_eval_results",
        "lm-eval results as the harness reported them (newest per model and task)",
        ["Model", "Task or group", "Metric", "Value", "Samples"],
        rows,
        digits=3,
    )


def health_table(results: Results) -> Table | None:
    """Per model and task: rows run, rows skipped as too long, outputs that used all of max_gen_toks, and the
    share without a final answer (``needlebench eval`` writes these beside lm-eval's metrics)."""
    health: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    samples: dict[tuple[str, str], Any] = {}
    for model, task, metric, value, count in results.reported:
        if metric in HEALTH:
            health[(model, task)][metric] = value
            samples[(model, task)] = count
    if not health:
        return None

    def shown(key: str, value: Any) -> Any:  # counts as whole numbers, the share in percent (0-100) as scores
        if key == "no_final_answer" and isinstance(value, (int, float)):
            return 100.0 * value
        return int(value) if isinstance(value, float) and value.is_integer() else value

    rows = [
        [model, task, samples[(model, task)], *(shown(key, values.get(key)) for key in HEALTH)]
        for (model, task), values in sorted(health.items())
    ]
    return Table(
        "run_health",
        "Run health (rows skipped as too long, outputs that used all of max_gen_toks, % without a final answer)",
        ["Model", "Task", "Rows", "Skipped (too long)", "Output truncated", "No final answer (%)"],
        rows,
        digits=1,
    )


def build_tables(results: Results) -> list[Table]:
    """All tables with data: per size, ATC, Counting-Stars, per-task means, lm-eval's own numbers."""
    tables: list[Table] = []
    for size in SIZES:
        table = needlebench_size_table(results, size)
        if table:
            tables.append(table)
    for size in SIZES:
        table = needlebench_v2_size_table(results, size)
        if table:
            tables.append(table)
    tables += atc_tables(results)
    tables += atc_v2_tables(results)
    stars = counting_stars_table(results)
    if stars:
        tables.append(stars)
    experiments = experiments_table(results)
    if experiments:
        tables.append(experiments)
    tables.append(scores_table(results))
    health = health_table(results)
    if health:
        tables.append(health)
    harness = lm_eval_table(results)
    if harness:
        tables.append(harness)
    for table in tables:
        table.title = f"{table.title} [{SCORING_LABEL[results.scoring]}]"
    return tables


# --------------------------------------------------------------------------------------------- writing


def _format(value: Any, digits: int) -> str:
    if isinstance(value, Cell):
        if value.value is None:  # a count only beside a value
            return "–"
        text = f"{value.value:.{digits}f} (n={value.n})"
        return text + (f" [{value.note}]" if value.note else "")
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


#: Markdown characters a cell from input data may not use: links and images (``[x](javascript:...)``), table
#: pipes and backslash escapes. ``&``, ``<`` and ``>`` become entities, so no raw HTML passes.
_MD_SPECIAL = re.compile(r"([\\\[\]|])")


def _md_escape(text: str) -> str:
    """Text from input data (model, task and config names, metadata) as inert Markdown: no HTML, no link, no
    table break; it reads the same once rendered (CommonMark backslash escapes and entities)."""
    text = " ".join(str(text).splitlines())
    return html.escape(_MD_SPECIAL.sub(r"\\\1", text), quote=False)


def table_markdown(table: Table) -> str:
    lines = [f"## {_md_escape(table.title)}", ""]
    if table.note:
        lines += [_md_escape(table.note), ""]
    lines += ["| " + " | ".join(_md_escape(h) for h in table.header) + " |", "|" + "---|" * len(table.header)]
    for row in table.rows:
        lines.append("| " + " | ".join(_md_escape(_format(cell, table.digits)) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def table_csv_rows(table: Table) -> list[list[Any]]:
    """CSV rows: a :class:`Cell` column becomes two columns, the value and ``<column> n`` (and a note)."""
    cell_columns = [i for i in range(len(table.header)) if any(isinstance(row[i], Cell) for row in table.rows)]
    header: list[Any] = []
    for index, name in enumerate(table.header):
        header.append(name)
        if index in cell_columns:
            header.append(f"{name} n")
            if any(isinstance(row[index], Cell) and row[index].note for row in table.rows):
                header.append(f"{name} note")
    out = [header]
    for row in table.rows:
        line: list[Any] = []
        for index, value in enumerate(row):
            if index in cell_columns:
                cell = value if isinstance(value, Cell) else Cell(None, 0)
                line += ["" if cell.value is None else round(cell.value, 6), cell.n]
                if f"{table.header[index]} note" in header:
                    line.append(cell.note)
            else:
                line.append("" if value is None else (round(value, 6) if isinstance(value, float) else value))
        out.append(line)
    return out


#: Text a spreadsheet would run as a formula (OWASP "CSV injection"): it gets a leading ``'``.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def csv_safe(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text, never runs: text starting with ``= + - @``, tab or CR is
    prefixed with ``'`` (OWASP's rule); numbers, and text that is a plain number (``-3.5``), stay numbers."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value


def write_table(table: Table, out_dir: Path) -> list[Path]:
    """Write a table as Markdown and CSV; return the two paths."""
    md = out_dir / f"{table.name}.md"
    md.write_text(table_markdown(table), encoding="utf-8")
    path = out_dir / f"{table.name}.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([csv_safe(value) for value in row] for row in table_csv_rows(table))
    return [md, path]


def table_html(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    body = []
    for row in table.rows:
        cells = []
        for value in row:
            text = html.escape(_format(value, table.digits))
            empty = isinstance(value, Cell) and value.value is None
            cells.append(f'<td class="empty">{text}</td>' if empty else f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f"<p class='note'>{html.escape(table.note)}</p>" if table.note else ""
    return (
        f"<h2 id='{table.name}'>{html.escape(table.title)}</h2>{note}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:1em 0;"
    "font-size:13px}th,td{border:1px solid #bbb;padding:3px 6px;text-align:left}th{background:#eee}"
    "td.empty{background:repeating-linear-gradient(45deg,#eee,#eee 4px,#ddd 4px,#ddd 8px);color:#666}"
    ".note{color:#444;font-size:13px}figure{margin:1em 0}img{max-width:100%;border:1px solid #ccc}"
)

EXPLANATION = (
    "Headline numbers are the papers' means: NeedleBench averages per grid cell (S-RT per length and depth, "
    "M-RT per length, M-RS per length, depth and needle count; each cell the mean of its repeats) and weights the "
    "per-size overall 0.4 S-RT + 0.3 M-RT + 0.3 M-RS; ATC is CircularEval perf_4 per needle count weighted by "
    "needle count; Counting-Stars is the mean over the star x length grid. NeedleBench v2 results have their own "
    "tables (needlebench_v2_<size>: each task the mean per grid cell, Overall the plain mean of S-RT, M-RT and M-RS; "
    "atc_v2: weighted by relation count). lm-eval's own number (the mean over "
    "rows) is in the 'scores' table under 'lm-eval row mean'. n = samples behind a value; '[partial]' marks values "
    "built from part of a config ('[partial: EN only]': a both-languages value from one language); '–' is no value."
)


def source_label(path: Path) -> str:
    """A results path as a report names it (reports are shared): relative to the working folder when inside it,
    else its last two parts, never the machine's absolute path."""
    path = Path(path)
    try:
        return str(path.absolute().relative_to(Path.cwd())) or "."
    except ValueError:
        return str(Path(*path.absolute().parts[1:][-2:]))


def write_html(
    path: Path,
    tables: Sequence[Table],
    figures: Sequence[tuple[str, Path]],
    sources: Sequence[Path],
    scorers: str = "",
) -> Path:
    """A self-contained page: every table, every figure embedded as a base64 PNG."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>NeedleBench report</title>",
        f"<style>{_CSS}</style></head><body><h1>NeedleBench report</h1>",
        f"<p class='note'>{html.escape(EXPLANATION)}</p>",
        f"<p class='note'>{html.escape(scorers)}</p>" if scorers else "",
        "<p class='note'>Sources: " + ", ".join(html.escape(source_label(s)) for s in sources) + "</p>",
    ]
    parts += [table_html(table) for table in tables]
    if figures:
        parts.append("<h2>Figures</h2>")
    for title, figure in figures:
        data = base64.b64encode(figure.read_bytes()).decode("ascii")
        parts.append(
            f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,{data}'>"
            f"<figcaption>{html.escape(title)}</figcaption></figure>"
        )
    parts.append("</body></html>")
    path.write_text("\n".join(parts) + "\n", encoding="utf-8")
    return path


def scorer_text(results: Results) -> str:
    """One line saying which scorer each task's numbers come from (rule-based metric or model judge)."""
    judged = [run for run in results.runs if run.judged]
    rules = (
        "the rule-based metrics lm-eval logged"
        if results.scoring == "default"
        else "the reference-exact *_reference metrics lm-eval logged (computed from the output for runs without "
        "them), as OpenCompass's evaluators and the Counting-Stars notebook score"
    )
    if not judged:
        return f"Scorer: {rules} (no judged_samples_*.jsonl found); {SCORING_LABEL[results.scoring]}."
    parts = [f"{run.entity} / {run.label}: {run.scorer}" for run in judged]
    rule = len(results.runs) - len(judged)
    return (
        "Scorer: judge scores from judged_samples_*.jsonl (`needlebench judge`; rating 1-10 shown x 10 on the "
        "0-100 scale, unrated samples left out of every mean and counted as unscored) for "
        + "; ".join(parts)
        + (f"; the other {rule} task(s): {rules}." if rule else ".")
        + f" {SCORING_LABEL[results.scoring]}."
    )


def write_report(
    results: Sequence[Path | str] | Path | str,
    out_dir: Path | str,
    *,
    names: Mapping[str, str] | None = None,
    annotate: str = "counts",
    pdf: bool = False,
    figures: bool = True,
    data_dirs: Sequence[Path | str] = (),
    scoring: str = "default",
) -> list[Path]:
    """Tables (Markdown, CSV), figures (PNG, PDF on request), ``README.md`` and ``report.html`` in ``out_dir``.

    ``figures=False`` writes the tables only (``--no-figures``). ``scoring="reference"`` reports the
    reference-exact ``*_reference`` metrics instead of the default ones (:func:`apply_scoring`).

    Everything is read and computed before the first file is written, so bad input writes nothing.
    """
    from needlebench.evaluation import report_figures

    if isinstance(results, (str, Path)):
        results = [results]
    check_scoring(scoring)
    loaded = apply_scoring(load_results(list(results), names, data_dirs), scoring)
    tables = build_tables(loaded)
    scorers = scorer_text(loaded)
    planned = report_figures.plan_figures(loaded, annotate=annotate) if figures else []
    out_dir = Path(out_dir)
    names = [f"{table.name}.{ext}" for table in tables for ext in ("md", "csv")]
    names += [f"{figure.name}.{ext}" for figure in planned for ext in (("png", "pdf") if pdf else ("png",))]
    names += ["README.md", "report.html"]
    folder = ReportFolder.open(out_dir, names)
    written: list[Path] = []
    for table in tables:
        written += write_table(table, out_dir)
    drawn: list[tuple[str, Path]] = []
    for figure in planned:
        paths = report_figures.render(figure, out_dir, pdf=pdf)
        written += paths
        drawn.append((figure.title, paths[0]))
    index = out_dir / "README.md"
    lines = [
        "# NeedleBench report",
        "",
        EXPLANATION,
        "",
        _md_escape(scorers),
        "",
        "Sources: " + ", ".join(_md_escape(source_label(s)) for s in loaded.sources),
        "",
    ]
    lines += [table_markdown(table) for table in tables]
    if drawn:
        lines += ["## Figures", ""] + [f"![{_md_escape(title)}]({path.name})" for title, path in drawn]
    index.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.append(index)
    written.append(write_html(out_dir / "report.html", tables, drawn, loaded.sources, scorers))
    folder.finish()
    return written


#: The file a report leaves in its folder, listing the files it wrote with their sha256: a later report into the
#: same folder replaces those (unless changed since) and nothing else.
REPORT_MANIFEST = ".needlebench-report.json"


class ReportFolder:
    """The ``--out`` folder of a report: new, empty, or one a report wrote before (it holds
    :data:`REPORT_MANIFEST`). A user's file is never overwritten: when a file the report would write is not
    one the manifest lists unchanged, the report refuses before writing anything."""

    def __init__(self, path: Path, names: Sequence[str], previous: Mapping[str, str | None]) -> None:
        self.path, self.names, self.previous = path, list(dict.fromkeys(names)), previous

    @classmethod
    def open(cls, path: Path, names: Sequence[str]) -> ReportFolder:
        """Check the folder (refusing with a one-line error), create it if new, and record what is coming."""
        if path.exists() and not path.is_dir():
            raise NeedlebenchError(f"--out {str(path)!r} is a file; give a new or empty folder, or an earlier report's")
        previous = cls._previous(path, names) if path.is_dir() else {}
        folder = cls(path, names, previous)
        for name in folder.names:
            folder._check_replaceable(name)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise NeedlebenchError(f"cannot create --out {str(path)!r}: {error.strerror}") from None
        # listed before anything is written: an interrupted report leaves a folder the next one may replace
        folder._write_manifest({**previous, **dict.fromkeys(folder.names)})
        return folder

    @staticmethod
    def _previous(path: Path, names: Sequence[str]) -> dict[str, str | None]:
        """The files an earlier report listed (name -> sha256), {} for an empty folder; a refusal naming a file
        the report would overwrite (else the first one there) for a folder that holds anything else."""
        manifest = path / REPORT_MANIFEST
        if not manifest.is_file() or manifest.is_symlink():
            entries = sorted(entry.name for entry in path.iterdir())
            if entries:
                clash = next((name for name in names if name in entries), None)
                held = f"would overwrite {clash!r}" if clash else f"holds {entries[0]!r}"
                raise NeedlebenchError(
                    f"--out {str(path)!r} is not empty and no needlebench report wrote it (the report {held}); "
                    f"nothing was written. Give a new or empty folder, or an earlier report's (it holds {REPORT_MANIFEST})"
                )
            return {}
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
            files = data["files"] if data.get("tool") == "needlebench report" else None
            if not isinstance(files, dict) or not all(
                _plain_name(name) and (digest is None or isinstance(digest, str)) for name, digest in files.items()
            ):
                raise ValueError
        except (OSError, UnicodeDecodeError, ValueError, AttributeError, KeyError, TypeError):
            raise NeedlebenchError(
                f"--out {str(path)!r} holds a {REPORT_MANIFEST} that is not a needlebench report's file list; "
                "give a new or empty folder"
            ) from None
        return files

    def _unchanged(self, name: str, *, interrupted_ok: bool = True) -> bool:
        """Whether ``name`` is a regular file the earlier report wrote and nobody changed since; one an
        interrupted report was writing (no sha256 yet) counts when ``interrupted_ok``."""
        target = self.path / name
        if name not in self.previous or target.is_symlink() or not target.is_file():
            return False
        digest = self.previous[name]
        return interrupted_ok if digest is None else _sha256(target) == digest

    def _check_replaceable(self, name: str) -> None:
        target = self.path / name
        if (target.exists() or target.is_symlink()) and not self._unchanged(name):
            why = (
                "changed since the report wrote it"
                if name in self.previous
                else "which needlebench report did not write"
            )
            raise NeedlebenchError(
                f"--out {str(self.path)!r} already holds {name!r}, {why}; nothing was written. Give a new or empty "
                "folder, or move the file away"
            )

    def finish(self) -> None:
        """Remove the earlier report's files this one did not write again (if unchanged); list this one's."""
        for name in self.previous:
            if name not in self.names and self._unchanged(name, interrupted_ok=False):
                (self.path / name).unlink()
        self._write_manifest({name: _sha256(self.path / name) for name in self.names})

    def _write_manifest(self, files: Mapping[str, str | None]) -> None:
        from needlebench import __version__

        data = {"tool": "needlebench report", "version": __version__, "files": dict(sorted(files.items()))}
        temp = self.path / f".{REPORT_MANIFEST}.tmp"
        temp.unlink(missing_ok=True)  # never through a link someone left under this name
        temp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        temp.replace(self.path / REPORT_MANIFEST)


def _plain_name(name: Any) -> bool:
    """A file name directly in the folder: no separator, not ``.``/``..``, not the manifest itself."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", REPORT_MANIFEST)
        and not any(char in name for char in "/\\\0")
        and not name.startswith(f".{REPORT_MANIFEST}")
    )


def _sha256(path: Path) -> str:
    from needlebench.dataset.publish import file_digest

    return file_digest(path).sha256


def parse_names(values: Iterable[str]) -> dict[str, str]:
    """``--name PATH=NAME`` options as a mapping; a value without ``=`` is a one-line error."""
    names: dict[str, str] = {}
    for value in values:
        key, sep, name = value.partition("=")
        if not sep or not key or not name:
            raise NeedlebenchError(f"--name {value!r} is not PATH=NAME (a results path or pretrained value, a name)")
        names[key] = name
    return names
