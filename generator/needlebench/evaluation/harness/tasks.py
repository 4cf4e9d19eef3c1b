"""The library side of the lm-evaluation-harness tasks in ``harness_tasks/needlebench``: the machinery every family
shares. What differs by family (task templates, metrics, generation budgets, groups, ``process_results`` hooks,
oracle answers) is asked of the family objects (:mod:`needlebench.evaluation.families`).

* :func:`load_dataset` is the tasks' ``custom_dataset``. lm-eval calls it with the task's ``metadata`` merged
  with ``--metadata`` and ``--model_args``; it reads ``needlebench_config`` (set by each task YAML) and the data
  source: ``data_dir`` (a local folder built by ``needlebench build``), ``data_repo`` + ``data_revision`` (a Hub
  dataset), or neither (rows are built on the fly from the pinned release seed). ``context_lengths`` keeps only
  rows of the given grid lengths; ``subset`` keeps that many rows stratified over the grid (see
  :mod:`needlebench.evaluation.harness.subset`); ``think_end`` and ``think_unclosed`` choose how reasoning is
  stripped before scoring (:mod:`needlebench.evaluation.scoring.thinking`: the loader records the policy for the
  hooks). The Hub keys carry a ``data_`` prefix because model args share the namespace (``hf`` and ``vllm`` take
  ``pretrained`` and ``revision``).
* :func:`hooks` maps every name the task YAMLs call (``!function utils.<name>``) to its function: the loader, each
  family's ``process_*`` hooks, returning the metrics of one row (the default metrics and, beside each, its
  reference-exact twin ``<metric>_reference``, the row scored as the reference code scores it, see
  :mod:`needlebench.evaluation.scoring.reference`; M-RS ``strict`` has none), and the custom aggregations. They are
  attributes of this module too (``harness.process_single``), which the task folder's ``utils.py`` re-exports.
* :func:`oracle_answer` is the perfect answer to a row (used by the ``needlebench-oracle`` model).
* :func:`task_files` renders every YAML file of the task folder (``scripts/gen_harness_tasks.py`` writes them);
  :func:`task_groups` lists its groups (per family, per size and per edition).

Scales: NeedleBench metrics are 0..100 like the reference; Counting-Stars metrics are 0..1 like the paper.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.families import EVAL_FAMILIES, eval_family
from needlebench.evaluation.families.base import EvalFamily
from needlebench.evaluation.families.hooks import MEAN, REFERENCE_SUFFIX, TaskTemplate, reference_metric
from needlebench.evaluation.harness.subset import SUBSET_KEY, parse_subset, select_subset
from needlebench.evaluation.harness.task_yaml import dump_yaml, function
from needlebench.evaluation.scoring.thinking import policy_from, set_policy
from needlebench.tasks.grid import SIZES, ConfigSpec, get_config, registry

__all__ = [
    "REFERENCE_SUFFIX",
    "TaskTemplate",
    "reference_metric",
]

#: Version written to every task's ``metadata.version`` (bump when prompts, metrics or generation change).
TASK_VERSION = 1.1

#: Prefix of every task and group name.
TASK_PREFIX = "needlebench_"

#: Environment variable read by :func:`load_dataset` when the metadata names no data source.
DATA_DIR_ENV = "NEEDLEBENCH_DATA_DIR"

#: Metadata keys naming a published Hub dataset and its tag or commit (``revision`` is a model arg of hf / vllm).
DATA_REPO_KEY = "data_repo"
DATA_REVISION_KEY = "data_revision"
#: Former metadata keys -> their replacements (a former key is a one-line error naming the new one).
RENAMED_KEYS = {"repo_id": DATA_REPO_KEY}


# --------------------------------------------------------------------------------------------- families


#: Every task template by its key (the base file ``_default_<key>_template_yaml``), over the families.
TEMPLATES: dict[str, TaskTemplate] = {
    template.key: template for entry in EVAL_FAMILIES.values() for template in entry.templates()
}


def template_of(spec: ConfigSpec) -> TaskTemplate:
    """The base template a config's YAML includes (its family chooses by edition and variant)."""
    return eval_family(spec).template(spec)


