"""What the evaluation stage knows about a benchmark family: one object per family, registered in
:mod:`needlebench.evaluation.families`.

The build side of a family (its grid, rows and modes) is its object in :mod:`needlebench.tasks.families`; this
half holds what lm-eval and the report need: the task template (metrics, generation budget, hooks), the
``process_results`` hook and the oracle answer, then the headline metric per edition, the grid cell of a sample,
the paper mean, the heatmap points and the table rows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from needlebench.evaluation.families.hooks import TaskTemplate, reference_metric

if TYPE_CHECKING:
    from needlebench.tasks.grid import ConfigSpec


class EvalFamily:
    """Base of the evaluation half of a family; a family module subclasses it and registers one instance."""

    #: Registry key: the same as the family's key in :mod:`needlebench.tasks.families`.
    key: str = ""

    # ------------------------------------------------------------------------------------ lm-eval task
    # (task templates, metrics, generation budget, groups, process_results hooks, oracle answer)

    #: The task template of each edition (``spec.edition``).
    edition_templates: Mapping[str, TaskTemplate] = {}
    #: Templates of particular variants, by ``(edition, variant)`` (e.g. open-ended ATC); else the edition's.
    variant_templates: Mapping[tuple[str, str], TaskTemplate] = {}
    #: Generation budgets of particular variants, by ``(edition, variant)``; else the template's.
    variant_budgets: Mapping[tuple[str, str], int] = {}
    #: Metrics of the family's group in each edition (``needlebench_<key>``, ``needlebench_v2_<key>``), which the
    #: size and edition groups aggregate too; their reference twins are added where the templates have them.
    group_metrics: Mapping[str, tuple[str, ...]] = {}

    def templates(self) -> tuple[TaskTemplate, ...]:
        """Every task template of the family (one base YAML each), without repeats."""
        found = [*self.edition_templates.values(), *self.variant_templates.values()]
        return tuple({template.key: template for template in found}.values())

    def template(self, spec: ConfigSpec) -> TaskTemplate:
        """The template a config's task includes."""
        return self.variant_templates.get((spec.edition, spec.variant), self.edition_templates[spec.edition])

    def max_gen_toks(self, spec: ConfigSpec) -> int:
        """Generation budget of a config's task."""
        return self.variant_budgets.get((spec.edition, spec.variant), self.template(spec).max_gen_toks)

    def oracle_answer(self, doc: Mapping[str, Any], spec: ConfigSpec) -> str:
        """The answer that scores full marks on a row of ``spec`` (in a form the template's scorer reads)."""
        return self.template(spec).oracle(doc)

    def hooks(self) -> dict[str, Callable[..., Any]]:
        """Every function the family's task YAMLs name (``process_results``, custom aggregations), by name."""
        return {name: hook for template in self.templates() for name, hook in template.hooks().items()}

    def reference_twins(self, metrics: tuple[str, ...]) -> tuple[str, ...]:
        """The reference-exact twins of ``metrics`` that the family's templates report (M-RS ``strict`` has none)."""
        reported = {name for template in self.templates() for name in template.metric_names()}
        return tuple(reference_metric(metric) for metric in metrics if reference_metric(metric) in reported)

    # ------------------------------------------------------------------------------------ report
    # (headline metric per edition, grid cell key, paper mean, heatmap points, table rows)

    #: Per edition (``spec.edition``): the per-row metric the tables, heatmaps and judge scores read.
    headline: dict[str, str] = {}
    #: Per edition: the colorbar / axis label of that metric.
    metric_label: dict[str, str] = {}
    #: Per edition: the table builder showing it (a key of ``report.tables.TABLE_BUILDERS``); absent: none.
    table: dict[str, str] = {}
    #: Per edition: (how its paper mean is computed, a key of ``report.aggregate.PAPER_MEANS``; what the scores
    #: table calls it).
    paper_means: dict[str, tuple[str, str]] = {}
    #: Per edition: the series of the models-compared figure (a key of ``report.figures.SERIES``); absent: none.
    comparison: dict[str, str] = {}
    #: x-axis label of its comparison panels (None: context length).
    comparison_xlabel: str | None = None
    #: A NeedleBench haystack family (S-RT, M-RT, M-RS): rated by ``needlebench judge``, binned by its rows' own
    #: lengths and depths when its config is unknown, reported in the experiments table (mean and std over runs).
    haystack: bool = False
    #: Does each of its runs get a heatmap (rows x context length)?
    heatmap: bool = False
    heatmap_row_label: str = "Depth (%)"
    #: Top of the heatmap colour scale.
    heatmap_vmax: float = 100.0
    #: Does the heatmap's length axis name the tokenizer the lengths are counted in?
    heatmap_tokens: bool = True
    #: What a coverage text counts beside rows and cells: keys of ``report.aggregate.COVERAGE_PARTS``, in order.
    coverage_parts: tuple[str, ...] = ("lengths",)

    def headline_metric(self, spec) -> str:
        """The per-row metric of a config of this family (its edition's headline)."""
        return self.headline[spec.edition]

    def paper_mean(self, spec, metric: str) -> tuple[str, str]:
        """(paper mean key, its name in the scores table) of ``metric`` of a config."""
        return self.paper_means[spec.edition]

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        """The metrics the scores table lists for a config under ``scoring`` (``default`` or ``reference``)."""
        return (self.headline_metric(spec),)

    def expected_cells(self, spec) -> set[tuple]:
        """The grid cells of a config, as (length, depth, needle count) with None for what the family does not
        vary: here, one cell per length."""
        return {(length, None, None) for length in spec.lengths}

    def observed_cell(self, doc) -> tuple:
        """The grid cell (as in :meth:`expected_cells`) a row falls in."""
        return (doc.get("context_length"), None, None)

    def heatmap_rows(self, spec) -> list:
        """The heatmap rows of a config's whole grid: its depths."""
        return [float(depth) for depth in spec.depths]

    def count_unit(self, per_needle: bool, judged: bool) -> str:
        """What a heatmap cell's count counts."""
        return "rows"

    def heatmap_points(self, spec, sample, per_needle: bool) -> list[tuple]:
        """(row, column, value) points of a sample (``report.load.Sample``) in its config's heatmap: the headline
        metric at the row's depth and length. ``per_needle``: the config's needle depths are grid depths."""
        doc, metrics = sample.doc, sample.metrics
        length = int(doc["context_length"])
        metric = self.headline_metric(spec)
        if metric in metrics and doc.get("depth_percent") is not None:
            return [(float(doc["depth_percent"]), length, float(metrics[metric]))]
        return []
