"""M-RS in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class MultiReasoning(EvalFamily):
    key = "multi_reasoning"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    # ------------------------------------------------------------------------------------ end report


FAMILY = MultiReasoning()