def template_key(spec: ConfigSpec) -> str:
    """The key of the base template a config's YAML includes."""
    return template_of(spec).key


def max_gen_toks_for(spec: ConfigSpec) -> int:
    """Generation budget of a config (its family's rule)."""
    return eval_family(spec).max_gen_toks(spec)


def task_name(config: str) -> str:
    """lm-eval task name of a config."""
    return f"{TASK_PREFIX}{config}"


def hooks() -> dict[str, Callable[..., Any]]:
    """Every function the task YAMLs name (``!function utils.<name>``), by name: the loader, then each family's
    ``process_results`` hooks and custom aggregations."""
    found: dict[str, Callable[..., Any]] = {"load_dataset": load_dataset}
    for entry in EVAL_FAMILIES.values():
        found.update(entry.hooks())
    return found


def __getattr__(name: str) -> Callable[..., Any]:
    """The hooks are attributes of this module (``harness.process_single``), the names ``utils.py`` re-exports."""
    hook = hooks().get(name)
    if hook is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return hook


# --------------------------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class EditionGroups:
    """How the groups of a NeedleBench edition are named and what metrics they list."""

    prefix: str  # of its family and size groups
    alias: str  # of its groups, before the family or size
    family_alias: str  # the family part of a family group's alias: "{label}" (S-RT) or "{key}" (single)
    whole: bool  # a group of every task of the edition, named like the prefix without its last "_"
    twins_last: bool  # a group of several families lists their metrics, then the twins (else each family's twins)


#: The groups of each edition (``spec.edition``): v1 ``needlebench_<family>`` and ``needlebench_<size>``; v2
#: ``needlebench_v2`` (every v2 task), ``needlebench_v2_<family>`` and ``needlebench_v2_<size>``.
EDITION_GROUPS = {
    "v1": EditionGroups(TASK_PREFIX, "NeedleBench", "{label}", whole=False, twins_last=False),
    "v2": EditionGroups(f"{TASK_PREFIX}v2_", "NeedleBench v2", "{key}", whole=True, twins_last=True),
}


@dataclass(frozen=True)
class TaskGroup:
    """A group of tasks and the metrics it averages over them (weighted by number of rows)."""

    name: str
    alias: str
    members: tuple[str, ...]  # config names
    metrics: tuple[str, ...]


def group_metrics(members: Iterable[EvalFamily], edition: str) -> tuple[str, ...]:
    """The metrics a group over the families ``members`` (in registry order) of ``edition`` aggregates, with
    their reference twins."""
    parts = [(entry.group_metrics[edition], entry.reference_twins(entry.group_metrics[edition])) for entry in members]
    if EDITION_GROUPS[edition].twins_last:
        return tuple(metric for metrics, _twins in parts for metric in metrics) + tuple(
            twin for _metrics, twins in parts for twin in twins
        )
    return tuple(metric for metrics, twins in parts for metric in (*metrics, *twins))


def family_group_metrics(spec: ConfigSpec) -> tuple[str, ...]:
    """The metrics of the group of ``spec``'s family and edition (also those of an experiment's group)."""
    return group_metrics([eval_family(spec)], spec.edition)


