"""What the evaluation stage knows about a benchmark family: one object per family, registered in
:mod:`needlebench.evaluation.families`.

The build side of a family (its grid, rows and modes) is its object in :mod:`needlebench.tasks.families`; this
half holds what lm-eval and the report need: the task template (metrics, generation budget, hooks), the
``process_results`` hook and the oracle answer, then the headline metric per edition, the grid cell of a sample,
the paper mean, the heatmap points and the table rows.
"""

from __future__ import annotations


class EvalFamily:
    """Base of the evaluation half of a family; a family module subclasses it and registers one instance."""

    #: Registry key: the same as the family's key in :mod:`needlebench.tasks.families`.
    key: str = ""

    # ------------------------------------------------------------------------------------ lm-eval task
    # (task templates, metrics, generation budget, groups, process_results hooks, oracle answer)

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report
    # (headline metric per edition, grid cell key, paper mean, heatmap points, table rows)

    # ------------------------------------------------------------------------------------ end report
