"""lm-eval hooks of the NeedleBench / Counting-Stars tasks.

A thin wrapper: the implementation lives in ``needlebench.harness`` (install the ``needlebench`` package).
"""

from needlebench.harness import (  # noqa: F401
    agg_flat_mean,
    agg_perf_4,
    load_dataset,
    process_atc,
    process_atc_open,
    process_counting_stars,
    process_multi_reasoning,
    process_multi_retrieval,
    process_single,
)