def task_groups() -> dict[str, TaskGroup]:
    """Every group by name, edition by edition: the edition's whole group, its family groups, its size groups."""
    by_edition: dict[str, list[ConfigSpec]] = {}
    by_family: dict[tuple[str, str], list[str]] = {}
    by_size: dict[tuple[str, str], list[ConfigSpec]] = {}
    for spec in registry().values():
        by_edition.setdefault(spec.edition, []).append(spec)
        by_family.setdefault((spec.edition, spec.family), []).append(spec.name)
        if spec.size is not None:
            by_size.setdefault((spec.edition, spec.size), []).append(spec)
    groups: dict[str, TaskGroup] = {}
    for edition, style in EDITION_GROUPS.items():
        grouped = [entry for entry in EVAL_FAMILIES.values() if edition in entry.group_metrics]
        if style.whole:
            name = style.prefix.rstrip("_")
            members = tuple(spec.name for spec in by_edition.get(edition, []))
            groups[name] = TaskGroup(name, style.alias, members, group_metrics(grouped, edition))
        for entry in grouped:
            members = tuple(by_family.get((edition, entry.key), ()))
            label = get_config(members[0]).task_label if members else entry.key
            alias = f"{style.alias} " + style.family_alias.format(label=label, key=entry.key)
            name = style.prefix + entry.key
            groups[name] = TaskGroup(name, alias, members, group_metrics([entry], edition))
        for size in SIZES:
            specs = by_size.get((edition, size), [])
            if specs:
                present = {spec.family for spec in specs}
                metrics = group_metrics([entry for entry in grouped if entry.key in present], edition)
                name = style.prefix + size
                groups[name] = TaskGroup(name, f"{style.alias} {size}", tuple(spec.name for spec in specs), metrics)
    return groups


# --------------------------------------------------------------------------------------------- data source


def _context_length_filter(value: Any, spec: ConfigSpec) -> set[int] | None:
    """Parse the ``context_lengths`` metadata (an int, a list of ints, or ``"1000|2000"``) into allowed lengths."""
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        items: Iterable[Any] = [part for part in value.replace(",", "|").split("|") if part.strip()]
    elif isinstance(value, Iterable):
        items = value
    else:
        items = [value]
    lengths: set[int] = set()
    for item in items:
        try:
            lengths.add(int(str(item).strip()))
        except ValueError:
            raise NeedlebenchError(
                f"context_lengths entry {item!r} is not an integer; allowed for {spec.name}: "
                f"{', '.join(map(str, spec.lengths))}"
            ) from None
    unknown = sorted(lengths - set(spec.lengths))
    if unknown:
        raise NeedlebenchError(
            f"context_lengths {unknown} not in the grid of {spec.name}; allowed: {', '.join(map(str, spec.lengths))}"
        )
    return lengths


def _reject_renamed_keys(metadata: Mapping[str, Any]) -> None:
    """Raise a one-line error when the metadata uses a former data-source key (see :data:`RENAMED_KEYS`)."""
    for old, new in RENAMED_KEYS.items():
        if metadata.get(old) not in (None, ""):
            raise NeedlebenchError(
                f"metadata key {old!r} was renamed to {new!r}; pass {new}=ORG/NAME (and {DATA_REVISION_KEY}=vX.Y.Z) "
                "in --metadata"
            )


def _release_seed(value: Any) -> int | None:
    """The ``release_seed`` metadata as an int (None when not given)."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NeedlebenchError(f"release_seed {value!r} is not an integer") from None


def resolve_source(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The data-source keyword arguments of ``load_split`` from task metadata (and ``NEEDLEBENCH_DATA_DIR``).

    Reads ``data_dir``, ``data_repo``, ``data_revision`` and ``release_seed``; model args such as ``pretrained``
    and ``revision`` are ignored. ``data_dir`` wins over ``data_repo``; a relative ``data_dir`` resolves against
    the working directory.
    """
    _reject_renamed_keys(metadata)
    data_dir = metadata.get("data_dir") or None
    repo = metadata.get(DATA_REPO_KEY) or None
    revision = metadata.get(DATA_REVISION_KEY) or None
    if data_dir is None and repo is None and os.environ.get(DATA_DIR_ENV):
        data_dir = os.environ[DATA_DIR_ENV]
    if revision is not None and repo is None:
        raise NeedlebenchError(
            f"{DATA_REVISION_KEY} {revision!r} given without {DATA_REPO_KEY}; pass {DATA_REPO_KEY}=ORG/NAME with it"
        )
    if data_dir is not None:
        path = Path(str(data_dir)).expanduser().resolve()
        if not path.is_dir():
            raise NeedlebenchError(
                f"data_dir {str(data_dir)!r} is not a directory; pass a folder built by `needlebench build --out DIR`"
            )
        return {"data_dir": str(path), "repo_id": None, "revision": None, "release_seed": None}
    return {
        "data_dir": None,
        "repo_id": str(repo) if repo else None,
        "revision": str(revision) if revision else None,
        "release_seed": _release_seed(metadata.get("release_seed")),
    }


