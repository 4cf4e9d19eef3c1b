"""The library side of the lm-evaluation-harness tasks in ``harness_tasks/needlebench``.

The task folder's ``utils.py`` is a thin wrapper that re-exports the hooks defined here:

* :func:`load_dataset` is the tasks' ``custom_dataset``. lm-eval calls it with the task's ``metadata`` merged
  with ``--metadata`` and ``--model_args``; it reads ``needlebench_config`` (set by each task YAML) and the data
  source: ``data_dir`` (a local folder built by ``needlebench build``), ``data_repo`` + ``data_revision`` (a Hub
  dataset), or neither (rows are built on the fly from the pinned release seed). ``context_lengths`` keeps only
  rows of the given grid lengths; ``subset`` keeps that many rows stratified over the grid (see
  :mod:`needlebench.evaluation.subset`). The Hub keys carry a ``data_`` prefix because model args share the namespace
  (``hf`` and ``vllm`` take ``pretrained`` and ``revision``).
* ``process_*`` are the per-family ``process_results`` hooks, returning the metrics of one row: the default
  metrics and, beside each, its reference-exact twin ``<metric>_reference`` (the row scored as the reference code
  scores it, see :mod:`needlebench.evaluation.scoring.reference`; M-RS ``strict`` has none).
* :func:`agg_perf_4`, :func:`agg_flat_mean` and :func:`agg_relation_weighted` are the custom aggregations
  (CircularEval over ``(item_id, rotation, correct)`` tuples, the mean over per-needle / per-star lists, and the
  v2 ATC score weighted by relation count over ``(relations, score)`` pairs).
* :func:`oracle_answer` is the perfect answer to a row (used by the ``needlebench-oracle`` model).
* :func:`task_files` renders every YAML file of the task folder (``scripts/gen_harness_tasks.py`` writes them).

Scales: NeedleBench metrics are 0..100 like the reference; Counting-Stars metrics are 0..1 like the paper.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation import scoring
from needlebench.evaluation.subset import SUBSET_KEY, parse_subset, select_subset
from needlebench.evaluation.thinking import reference_text, strip_reasoning
from needlebench.tasks.grid import SIZES, ConfigSpec, get_config, registry

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


@dataclass(frozen=True)
class FamilyTemplate:
    """What the YAMLs of one family (or ATC variant) share: hooks, metrics and the generation budget."""

    key: str  # base file stem, e.g. "single", "atc_open"
    label: str
    process_results: str  # hook name in utils.py
    metrics: tuple[tuple[str, str], ...]  # (metric, aggregation: "mean" or a hook name)
    max_gen_toks: int


#: S-RT answers are one sentence (a Chinese needle is 2-3 tokens per character in many tokenizers, and the
#: guide sentence invites a line of reasoning first); M-RT answers 11-20 short answers; ATC reasoning prompts
#: ask for chain-of-thought; Counting-Stars budgets are set per config from the number of stars.
FAMILY_TEMPLATES: dict[str, FamilyTemplate] = {
    "single": FamilyTemplate(
        "single",
        "S-RT (single-needle retrieval)",
        "process_single",
        (("score", "mean"), ("score_reference", "mean")),
        256,
    ),
    "multi_retrieval": FamilyTemplate(
        "multi_retrieval",
        "M-RT (multi-needle retrieval)",
        "process_multi_retrieval",
        (
            ("recall", "mean"),
            ("needle_hits", "agg_flat_mean"),
            ("recall_reference", "mean"),
            ("needle_hits_reference", "agg_flat_mean"),
        ),
        512,
    ),
    "multi_reasoning": FamilyTemplate(
        "multi_reasoning",
        "M-RS (multi-needle reasoning)",
        "process_multi_reasoning",
        (("reference", "mean"), ("strict", "mean"), ("reference_reference", "mean")),
        256,
    ),
    "atc": FamilyTemplate(
        "atc",
        "ATC (ancestral trace challenge, multiple choice, CircularEval)",
        "process_atc",
        (("acc", "mean"), ("perf_4", "agg_perf_4"), ("acc_reference", "mean"), ("perf_4_reference", "agg_perf_4")),
        128,
    ),
    "atc_open": FamilyTemplate(
        "atc_open", "ATC (open-ended)", "process_atc_open", (("score", "mean"), ("score_reference", "mean")), 512
    ),
    "counting_stars": FamilyTemplate(
        "counting_stars",
        "Counting-Stars",
        "process_counting_stars",
        (
            ("star_score", "mean"),
            ("per_star", "agg_flat_mean"),
            ("star_score_reference", "mean"),
            ("per_star_reference", "agg_flat_mean"),
        ),
        8 * 32 + 64,
    ),
    # NeedleBench v2 (M-RT v2 uses the v1 M-RT template: same hook, metrics and budget). M-RS and ATC ask for
    # reasoning ending in \boxed{}; ATC chains run up to 512 relations.
    "v2_single": FamilyTemplate(
        "v2_single",
        "S-RT v2 (single-needle retrieval)",
        "process_single_v2",
        (("score", "mean"), ("score_reference", "mean")),
        256,
    ),
    "v2_multi_reasoning": FamilyTemplate(
        "v2_multi_reasoning",
        "M-RS v2 (multi-needle reasoning)",
        "process_multi_reasoning_v2",
        (("exact", "mean"), ("exact_reference", "mean")),
        1024,
    ),
    "v2_atc": FamilyTemplate(
        "v2_atc",
        "ATC v2 (ancestral trace challenge, four question types)",
        "process_atc_v2",
        (
            ("accuracy", "mean"),
            ("weighted", "agg_relation_weighted"),
            ("accuracy_reference", "mean"),
            ("weighted_reference", "agg_relation_weighted"),
        ),
        2048,
    ),
}

#: Generation budget of the chain-of-thought ATC prompts.
ATC_REASONING_MAX_GEN_TOKS = 1024
#: Counting-Stars: tokens per star in the JSON answer (a number, a comma, a space) plus slack for the frame.
TOKENS_PER_STAR = 8
STAR_SLACK_TOKENS = 64

#: Suffix of the reference-exact twin of a metric (see :mod:`needlebench.evaluation.scoring.reference`).
REFERENCE_SUFFIX = "_reference"
#: Metrics without a reference twin (M-RS ``strict`` is this project's own rule).
NO_REFERENCE = ("strict",)


def reference_metric(metric: str) -> str:
    """The name of a metric's reference-exact twin (``score`` -> ``score_reference``)."""
    return metric + REFERENCE_SUFFIX


