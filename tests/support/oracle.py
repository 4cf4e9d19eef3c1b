"""The oracle model through ``needlebench eval run`` in this process (lm-eval's CLI with the package's task folder
included, :func:`needlebench.evaluation.runner.evaluate.run_eval`), as the end-to-end tests run it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from needlebench.evaluation.runner.evaluate import ORACLE_MODEL, run_eval

__all__ = ["ORACLE_MODEL", "latest_results", "run_oracle"]


def run_oracle(
    output: Path,
    tasks: Iterable[str],
    *,
    data_dir: Path | None = None,
    include_path: Path | None = None,
    limit: int | None = None,
) -> Path:
    """Run the oracle on ``tasks`` (lm-eval task names) with ``--log_samples`` into ``output``; ``data_dir`` goes to
    the tasks as ``--metadata``, ``include_path`` adds a task folder. Returns ``output``."""
    argv = ["run", "--model", ORACLE_MODEL]
    if include_path is not None:
        argv += ["--include_path", str(include_path)]
    argv += ["--tasks", ",".join(tasks)]
    if data_dir is not None:
        argv += ["--metadata", json.dumps({"data_dir": str(data_dir)})]
    if limit is not None:
        argv += ["--limit", str(limit)]
    argv += ["--output_path", str(output), "--log_samples"]
    assert run_eval(argv) == 0
    return output


def latest_results(output: Path) -> dict[str, Any]:
    """The newest ``results_*.json`` lm-eval wrote under ``output``."""
    paths = sorted(output.rglob("results_*.json"))
    assert paths, f"lm-eval wrote no results under {output}"
    return json.loads(paths[-1].read_text(encoding="utf-8"))
