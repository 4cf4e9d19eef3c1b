"""lm-eval hooks of the NeedleBench / Counting-Stars tasks.

A thin wrapper: the implementation lives in ``needlebench.evaluation.harness`` (install the ``needlebench`` package).
"""

from needlebench.evaluation.harness import (
    agg_flat_mean,
    agg_perf_4,
    agg_relation_weighted,
    load_dataset,
    process_atc,
    process_atc_open,
    process_atc_v2,
    process_counting_stars,
    process_multi_reasoning,
    process_multi_reasoning_v2,
    process_multi_retrieval,
    process_single,
    process_single_v2,
)