def with_reference(metrics: Iterable[str]) -> tuple[str, ...]:
    """The metrics followed by the reference twins of those that have one."""
    metrics = tuple(metrics)
    return metrics + tuple(reference_metric(metric) for metric in metrics if metric not in NO_REFERENCE)


#: Groups by family: (group name, metrics it aggregates over the family's tasks).
FAMILY_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "single": ("needlebench_single", with_reference(("score",))),
    "multi_retrieval": ("needlebench_multi_retrieval", with_reference(("recall",))),
    "multi_reasoning": ("needlebench_multi_reasoning", with_reference(("reference", "strict"))),
    "atc": ("needlebench_atc", with_reference(("acc", "perf_4", "score"))),
    "counting_stars": ("needlebench_counting_stars", with_reference(("star_score",))),
}

#: NeedleBench v2 groups by family, the metrics of the v2 size groups, and the group of every v2 task.
V2_PREFIX = f"{TASK_PREFIX}v2"
V2_FAMILY_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "single": (f"{V2_PREFIX}_single", with_reference(("score",))),
    "multi_retrieval": (f"{V2_PREFIX}_multi_retrieval", with_reference(("recall",))),
    "multi_reasoning": (f"{V2_PREFIX}_multi_reasoning", with_reference(("exact",))),
    "atc": (f"{V2_PREFIX}_atc", with_reference(("accuracy", "weighted"))),
}
V2_SIZE_GROUP_METRICS = with_reference(("score", "recall", "exact"))
V2_ALL_METRICS = with_reference(("score", "recall", "exact", "accuracy", "weighted"))

#: Metrics aggregated by the per-size groups (each over the member tasks that report it).
SIZE_GROUP_METRICS = {
    "single": with_reference(("score",)),
    "multi_retrieval": with_reference(("recall",)),
    "multi_reasoning": with_reference(("reference", "strict")),
    "counting_stars": with_reference(("star_score",)),
}


def template_key(spec: ConfigSpec) -> str:
    """The base template a config's YAML includes (the family, ``atc_open`` for open-ended ATC, ``v2_<family>``
    for v2 configs except M-RT, which shares the v1 template)."""
    if spec.is_v2:
        return "multi_retrieval" if spec.family == "multi_retrieval" else f"v2_{spec.family}"
    if spec.family == "atc" and spec.variant == "open":
        return "atc_open"
    return spec.family


