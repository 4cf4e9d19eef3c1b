"""Evaluation speed on vLLM (CPU build): prefix caching on/off, rows in shipped order, shuffled, or cache-friendly.

Run it with the vLLM environment's Python (``scripts/install_vllm_env.sh``)::

    ~/.cache/needlebench/vllm-venv/bin/python scripts/bench_eval.py --model MODEL_DIR [--lengths 1000] [--repeats 1]

The rows are S-RT ``single_en_8k`` rows (built on the fly from the pinned seed, or ``--data-dir``): every depth
of the chosen lengths and repeats. Rows of one (length, repeat) cell share their haystack; a row shares the
prompt prefix up to its needle with every row whose needle lies deeper. Orders compared:

* ``shipped``: the datasets' order (depth ascending inside a cell: consecutive rows share almost nothing);
* ``shuffled``: a fixed random permutation;
* ``deep-first``: cells kept together, deepest needle first, so every row's prefix up to its needle is already
  cached (:func:`cache_friendly_order`).

Each (order, caching) pair runs in a fresh engine (a subprocess), one request at a time (``max_num_seqs=1``, so
a row can reuse the blocks of the row before it), generating one token (the prefill is what the cache saves).
Printed per run: prompt tokens, prefill tokens computed (prompt minus the tokens vLLM reports as cached,
``RequestOutput.num_cached_tokens``), the cache hit rate, wall time, and both as ratios to the shipped order
without caching. Writes the table as JSON with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CONFIG = "single_en_8k"
ORDERS = ("shipped", "shuffled", "deep-first")


def load_rows(lengths: list[int], repeats: int, data_dir: str | None) -> list[dict[str, Any]]:
    """The chosen rows of ``single_en_8k``, in shipped order."""
    from needlebench.dataset.load import load_split

    split = load_split(CONFIG, data_dir=data_dir)
    return [
        {"id": row["id"], "prompt": row["prompt"], "length": int(row["context_length"]), "repeat": int(row["repeat"]), "depth": float(row["depth_percent"])}
        for row in split
        if int(row["context_length"]) in lengths and int(row["repeat"]) < repeats
    ]


def cache_friendly_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows sharing a haystack together, deepest needle first: each row's prefix up to its needle is cached."""
    return sorted(rows, key=lambda row: (row["length"], row["repeat"], -row["depth"]))


def ordered(rows: list[dict[str, Any]], order: str, seed: int = 0) -> list[dict[str, Any]]:
    if order == "shipped":
        return list(rows)
    if order == "shuffled":
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        return shuffled
    return cache_friendly_order(rows)


def run_one(args: argparse.Namespace) -> dict[str, Any]:
    """One engine, one order, caching on or off (runs in its own process)."""
    from vllm import LLM, SamplingParams

    rows = ordered(load_rows(args.lengths, args.repeats, args.data_dir), args.order)
    tokenizer_prompts = [row["prompt"] for row in rows]
    llm = LLM(
        model=args.model,
        max_model_len=args.max_model_len,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        enable_prefix_caching=args.caching == "on",
        max_num_seqs=1,
    )
    messages = [[{"role": "user", "content": prompt}] for prompt in tokenizer_prompts]
    params = SamplingParams(max_tokens=1, temperature=0.0)
    start = time.perf_counter()
    outputs = llm.chat(messages, params, use_tqdm=False)
    wall = time.perf_counter() - start
    prompt_tokens = sum(len(output.prompt_token_ids) for output in outputs)
    cached = sum(int(output.num_cached_tokens or 0) for output in outputs)
    return {
        "order": args.order,
        "caching": args.caching,
        "rows": len(rows),
        "prompt_tokens": prompt_tokens,
        "cached_tokens": cached,
        "prefill_tokens": prompt_tokens - cached,
        "hit_rate": cached / prompt_tokens if prompt_tokens else 0.0,
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Model folder (e.g. the converted SmolLM2).")
    parser.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[1000], help="Context lengths of single_en_8k (comma-separated).")
    parser.add_argument("--repeats", type=int, default=1, help="Repeats per length (10 in the dataset).")
    parser.add_argument("--data-dir", default=None, help="A built dataset folder (default: build on the fly).")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--orders", default=",".join(ORDERS))
    parser.add_argument("--json", default=None, help="Write the results here.")
    parser.add_argument("--order", help=argparse.SUPPRESS)
    parser.add_argument("--caching", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.order:  # child process
        print("RESULT " + json.dumps(run_one(args)), flush=True)
        return
    results = []
    for order in args.orders.split(","):
        for caching in ("off", "on"):
            command = [sys.executable, __file__, "--model", args.model, "--lengths", ",".join(map(str, args.lengths)),
                       "--repeats", str(args.repeats), "--max-model-len", str(args.max_model_len), "--order", order, "--caching", caching]
            if args.data_dir:
                command += ["--data-dir", args.data_dir]
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")})
            line = next((line for line in done.stdout.splitlines() if line.startswith("RESULT ")), None)
            if line is None:
                sys.exit(f"run {order}/{caching} failed:\n{done.stderr[-3000:]}")
            results.append(json.loads(line.removeprefix("RESULT ")))
            print(f"done {order} caching {caching}", file=sys.stderr, flush=True)
    base = next(r for r in results if r["order"] == "shipped" and r["caching"] == "off") if any(r["order"] == "shipped" for r in results) else results[0]
    print(f"{'order':<11} {'cache':>5} {'rows':>5} {'prompt tok':>10} {'prefill tok':>11} {'hit rate':>8} {'wall s':>8} {'prefill x':>9} {'wall x':>7}")
    for r in results:
        print(f"{r['order']:<11} {r['caching']:>5} {r['rows']:>5} {r['prompt_tokens']:>10,} {r['prefill_tokens']:>11,} {r['hit_rate']:>8.1%} {r['wall_s']:>8.1f} "
              f"{r['prefill_tokens'] / base['prefill_tokens']:>9.2f} {r['wall_s'] / base['wall_s']:>7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
