"""lm-eval hooks of the NeedleBench / Counting-Stars tasks.

A thin wrapper: every ``!function utils.<name>`` of the task YAMLs is the function of that name in
``needlebench.evaluation.harness`` (its :func:`~needlebench.evaluation.harness.hooks`: the loader, each family's
``process_results`` hooks and aggregations). Install the ``needlebench`` package.
"""

from needlebench.evaluation import harness

globals().update(harness.hooks())