def max_gen_toks_for(spec: ConfigSpec) -> int:
    """Generation budget of a config: the family's, ATC reasoning 1024, Counting-Stars scaled by stars."""
    if spec.family == "counting_stars":
        return TOKENS_PER_STAR * int(spec.stars or 0) + STAR_SLACK_TOKENS
    if spec.family == "atc" and spec.variant == "reasoning":
        return ATC_REASONING_MAX_GEN_TOKS
    return FAMILY_TEMPLATES[template_key(spec)].max_gen_toks


def task_name(config: str) -> str:
    """lm-eval task name of a config."""
    return f"{TASK_PREFIX}{config}"


def size_group_members(size: str) -> list[str]:
    """Configs of a size group: NeedleBench v1 S-RT/M-RT/M-RS of that size, plus Counting-Stars of that size."""
    return [
        spec.name
        for spec in registry().values()
        if spec.size == size
        and not spec.is_v2
        and spec.family in ("single", "multi_retrieval", "multi_reasoning", "counting_stars")
    ]


def size_group_metrics(members: Iterable[str]) -> list[str]:
    """Metrics a size group aggregates: those of its members' families, in family order."""
    families = {get_config(member).family for member in members}
    return [metric for family, metrics in SIZE_GROUP_METRICS.items() if family in families for metric in metrics]


def v2_groups() -> dict[str, tuple[list[str], tuple[str, ...]]]:
    """The NeedleBench v2 groups: ``needlebench_v2`` (every v2 task), one per family and one per size, each with
    its member configs and the metrics it aggregates."""
    specs = [spec for spec in registry().values() if spec.is_v2]
    groups: dict[str, tuple[list[str], tuple[str, ...]]] = {V2_PREFIX: ([spec.name for spec in specs], V2_ALL_METRICS)}
    for family, (group, metrics) in V2_FAMILY_GROUPS.items():
        groups[group] = ([spec.name for spec in specs if spec.family == family], metrics)
    for size in SIZES:
        members = [spec.name for spec in specs if spec.size == size]
        if members:
            groups[f"{V2_PREFIX}_{size}"] = (members, V2_SIZE_GROUP_METRICS)
    return groups


