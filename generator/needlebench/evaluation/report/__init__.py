"""``needlebench report``: the papers' tables and figures, models side by side, from lm-eval output.

Split by job, on one sample model (:class:`~needlebench.evaluation.report.load.Sample`):

* :mod:`~needlebench.evaluation.report.load`: reading lm-eval results, samples and run health into
  :class:`Sample` / :class:`TaskRun` / :class:`Results` (and ``--scoring``);
* :mod:`~needlebench.evaluation.report.aggregate`: the means across families (the per-size overall, the mean and
  std over runs, lm-eval's row mean);
* :mod:`~needlebench.evaluation.report.tables`: the size, experiments, scores, health and lm-eval tables, and each
  family's own;
* :mod:`~needlebench.evaluation.report.figures`: heatmaps and the model comparison (matplotlib, imported when drawn);
* :mod:`~needlebench.evaluation.report.write`: Markdown, CSV, HTML and the report folder.

What differs between benchmark families (headline metric per edition, the shape of logged metrics, grid cells and
coverage, paper mean, heatmap points, comparison series, a family's own tables) is asked of its object,
``eval_family(spec)`` (:mod:`needlebench.evaluation.families`; :mod:`needlebench.evaluation.families.cells` holds
the cells and tables both speak); no family key nor family metric is spelled here.
"""

from __future__ import annotations

from needlebench.evaluation.report.aggregate import Cell, cell_mean, combined_note, run_coverage, runs_summary
from needlebench.evaluation.report.load import (
    HEALTH,
    RESULTS_FILE_RE,
    SAMPLES_FILE_RE,
    SCORING_CHOICES,
    SCORING_LABEL,
    Results,
    Sample,
    TaskRun,
    apply_scoring,
    check_scoring,
    health_path,
    is_observed,
    load_results,
    observed_spec,
    read_health,
    read_samples,
    source_label,
)
from needlebench.evaluation.report.tables import Table, build_tables
from needlebench.evaluation.report.write import parse_names, write_report

__all__ = [
    "HEALTH",
    "RESULTS_FILE_RE",
    "SAMPLES_FILE_RE",
    "SCORING_CHOICES",
    "SCORING_LABEL",
    "Cell",
    "is_observed",
    "Results",
    "Sample",
    "Table",
    "TaskRun",
    "apply_scoring",
    "build_tables",
    "cell_mean",
    "check_scoring",
    "combined_note",
    "health_path",
    "load_results",
    "observed_spec",
    "parse_names",
    "read_health",
    "read_samples",
    "run_coverage",
    "runs_summary",
    "source_label",
    "write_report",
]
