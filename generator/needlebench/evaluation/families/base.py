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

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report
    # (headline metric per edition, grid cell key, paper mean, heatmap points, table rows)

    # ------------------------------------------------------------------------------------ end report