def size_groups() -> dict[str, list[str]]:
    """``needlebench_<size>`` -> member configs, for every size that has members."""
    groups: dict[str, list[str]] = {}
    for size in SIZES:
        members = size_group_members(size)
        if members:
            groups[f"{TASK_PREFIX}{size}"] = members
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
    ``--model_args``; see :func:`resolve_source` for the data-source keys.
    """
    config = metadata.get("needlebench_config")
    if not config:
        raise NeedlebenchError(
            "task metadata has no needlebench_config; use the YAMLs of harness_tasks/needlebench "
            "(regenerate them with scripts/gen_harness_tasks.py)"
        )
    source = resolve_source(metadata)
    if source["data_dir"] is not None:
        from needlebench.dataset.build import read_manifest, register_experiments

        register_experiments(read_manifest(Path(source["data_dir"])))  # its experiment configs, looked up by name
    spec = get_config(str(config))
    lengths = _context_length_filter(metadata.get("context_lengths"), spec)
    from needlebench.dataset.load import (
        load_split,  # imported lazily: it pulls in the builders
    )

    split = load_split(spec.name, **source)
    if lengths is not None:
        split = split.filter(lambda row: int(row["context_length"]) in lengths)
    split = select_subset(split, parse_subset(metadata.get(SUBSET_KEY)), spec.name)
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


# --------------------------------------------------------------------------------------------- process_results


def _output(results: Sequence[Any]) -> str:
    """The generated text of a ``generate_until`` request (lm-eval passes a one-element list)."""
    if not results:
        return ""
    value = results[0]
    return value if isinstance(value, str) else str(value)


def _prediction(results: Sequence[Any]) -> str:
    """The text the default metrics score: the output with its reasoning (``<think>...</think>``) stripped, see
    :func:`needlebench.evaluation.thinking.strip_reasoning`."""
    return strip_reasoning(_output(results))


def _reference_prediction(results: Sequence[Any]) -> str:
    """The text the ``*_reference`` metrics score: what OpenCompass's reasoning-model configs hand the evaluators
    (:func:`needlebench.evaluation.thinking.reference_text`; the raw output when it has no reasoning marker)."""
    return reference_text(_output(results))


def process_single_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """v2 S-RT: 100 when the answer keyword is in the prediction, else 0 (and its reference twin)."""
    keyword = doc["keywords"][0] if doc["keywords"] else ""
    return {
        "score": scoring.single_retrieval_v2_score(_prediction(results), keyword),
        "score_reference": scoring.single_retrieval_v2_score(_reference_prediction(results), keyword),
    }


def process_multi_reasoning_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """v2 M-RS: 100 when the last ``\\boxed{}`` of the prediction, cleaned, is the eldest name."""
    return {
        "exact": scoring.boxed_exact_score(_prediction(results), doc["answer"]),
        "exact_reference": scoring.boxed_exact_score(_reference_prediction(results), doc["answer"]),
    }


def process_atc_v2(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """v2 ATC: boxed exact match (0/100) and the ``(relations, score)`` pair of the relation-weighted score."""
    relations = int(doc["num_needles"])
    score = scoring.boxed_exact_score(_prediction(results), doc["answer"])
    reference = scoring.boxed_exact_score(_reference_prediction(results), doc["answer"])
    return {
        "accuracy": score,
        "weighted": (relations, score),
        "accuracy_reference": reference,
        "weighted_reference": (relations, reference),
    }


def process_single(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """S-RT: the paper score (Levenshtein similarity to the needle, 100 when the keyword is present)."""
    needle = doc["needles"][0] if doc["needles"] else ""
    keyword = doc["keywords"][0] if doc["keywords"] else ""
    return {
        "score": scoring.single_retrieval_score(_prediction(results), needle, keyword),
        "score_reference": scoring.single_retrieval_score(_reference_prediction(results), needle, keyword),
    }


def _retrieval_metrics(prediction: str, keywords: list[str], suffix: str = "") -> dict[str, Any]:
    hits = [100.0 if hit else 0.0 for hit in scoring.keyword_hits(prediction, keywords)]
    return {f"recall{suffix}": scoring.multi_retrieval_recall(prediction, keywords), f"needle_hits{suffix}": hits}


def process_multi_retrieval(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """M-RT: needle recall (0..100) and the per-needle hits (100/0, in the order of ``keywords``), and their
    reference twins."""
    keywords = list(doc["keywords"])
    return {
        **_retrieval_metrics(_prediction(results), keywords),
        **_retrieval_metrics(_reference_prediction(results), keywords, REFERENCE_SUFFIX),
    }


def process_multi_reasoning(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """M-RS: the reference keyword score and the strict (whole answer contained) score, both 0..100, and the
    keyword score on the reference's text (``reference_reference``)."""
    prediction = _prediction(results)
    answer, language = doc["answer"], doc["language"]
    return {
        "reference": scoring.reasoning_reference_score(prediction, answer, language),
        "strict": scoring.reasoning_strict_score(prediction, answer, language),
        "reference_reference": scoring.reasoning_reference_score(_reference_prediction(results), answer, language),
    }


def atc_choice_correct(doc: Mapping[str, Any], prediction: str) -> bool:
    """Is the option letter extracted from the prediction the row's ``answer_letter``?"""
    letters = "".join(chr(ord("A") + index) for index in range(len(doc["options"]) or 4))
    return scoring.extract_option(prediction, letters, names=list(doc["options"])) == doc["answer_letter"]


