"""lm-eval hooks of the NeedleBench / Counting-Stars tasks.

A thin wrapper: the implementation lives in ``needlebench.evaluation.harness`` (install the ``needlebench`` package).
"""

