"""What the evaluation stage knows about a benchmark family: one object per family, registered in
:mod:`needlebench.evaluation.families`.

The build side of a family (its grid, rows and modes) is its object in :mod:`needlebench.tasks.families`; this
half holds what lm-eval and the report need: the task template (metrics, generation budget, hooks), the
``process_results`` hook and the oracle answer, then the headline metric per edition, the shape of logged metrics,
the grid cell of a sample and a run's coverage, the paper mean, the heatmap points, the models-compared series and
the family's own tables (built with :mod:`needlebench.evaluation.families.cells`). The report calls these on
``eval_family(spec)`` and names no family nor family metric.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from needlebench.evaluation.families.cells import Cell, RunLike, SampleLike, Table, cell_mean, lengths_part, row_mean
from needlebench.evaluation.families.hooks import TaskTemplate, reference_metric

if TYPE_CHECKING:
    from needlebench.tasks.grid import ConfigSpec


#: How a logged metric's value looks when it is not one number (:attr:`EvalFamily.value_shapes`).
NUMBERS = "numbers"
CIRCULAR = "circular"
RELATION_PAIR = "relation_pair"


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
    # (headline metric per edition, the shape of logged values, grid cells and coverage, paper mean, heatmap
    # points, the series of the models-compared figure and the family's own tables)

    #: Per edition (``spec.edition``): the per-row metric the tables, heatmaps and judge scores read.
    headline: dict[str, str] = {}
    #: Per edition: the colorbar / axis label of that metric.
    metric_label: dict[str, str] = {}
    #: Per edition: what the scores table calls the paper mean (:meth:`paper_mean`).
    paper_mean_name: dict[str, str] = {}
    #: Logged metrics whose value is not one number, by name (their ``_reference`` twins alike): a list of numbers
    #: (:data:`NUMBERS`), a CircularEval ``[item_id, rotation, correct]`` (:data:`CIRCULAR`), a ``(relations,
    #: score)`` pair (:data:`RELATION_PAIR`).
    value_shapes: Mapping[str, str] = {}
    #: Metrics a row may log above 100, up to 100 per needle (keyword) of the row.
    per_needle_ceiling: tuple[str, ...] = ()
    #: Are a config's grid cells split by needle count (each count a cell of the paper mean)?
    cells_by_needle_count: bool = False
    #: Per edition: how a report's README says the family's headline numbers are computed (the haystack families'
    #: are the size tables', which it explains itself); none: not mentioned.
    explanation: dict[str, str] = {}
    #: x-axis label of its comparison panels (None: context length).
    comparison_xlabel: str | None = None
    #: What the models-compared figure's title says of the family's panels (none: "").
    comparison_note: str = ""
    #: A NeedleBench haystack family (S-RT, M-RT, M-RS): a task of its edition's size table and overall, rated by
    #: ``needlebench judge``, binned by its rows' own lengths and depths when its config is unknown, reported in
    #: the experiments table (mean and std over runs).
    haystack: bool = False
    #: Does each of its runs get a heatmap (rows x context length)?
    heatmap: bool = False
    heatmap_row_label: str = "Depth (%)"
    #: Top of the heatmap colour scale.
    heatmap_vmax: float = 100.0
    #: Does the heatmap's length axis name the tokenizer the lengths are counted in?
    heatmap_tokens: bool = True

    def report_names(self) -> set[str]:
        """The names the family owns in a report: its metrics (with their reference twins) and the other names
        its tables key on; no report module spells one (``tests/test_layout.py``)."""
        names = {metric for template in self.templates() for metric in template.metric_names()}
        return names | set(self.headline.values()) | set(self.value_shapes) | set(self.per_needle_ceiling)

    def headline_metric(self, spec) -> str:
        """The per-row metric of a config of this family (its edition's headline)."""
        return self.headline[spec.edition]

    def paper_mean(self, spec, samples: Sequence[SampleLike], metric: str) -> tuple[Cell, str]:
        """(the paper mean of ``metric`` over samples of a config, what the scores table calls it): here the mean
        over grid cells (:func:`~needlebench.evaluation.families.cells.cell_mean`)."""
        return cell_mean(samples, metric), self.paper_mean_name[spec.edition]

    def lm_eval_mean(self, samples: Sequence[SampleLike], metric: str) -> Cell:
        """lm-eval's aggregation of ``metric`` recomputed from the samples (for a run whose results file lacks it):
        here the plain mean over rows."""
        return row_mean(samples, metric)

    def score_metrics(self, spec, scoring: str) -> tuple[str, ...]:
        """The metrics the scores table lists for a config under ``scoring`` (``default`` or ``reference``)."""
        return (self.headline_metric(spec),)

    def required_fields(self, spec, metrics: Mapping[str, Any]) -> tuple[str, ...]:
        """The dataset-row fields the tables and figures of a config (logging ``metrics``) cannot do without: here
        the context length of its heatmap and comparison series."""
        return ("context_length",)

    def off_grid(self, spec, record: Mapping[str, Any]) -> str | None:
        """What in a logged sample's metrics puts it off its known config's grid (besides language, length and
        needle count, which the report checks), else None."""
        return None

    # ------------------------------------------------------------------------------------ coverage

    def expected_cells(self, spec) -> set[tuple]:
        """The grid cells of a config, as (length, depth, needle count) with None for what the family does not
        vary: here, one cell per length."""
        return {(length, None, None) for length in spec.lengths}

    def observed_cell(self, doc) -> tuple:
        """The grid cell (as in :meth:`expected_cells`) a row falls in."""
        return (doc.get("context_length"), None, None)

    def coverage_parts(self, spec, seen: set[tuple]) -> list[str]:
        """What a partial run's coverage text says beside rows and cells, from the cells seen: here its lengths."""
        return [lengths_part(spec, seen)]

    def coverage(self, run: RunLike) -> tuple[bool, str]:
        """(complete?, text) of what part of its config a task run covers."""
        spec = run.spec
        expected = self.expected_cells(spec)
        seen = {self.observed_cell(sample.doc) for sample in run.samples}
        cells = len(seen & expected)
        rows = len(run.samples)
        if cells >= len(expected) and rows >= spec.num_rows:
            return True, f"full ({rows} rows)"
        parts = [f"{rows}/{spec.num_rows} rows", f"{cells}/{len(expected)} cells", *self.coverage_parts(spec, seen)]
        return False, f"partial ({', '.join(parts)})"

    # ------------------------------------------------------------------------------------ figures and tables

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

    def comparison_series(self, run: RunLike) -> list[tuple[Any, float, int]]:
        """(x, value, n) points of a run in the models-compared figure (none: not drawn): here (length, paper mean
        of the headline metric at that length, rows)."""
        by_length: dict[int, list[Any]] = defaultdict(list)
        for sample in run.samples:
            by_length[int(sample.doc["context_length"])].append(sample)
        metric = self.headline_metric(run.spec)
        series = []
        for length, samples in sorted(by_length.items()):
            cell = self.paper_mean(run.spec, samples, metric)[0]
            if cell.value is not None:
                series.append((length, cell.value, len(samples)))
        return series

    def tables(self, runs: Sequence[RunLike], edition: str) -> list[Table]:
        """The family's own tables from its runs of one edition (models as rows); none here. The haystack
        families' runs make their edition's size tables in the report, beside the other two tasks."""
        return []