def process_atc(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Multiple-choice ATC: per-row accuracy (0/100) and the CircularEval tuple ``(item_id, rotation, correct)``;
    the ``_reference`` twins read the option with OpenCompass's ``first_option_postprocess``."""
    item, rotation = str(doc["item_id"]), str(doc["rotation"])
    correct = atc_choice_correct(doc, _prediction(results))
    reference = scoring.atc_reference_correct(_reference_prediction(results), str(doc["answer_letter"]))
    return {
        "acc": 100.0 if correct else 0.0,
        "perf_4": (item, rotation, correct),
        "acc_reference": 100.0 if reference else 0.0,
        "perf_4_reference": (item, rotation, reference),
    }


def process_atc_open(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, float]:
    """Open-ended ATC: 100 when the extracted final name is the eldest ancestor, else 0; the reference twin is the
    S-RT evaluator with the name as needle and keyword."""
    return {
        "score": scoring.open_answer_score(_prediction(results), doc["answer"]),
        "score_reference": scoring.open_atc_reference_score(_reference_prediction(results), str(doc["answer"])),
    }


def _star_lists(doc: Mapping[str, Any]) -> tuple[list[int], list[int] | None]:
    wrong = doc.get("wrong_counts")
    reasoning = scoring.normalize_task(doc["task_variant"]) == "reasoning"
    return list(doc["star_counts"]), (list(wrong) if wrong and reasoning else None)


def counting_stars_star_scores(doc: Mapping[str, Any], prediction: str) -> list[float]:
    """Per-star scores (0..1, in star order) of a Counting-Stars row."""
    stars, wrong = _star_lists(doc)
    return scoring.star_scores(prediction, stars, wrong, doc["task_variant"], doc["language"])


def counting_stars_reference_scores(doc: Mapping[str, Any], prediction: str) -> list[float]:
    """Per-star scores of a Counting-Stars row as ``viz.ipynb`` computes them (0 where it would raise)."""
    stars, wrong = _star_lists(doc)
    return scoring.notebook_star_scores(prediction, stars, wrong, doc["task_variant"], doc["language"])


def process_counting_stars(doc: Mapping[str, Any], results: Sequence[Any]) -> dict[str, Any]:
    """Counting-Stars: the row score (mean over stars, 0..1) and the per-star scores kept for heatmaps, and
    their reference twins (the notebook's parse-and-score rule)."""
    stars = counting_stars_star_scores(doc, _prediction(results))
    reference = counting_stars_reference_scores(doc, _reference_prediction(results))
    return {
        "star_score": math.fsum(stars) / len(stars) if stars else 0.0,
        "per_star": stars,
        "star_score_reference": math.fsum(reference) / len(reference) if reference else 0.0,
        "per_star_reference": reference,
    }


# --------------------------------------------------------------------------------------------- aggregations


def agg_perf_4(items: Iterable[Sequence[Any]]) -> float:
    """CircularEval ``perf_4`` (0..100): share of items whose 4 rotations are all answered correctly.

    Only items with all 4 rotations count (``--limit`` can cut the last item short); 0.0 when there is none.
    """
    rows = scoring.complete_items((str(item[0]), str(item[1]), bool(item[2])) for item in items)
    if not rows:
        return 0.0
    return scoring.circular_scores(rows)["perf_4"]


def agg_relation_weighted(items: Iterable[Sequence[Any]]) -> float:
    """v2 ATC (0..100): the mean score per relation count, weighted by the count; 0.0 without items."""
    pairs = [(int(item[0]), float(item[1])) for item in items]
    return scoring.relation_weighted(pairs) if pairs else 0.0


def agg_flat_mean(items: Iterable[Sequence[float]]) -> float:
    """Mean over every element of per-row lists (per-needle hits, per-star scores)."""
    values = [float(value) for item in items for value in item]
    return math.fsum(values) / len(values) if values else 0.0


# --------------------------------------------------------------------------------------------- oracle


def oracle_answer(doc: Mapping[str, Any]) -> str:
    """The answer that scores full marks on a row (proves the pipeline end to end)."""
    task = doc["task"]
    if task in ("M-RS", "ATC") and get_config(str(doc["config"])).is_v2:
        return f"\\boxed{{{doc['answer']}}}"
    if task == "S-RT":
        return str(doc["needles"][0]).strip()
    if task == "M-RT":
        return "\n".join(str(needle).strip() for needle in doc["needles"])
    if task == "M-RS":
        return str(doc["answer"])
    if task == "ATC":
        style = doc.get("prompt_style") or "direct"
        if style == "open":
            return str(doc["answer"])
        letter = doc["answer_letter"]
        if style == "reasoning":
            return f"所以答案是：{letter}" if doc["language"] == "zh" else f"The answer is: {letter}"
        return f"回答: {letter}" if doc["language"] == "zh" else f"Answer: {letter}"
    if task == "Counting-Stars":
        key = "小企鹅" if doc["language"] == "zh" else "little_penguin"
        return json.dumps({key: [int(count) for count in doc["star_counts"]]}, ensure_ascii=False)
    raise NeedlebenchError(
        f"row task {task!r} of config {doc.get('config')!r} has no oracle answer; "
        "allowed tasks: S-RT, M-RT, M-RS, ATC, Counting-Stars"
    )


# --------------------------------------------------------------------------------------------- YAML rendering

GENERATED_NOTE = "# Generated by scripts/gen_harness_tasks.py from needlebench.tasks.grid; do not edit by hand.\n"


def _yaml_scalar(value: Any) -> str:
    """A YAML scalar (JSON strings are valid YAML and keep non-ASCII text readable)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _metric_lines(metrics: Iterable[tuple[str, str]]) -> list[str]:
    lines = ["metric_list:"]
    for metric, aggregation in metrics:
        agg = aggregation if aggregation == "mean" else f"!function utils.{aggregation}"
        lines += [f"  - metric: {metric}", f"    aggregation: {agg}", "    higher_is_better: true"]
    return lines


def base_template_filename(key: str) -> str:
    """File name of a family's base template (no ``.yaml`` suffix, so lm-eval's indexer skips it)."""
    return f"_default_{key}_template_yaml"


def render_base_template(template: FamilyTemplate) -> str:
    """The base YAML a family's task files include."""
    lines = [
        f"# Base of the {template.label} tasks.",
        "output_type: generate_until",
        "custom_dataset: !function utils.load_dataset",
        "test_split: test",
        # zero-shot: no few-shot pool (without one lm-eval decodes every test row into a list at task load)
        "fewshot_config:",
        "  samples: []",
        "doc_to_text: prompt",
        "doc_to_target: answer",
        f"process_results: !function utils.{template.process_results}",
        "generation_kwargs:",
        "  until: []",
        "  do_sample: false",
        "  temperature: 0.0",
        f"  max_gen_toks: {template.max_gen_toks}",
        *_metric_lines(template.metrics),
        "metadata:",
        f"  version: {TASK_VERSION}",
    ]
    return GENERATED_NOTE + "\n".join(lines) + "\n"


