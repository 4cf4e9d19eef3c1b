"""What ``needlebench eval run`` lets lm-eval print: its own output, less what does not apply to needlebench.

While a run goes, :func:`lm_eval_output` (each part is undone when the run ends):

* drops lm-eval's advice to pass ``--metadata='{"max_seq_lengths": ...}'`` for needlebench tasks: lm-eval logs it for
  every task with a ``custom_dataset`` (``ConfigurableTask.download`` in ``lm_eval/api/task.py``), but that key is
  RULER's and needlebench's tasks refuse it (their ``--metadata`` keys are ``data_dir``, ``data_repo``...);
* asks git for lm-eval's ``git_hash`` without letting git print ``fatal: not a git repository`` when the run starts
  outside a repository: ``get_git_commit_hash`` (``lm_eval/loggers/utils.py``, called from ``simple_evaluate`` in
  ``lm_eval/evaluator.py``) runs ``git describe --always`` with git's stderr on the terminal; the same command runs
  here with its stderr discarded and the same fallback, so the recorded hash is lm-eval's own;
* names the oracle's model folder ``needlebench-oracle``: lm-eval names it from the model args' ``pretrained=`` (or
  ``model=``...) and otherwise draws a random name (``GeneralConfigTracker.log_experiment_args`` in
  ``lm_eval/loggers/evaluation_tracker.py``), and the oracle takes no such arg;
* keeps diagnostics that are not scores (:data:`DIAGNOSTIC_METRICS`: Counting-Stars' score per star, M-RT's hit per
  needle) out of the results table lm-eval prints (``make_table`` in ``lm_eval/utils.py``, called by
  ``lm_eval/_cli/run.py``). They stay in the samples (the report's heatmaps read them there) and in
  ``results_<date>.json``, whose bytes do not change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from needlebench.evaluation.harness.tasks import TASK_PREFIX
from needlebench.evaluation.runner import lm_eval_seam

#: Per-row lists kept for heatmaps, aggregated by lm-eval only because its metric list is where a task's process
#: results are declared; a flat mean over stars or needles is not one of the papers' scores.
DIAGNOSTIC_METRICS = ("per_star", "needle_hits")


class _NoMetadataAdvice(logging.Filter):
    """Drops lm-eval's ``max_seq_lengths`` advice for needlebench tasks (other tasks keep it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        task, _, rest = message.partition(": ")
        return not (rest.startswith(lm_eval_seam.METADATA_ADVICE) and task.startswith(TASK_PREFIX))


def git_commit_hash() -> str | None:
    """lm-eval's ``get_git_commit_hash`` (``lm_eval/loggers/utils.py``) with git's own error message discarded."""
    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL).strip().decode()  # noqa: S607
    except (subprocess.CalledProcessError, FileNotFoundError):
        return lm_eval_seam.commit_from_path(os.getcwd())


def table_results(result_dict: Mapping[str, Any], column: str = "results") -> dict[str, Any]:
    """A copy of lm-eval's results with the diagnostic metrics (and their stderr) taken out of ``column``."""
    hidden = {name for metric in DIAGNOSTIC_METRICS for name in (metric, f"{metric}_reference")}
    hidden |= {f"{name}_stderr" for name in hidden}
    kept = {
        task: {key: value for key, value in metrics.items() if key.partition(",")[0] not in hidden}
        if isinstance(metrics, Mapping)
        else metrics
        for task, metrics in result_dict.get(column, {}).items()
    }
    return {**result_dict, column: kept}


@contextmanager
def lm_eval_output(oracle: str) -> Iterator[None]:
    """While the block runs, lm-eval prints and names as the module docstring says; `oracle` is the registered
    name of the oracle model (its results folder gets that name)."""
    task_logger = logging.getLogger(lm_eval_seam.TASK_LOGGER)
    advice_filter = _NoMetadataAdvice()

    def without_diagnostics(original_table: Any) -> Any:
        def make_table(result_dict: Any, column: str = "results", sort_results: bool = False) -> Any:
            return original_table(table_results(result_dict, column), column, sort_results)

        return make_table

    def name_oracle(tracker: Any, model_source: str, model_args: Any, *args: Any, **kw: Any) -> None:
        if model_source == oracle and not lm_eval_seam.model_name(model_args):
            lm_eval_seam.name_logged_model(tracker, oracle)

    task_logger.addFilter(advice_filter)
    try:
        with (
            lm_eval_seam.git_hash_replaced(git_commit_hash),
            lm_eval_seam.results_table_replaced(without_diagnostics),
            lm_eval_seam.model_logged(name_oracle),
        ):
            yield
    finally:
        with contextlib.suppress(ValueError):
            task_logger.removeFilter(advice_filter)
