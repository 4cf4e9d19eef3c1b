"""The evaluation path at scale: wall time, peak memory and sample-log size of ``needlebench eval run``.

Runs the oracle model (``needlebench-oracle``: no model cost, so what is measured is the harness: loading rows,
building requests, scoring, logging) with ``--log_samples`` on each config, one run at a time::

    python scripts/bench_eval_harness.py --data-dir DIR [--configs single_en_128k,single_en_1000k,...]
        [--code PATH] [--label NAME] [-- extra needlebench eval arguments, e.g. --no-chunk]

``DIR`` holds the configs (``needlebench build CONFIG ... --out DIR``). ``--code PATH`` runs the ``generator``
folder of another checkout (e.g. a worktree of an older commit, for before/after figures) instead of the
installed package. Printed per run: wall time; the peak RSS of the whole process tree (``/proc`` of the run and
all its descendants, summed, sampled every 0.1 s; a per-process maximum such as ``getrusage`` would miss what
children hold at once); the size of the ``samples_*.jsonl`` files; the prompt bytes of the rows (UTF-8, read
from the Parquet files in batches) and the log size as a share of them; the run's exit status. ``--max-rss-gb``
stops a run whose tree passes that size (reported as ``killed``), so a run that cannot fit does not take the
machine down. ``--json PATH`` writes the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

CONFIGS = ("single_en_128k", "single_en_1000k", "multi_reasoning_en_1000k")
GIB = 1024**3
MIB = 1024**2


def tree_rss(root: psutil.Process) -> int:
    """Summed RSS (bytes) of ``root`` and all its descendants (processes that vanish meanwhile count 0)."""
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def prompt_bytes(data_dir: Path, config: str) -> int:
    """UTF-8 bytes of every prompt of a config, read from its Parquet files a few rows at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    total = 0
    for path in sorted((data_dir / "data" / config).glob("*.parquet")):
        for batch in pq.ParquetFile(path).iter_batches(columns=["prompt"], batch_size=8):
            total += int(pc.sum(pc.binary_length(batch.column(0).cast("binary"))).as_py() or 0)
    return total


def run_one(config: str, data_dir: Path, code: Path | None, extra: list[str], max_rss: float) -> dict[str, Any]:
    """One ``needlebench eval run`` of the oracle on ``config`` with ``--log_samples``, measured."""
    out = Path(tempfile.mkdtemp(prefix="bench-eval-harness-"))
    command = [
        sys.executable, "-c", "from needlebench.cli import main; main()", "eval", "run",
        "--model", "needlebench-oracle",
        "--tasks", f"needlebench_{config}",
        "--metadata", json.dumps({"data_dir": str(data_dir)}),
        "--log_samples", "--output_path", str(out), *extra,
    ]  # fmt: skip
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code / "generator")
    started = time.monotonic()
    log = out / "run.log"
    with log.open("w", encoding="utf-8") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
    root = psutil.Process(process.pid)
    peak, killed = 0, False
    while process.poll() is None:
        try:
            peak = max(peak, tree_rss(root))
        except psutil.NoSuchProcess:
            break
        if peak > max_rss * GIB:
            for child in root.children(recursive=True):
                child.kill()
            process.kill()
            killed = True
        time.sleep(0.1)
    status = process.wait()
    wall = time.monotonic() - started
    samples = sum(path.stat().st_size for path in out.rglob("samples_*.jsonl"))
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-3:]
    shutil.rmtree(out, ignore_errors=True)
    return {
        "config": config,
        "wall_s": round(wall, 1),
        "peak_rss_gib": round(peak / GIB, 2),
        "samples_mib": round(samples / MIB, 2),
        "status": "killed" if killed else status,
        "tail": tail if status and not killed else [],
    }


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="folder built by `needlebench build`",
    )
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated configs")
    parser.add_argument(
        "--code",
        type=Path,
        default=None,
        help="a checkout whose generator/ to run (before/after)",
    )
    parser.add_argument(
        "--label",
        default="",
        help="label of this code in the table (e.g. before, after)",
    )
    parser.add_argument(
        "--max-rss-gb",
        type=float,
        default=20.0,
        help="stop a run whose process tree passes this",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args, extra = parser.parse_known_args()
    extra = [arg for arg in extra if arg != "--"]
    label = args.label or (f"code {args.code}" if args.code else "installed")
    rows = []
    print("| code | config | wall | peak RSS (tree) | sample logs | prompt bytes | logs / prompts | exit |")
    print("|---|---|---|---|---|---|---|---|")
    for config in [part.strip() for part in args.configs.split(",") if part.strip()]:
        prompts = prompt_bytes(args.data_dir, config)
        row = run_one(config, args.data_dir.resolve(), args.code, extra, args.max_rss_gb)
        row.update(label=label, prompt_mib=round(prompts / MIB, 1), extra=extra)
        share = f"{100 * row['samples_mib'] * MIB / prompts:.2f} %" if prompts else "-"
        print(
            f"| {label} | {config} | {_minutes(row['wall_s'])} | {row['peak_rss_gib']:.2f} GiB | "
            f"{row['samples_mib']:.1f} MiB | {row['prompt_mib']:.0f} MiB | {share} | {row['status']} |",
            flush=True,
        )
        for line in row["tail"]:
            print(f"    {line}", flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0 if all(row["status"] == 0 for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