def render_task(spec: ConfigSpec) -> str:
    """The YAML of one config's task."""
    template = FAMILY_TEMPLATES[template_key(spec)]
    lines = [
        f"include: {base_template_filename(template.key)}",
        f"task: {task_name(spec.name)}",
        f"task_alias: {spec.name}",
        f"dataset_name: {spec.name}",
    ]
    budget = max_gen_toks_for(spec)
    if budget != template.max_gen_toks:
        lines += [
            "generation_kwargs:",
            "  until: []",
            "  do_sample: false",
            "  temperature: 0.0",
            f"  max_gen_toks: {budget}",
        ]
    lines += ["metadata:", f"  version: {TASK_VERSION}", f"  needlebench_config: {spec.name}"]
    return GENERATED_NOTE + "\n".join(lines) + "\n"


def render_group(name: str, alias: str, members: Iterable[str], metrics: Iterable[str]) -> str:
    """A group YAML: its tasks and the metrics averaged over them (weighted by number of rows)."""
    lines = [f"group: {name}", f"group_alias: {_yaml_scalar(alias)}", "task:"]
    lines += [f"  - {task_name(member)}" for member in members]
    lines.append("aggregate_metric_list:")
    for metric in metrics:
        lines += [
            f"  - metric: {metric}",
            "    aggregation: mean",
            "    weight_by_size: true",
            "    filter_list: none",
        ]
    lines += ["metadata:", f"  version: {TASK_VERSION}"]
    return GENERATED_NOTE + "\n".join(lines) + "\n"


def task_files() -> dict[str, str]:
    """Every generated file of ``harness_tasks/needlebench``: base templates, one task per config, groups."""
    files: dict[str, str] = {}
    for template in FAMILY_TEMPLATES.values():
        files[base_template_filename(template.key)] = render_base_template(template)
    specs = list(registry().values())
    for spec in specs:
        files[f"{spec.name}.yaml"] = render_task(spec)
    for family, (group, metrics) in FAMILY_GROUPS.items():
        members = [spec.name for spec in specs if spec.family == family and not spec.is_v2]
        label = FAMILY_TEMPLATES[family].label.split(" (")[0]
        files[f"_{group}.yaml"] = render_group(group, f"NeedleBench {label}", members, metrics)
    for group, members in size_groups().items():
        size = group.removeprefix(TASK_PREFIX)
        files[f"_{group}.yaml"] = render_group(group, f"NeedleBench {size}", members, size_group_metrics(members))
    for group, (members, metrics) in v2_groups().items():
        alias = "NeedleBench v2" + (" " + group.removeprefix(V2_PREFIX + "_") if group != V2_PREFIX else "")
        files[f"_{group}.yaml"] = render_group(group, alias, members, metrics)
    return files


def all_task_names() -> list[str]:
    """Every task name, in registry order."""
    return [task_name(name) for name in registry()]


def all_group_names() -> list[str]:
    """Every group name: the family groups, the size groups, then the v2 groups."""
    return [group for group, _metrics in FAMILY_GROUPS.values()] + list(size_groups()) + list(v2_groups())
