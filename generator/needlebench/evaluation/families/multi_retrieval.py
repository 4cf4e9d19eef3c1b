"""M-RT in the evaluation stage: its lm-eval task and its report (see :class:`EvalFamily`)."""

from __future__ import annotations

from needlebench.evaluation.families.base import EvalFamily


class MultiRetrieval(EvalFamily):
    key = "multi_retrieval"

    # ------------------------------------------------------------------------------------ lm-eval task

    # ------------------------------------------------------------------------------------ end lm-eval task

    #

    # ------------------------------------------------------------------------------------ report

    # ------------------------------------------------------------------------------------ end report


FAMILY = MultiRetrieval()