def load_dataset(**metadata: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` hook: ``{"test": rows of the task's config}``.

    ``metadata`` is the task metadata (``needlebench_config``, ``version``) merged with ``--metadata`` and
    ``--model_args``; see :func:`resolve_source` for the data-source keys. The reasoning policy of the metadata
    (``think_end``, ``think_unclosed``) is recorded for the config's rows, which the ``process_results`` hooks
    score under it (:func:`needlebench.evaluation.scoring.thinking.policy_for`).
    """
    config = metadata.get("needlebench_config")
    if not config:
        raise NeedlebenchError(
            "task metadata has no needlebench_config; use the YAMLs of harness_tasks/needlebench "
            "(regenerate them with scripts/gen_harness_tasks.py)"
        )
    policy = policy_from(metadata)
    source = resolve_source(metadata)
    if source["data_dir"] is not None:
        from needlebench.dataset.build import register_experiments  # deferred: card, builders (0.2 s)
        from needlebench.dataset.manifest import read_manifest  # deferred: as the line above

        # its experiment configs, looked up by name
        register_experiments(read_manifest(Path(source["data_dir"]), missing_ok=True))
    spec = get_config(str(config))
    lengths = _context_length_filter(metadata.get("context_lengths"), spec)
    from needlebench.dataset.load import load_split  # deferred: the builders (0.2 s); lm-eval imports us per task

    split = load_split(spec.name, **source)
    if lengths is not None:
        split = split.filter(lambda row: int(row["context_length"]) in lengths)
    split = select_subset(split, parse_subset(metadata.get(SUBSET_KEY)), spec.name)
    set_policy(spec.name, policy)
    remember_split(split)
    return {"test": split}


#: Splits handed to lm-eval in this process (Arrow-backed, so keeping them is cheap); the oracle model looks
#: prompts up in them.
_LOADED_SPLITS: list[Iterable[Mapping[str, Any]]] = []


def remember_split(rows: Iterable[Mapping[str, Any]]) -> None:
    """Keep a reference to rows handed to lm-eval, for :func:`loaded_rows`."""
    _LOADED_SPLITS.append(rows)


def loaded_rows() -> Iterable[Mapping[str, Any]]:
    """Every row :func:`load_dataset` returned in this process (in load order)."""
    for rows in _LOADED_SPLITS:
        yield from rows


# --------------------------------------------------------------------------------------------- oracle


def oracle_answer(doc: Mapping[str, Any]) -> str:
    """The answer that scores full marks on a row (proves the pipeline end to end): its family's, in a form the
    family's scorer reads."""
    config = doc.get("config")
    if not config:
        raise NeedlebenchError(f"row {doc.get('id')!r} names no config; an oracle answer needs the row's config")
    spec = get_config(str(config))
    return eval_family(spec).oracle_answer(doc, spec)


# --------------------------------------------------------------------------------------------- YAML rendering

#: The first line of every generated file of the task folder.
GENERATED_NOTE = "# Generated by scripts/gen_harness_tasks.py from needlebench.tasks.grid; do not edit by hand.\n"
_NOTE = GENERATED_NOTE.removeprefix("# ").rstrip("\n")

#: Greedy decoding with no stop sequence; ``max_gen_toks`` is added per template and task.
GENERATION = {"until": [], "do_sample": False, "temperature": 0.0}


def generation_kwargs(max_gen_toks: int) -> dict[str, Any]:
    """The ``generation_kwargs`` of a task with a generation budget."""
    return {**GENERATION, "max_gen_toks": max_gen_toks}


def base_template_filename(key: str) -> str:
    """File name of a family's base template (no ``.yaml`` suffix, so lm-eval's indexer skips it)."""
    return f"_default_{key}_template_yaml"


def base_template_config(template: TaskTemplate) -> dict[str, Any]:
    """The base YAML a family's task files include, as data."""
    return {
        "output_type": "generate_until",
        "custom_dataset": function("load_dataset"),
        "test_split": "test",
        # zero-shot: no few-shot pool (without one lm-eval decodes every test row into a list at task load)
        "fewshot_config": {"samples": []},
        "doc_to_text": "prompt",
        "doc_to_target": "answer",
        "process_results": function(template.process_results),
        "generation_kwargs": generation_kwargs(template.max_gen_toks),
        "metric_list": [
            {
                "metric": metric,
                "aggregation": aggregation if aggregation == MEAN else function(aggregation),
                "higher_is_better": True,
            }
            for metric, aggregation in template.metrics
        ],
        "metadata": {"version": TASK_VERSION},
    }


def render_base_template(template: TaskTemplate, note: str = _NOTE) -> str:
    """The base YAML a family's task files include."""
    return dump_yaml(base_template_config(template), note, f"Base of the {template.label} tasks.")


def task_config(spec: ConfigSpec) -> dict[str, Any]:
    """The YAML of one config's task, as data (``generation_kwargs`` only where the budget is the config's own)."""
    template = template_of(spec)
    config: dict[str, Any] = {
        "include": base_template_filename(template.key),
        "task": task_name(spec.name),
        "task_alias": spec.name,
        "dataset_name": spec.name,
    }
    budget = max_gen_toks_for(spec)
    if budget != template.max_gen_toks:
        config["generation_kwargs"] = generation_kwargs(budget)
    config["metadata"] = {"version": TASK_VERSION, "needlebench_config": spec.name}
    return config


def render_task(spec: ConfigSpec, note: str = _NOTE) -> str:
    """The YAML of one config's task."""
    return dump_yaml(task_config(spec), note)


def group_config(name: str, alias: str, members: Iterable[str], metrics: Iterable[str]) -> dict[str, Any]:
    """A group YAML as data: its tasks and the metrics averaged over them (weighted by number of rows)."""
    return {
        "group": name,
        "group_alias": alias,
        "task": [task_name(member) for member in members],
        "aggregate_metric_list": [
            {"metric": metric, "aggregation": MEAN, "weight_by_size": True, "filter_list": "none"} for metric in metrics
        ],
        "metadata": {"version": TASK_VERSION},
    }


def render_group(name: str, alias: str, members: Iterable[str], metrics: Iterable[str], note: str = _NOTE) -> str:
    """A group YAML: its tasks and the metrics averaged over them (weighted by number of rows)."""
    return dump_yaml(group_config(name, alias, members, metrics), note)


def task_files() -> dict[str, str]:
    """Every generated file of ``harness_tasks/needlebench``: base templates, one task per config, groups."""
    files: dict[str, str] = {}
    for template in TEMPLATES.values():
        files[base_template_filename(template.key)] = render_base_template(template)
    for spec in registry().values():
        files[f"{spec.name}.yaml"] = render_task(spec)
    for group in task_groups().values():
        files[f"_{group.name}.yaml"] = render_group(group.name, group.alias, group.members, group.metrics)
    return files


def all_task_names() -> list[str]:
    """Every task name, in registry order."""
    return [task_name(name) for name in registry()]


def all_group_names() -> list[str]:
    """Every group name: edition by edition, the whole group, the family groups, the size groups."""
    return list(task_groups())
