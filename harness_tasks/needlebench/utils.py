"""lm-eval hooks of the NeedleBench / Counting-Stars tasks.

A thin wrapper: every ``!function utils.<name>`` of the task YAMLs is the function of that name in
``needlebench.evaluation.harness.tasks`` (its :func:`~needlebench.evaluation.harness.tasks.hooks`: the loader,
each family's ``process_results`` hooks and aggregations). Install the ``needlebench`` package.
"""

from needlebench.evaluation.harness import tasks

globals().update(tasks.hooks())
