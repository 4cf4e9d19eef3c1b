"""Evaluation speed on vLLM (CPU build): prefix caching on and off, rows in the shipped order and shuffled.

Run it with the vLLM environment's Python (``scripts/install_vllm_env.sh``)::

    ~/.cache/needlebench/vllm-venv/bin/python scripts/bench_eval.py --model MODEL_DIR

(about 13 minutes on 2 shared CPU cores with SmolLM2-135M; the figures are in README.md).

The rows are S-RT ``single_en_8k`` rows (built on the fly from the pinned seed, or ``--data-dir``): the chosen
depths (``--depths``, default 52 and 100) of the chosen lengths (default 5000, the shortest) and repeats (default
2). Rows of one (length, repeat) cell share their haystack, and a row shares the prompt prefix up to the
shallower of the two needles with every row of its cell. The datasets ship the rows of a cell together (depth
ascending), so a row finds the prefix up to the previous row's needle in the cache; shuffled, the rows of other
cells come between and, when the cache holds few prompts, evict it. (Inside a cell the order does not matter
when the cache holds the whole cell: every order caches the sum of the depths minus the deepest.)

Orders: ``shipped`` (the datasets' order), ``shuffled`` (a fixed permutation, ``--seed``), ``deep-first`` (cells
together, deepest needle first; optional, for comparison). One engine per caching setting (a subprocess) runs
every order, one request at a time (``max_num_seqs=1``), generating one token (the prefill is what the cache
saves), with the prefix cache emptied between orders and a short warm-up request first. The KV cache holds
``--cache-tokens`` tokens (default: the longest prompt plus one block: about one prompt, as on a GPU at 128k-1M
tokens, where the cache holds one or a few prompts).

First it prints whether the rows sharing a haystack are together over the whole config: the number of stretches
of one cell in the shipped order and in the orders lm-eval sends requests (``vllm``: by prompt tokens; API
models: by prompt characters). Then per run, from vLLM's own counters (``LLM.get_metrics()``): prompt tokens,
prefill tokens computed (``vllm:prompt_tokens_by_source{source="local_compute"}``), the prefix-cache hit rate
(``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``), wall time, and prefill and wall time as ratios to
the shipped order without caching. ``--json PATH`` writes the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from needlebench.dataset.load import load_split

CONFIG = "single_en_8k"
ORDERS = ("shipped", "shuffled", "deep-first")
BLOCK_SIZE = 128  # vLLM's CPU attention block size


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def load_rows(lengths: list[int], repeats: int, depths: list[int], data_dir: str | None) -> list[dict[str, Any]]:
    """The chosen rows of ``single_en_8k``, in shipped order."""

    split = load_split(CONFIG, data_dir=data_dir)
    rows = [
        {
            "id": row["id"],
            "prompt": row["prompt"],
            "length": int(row["context_length"]),
            "repeat": int(row["repeat"]),
            "depth": float(row["depth_percent"]),
        }
        for row in split
        if int(row["context_length"]) in lengths
        and int(row["repeat"]) < repeats
        and round(float(row["depth_percent"])) in depths
    ]
    if not rows:
        have_lengths = sorted({int(length) for length in split["context_length"]})
        have_depths = sorted({round(float(depth)) for depth in split["depth_percent"]})
        sys.exit(
            f"bench_eval: no {CONFIG} row has --lengths {lengths} and --depths {depths}; "
            f"lengths are {have_lengths}, depths {have_depths}"
        )
    return rows


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


def _runs(cells: list[tuple[int, int]]) -> int:
    """Stretches of consecutive rows from one (length, repeat) cell: the cell count when every cell is contiguous."""
    return sum(1 for index, cell in enumerate(cells) if index == 0 or cells[index - 1] != cell)


def order_check(model: str, data_dir: str | None) -> str:
    """Are the rows sharing a haystack together, over the whole config, in the shipped order and in the orders
    lm-eval hands requests to the model: ``vllm`` sorts by (-prompt tokens, prompt), the API models
    (``local-completions``) by -prompt characters (both with the chat template rendered)."""
    from transformers import AutoTokenizer

    split = load_split(CONFIG, data_dir=data_dir)
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = []
    for row in split:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": row["prompt"]}], add_generation_prompt=True, tokenize=False
        )
        rows.append(((int(row["context_length"]), int(row["repeat"])), text, len(_chat_ids(tokenizer, row["prompt"]))))
    cells = len({cell for cell, _text, _tokens in rows})
    vllm_sort = sorted(rows, key=lambda row: (-row[2], row[1]))
    api_sort = sorted(rows, key=lambda row: -len(row[1]))
    return (
        f"{CONFIG}, all {len(rows)} rows, {cells} cells (length, repeat): stretches of one cell in the shipped order "
        f"{_runs([row[0] for row in rows])}, in lm-eval's vllm order {_runs([row[0] for row in vllm_sort])}, "
        f"in lm-eval's API-model order {_runs([row[0] for row in api_sort])} ({cells} = every cell together)"
    )


def _counters(llm) -> dict[str, float]:
    """vLLM's counters this bench reads, summed over labels (``source`` kept apart)."""
    wanted = {
        "vllm:prompt_tokens",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
        "vllm:prompt_tokens_by_source",
    }
    totals: dict[str, float] = {}
    for metric in llm.get_metrics():
        if metric.name in wanted:
            name = (
                metric.name
                if metric.name != "vllm:prompt_tokens_by_source"
                else f"{metric.name}:{metric.labels.get('source')}"
            )
            totals[name] = totals.get(name, 0.0) + float(metric.value)
    return totals


def _chat_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of a prompt as the engine sees it (the chat template rendered, then tokenized)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def run_engine(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One engine (caching on or off) running every order (runs in its own process)."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    rows = load_rows(args.lengths, args.repeats, args.depths, args.data_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    longest = max(len(_chat_ids(tokenizer, row["prompt"])) for row in rows)
    max_model_len = args.max_model_len or BLOCK_SIZE * math.ceil((longest + 1) / BLOCK_SIZE)
    cache_tokens = max(args.cache_tokens or longest + BLOCK_SIZE, max_model_len)
    blocks = math.ceil(cache_tokens / BLOCK_SIZE)
    config = json.loads((Path(args.model) / "config.json").read_text(encoding="utf-8"))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    per_token = (
        2
        * config["num_hidden_layers"]
        * config.get("num_key_value_heads", config["num_attention_heads"])
        * head_dim
        * 4
    )  # K and V, float32
    llm = LLM(
        model=args.model,
        max_model_len=max_model_len,
        dtype="float32",
        enforce_eager=True,
        seed=0,
        enable_prefix_caching=args.caching == "on",
        max_num_seqs=1,
        block_size=BLOCK_SIZE,
        kv_cache_memory_bytes=per_token * BLOCK_SIZE * (blocks + 1),  # on CPU the cache is sized in bytes ...
        num_gpu_blocks_override=blocks,  # ... and this pins the block count
        disable_log_stats=False,
    )
    params = SamplingParams(max_tokens=1, temperature=0.0)
    llm.chat([[{"role": "user", "content": "Hello"}]], params, use_tqdm=False)  # warm-up, outside the timings
    results = []
    for order in args.orders:
        llm.reset_prefix_cache()
        chosen = ordered(rows, order, args.seed)
        before = _counters(llm)
        start = time.perf_counter()
        outputs = llm.chat([[{"role": "user", "content": row["prompt"]}] for row in chosen], params, use_tqdm=False)
        wall = time.perf_counter() - start
        after = _counters(llm)
        delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
        queries = delta.get("vllm:prefix_cache_queries", 0.0)
        results.append(
            {
                "order": order,
                "caching": args.caching,
                "rows": len(chosen),
                "row_ids": [row["id"] for row in chosen],
                "prompt_tokens": int(delta.get("vllm:prompt_tokens", 0)),
                "prefill_tokens": int(delta.get("vllm:prompt_tokens_by_source:local_compute", 0)),
                "cache_hits": int(delta.get("vllm:prefix_cache_hits", 0)),
                "cache_queries": int(queries),
                "hit_rate": delta.get("vllm:prefix_cache_hits", 0.0) / queries if queries else 0.0,
                "cached_per_request": [int(output.num_cached_tokens or 0) for output in outputs],
                "wall_s": wall,
                "max_model_len": max_model_len,
                "cache_tokens": blocks * BLOCK_SIZE,
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Model folder (e.g. the converted SmolLM2).")
    parser.add_argument(
        "--lengths", type=_ints, default=[5000], help="Context lengths of single_en_8k (comma-separated; 5000-8000)."
    )
    parser.add_argument("--repeats", type=int, default=2, help="Repeats (cells) per length (10 in the dataset).")
    parser.add_argument(
        "--depths",
        type=_ints,
        default=[52, 100],
        help="Needle depths in percent, rounded (comma-separated; 0, 5, 10, ... 100).",
    )
    parser.add_argument("--data-dir", default=None, help="A built dataset folder (default: build on the fly).")
    parser.add_argument(
        "--max-model-len", type=int, default=None, help="Default: the longest prompt plus one token, in whole blocks."
    )
    parser.add_argument(
        "--cache-tokens",
        type=int,
        default=None,
        help="KV cache size in tokens (default: the longest prompt plus one block).",
    )
    parser.add_argument(
        "--orders",
        type=lambda s: s.split(","),
        default=["shipped", "shuffled"],
        help=f"Comma-separated, of {', '.join(ORDERS)}.",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the shuffled order.")
    parser.add_argument("--json", default=None, help="Write the results here.")
    parser.add_argument("--caching", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    bad = [order for order in args.orders if order not in ORDERS]
    if bad:
        sys.exit(f"bench_eval: unknown --orders {','.join(bad)}; choose from {', '.join(ORDERS)}")
    if args.caching:  # child process
        for result in run_engine(args):
            print("RESULT " + json.dumps(result), flush=True)
        return
    started = time.perf_counter()
    check = order_check(args.model, args.data_dir)
    print(check, file=sys.stderr, flush=True)
    results = []
    env = {
        key: value for key, value in os.environ.items() if key != "VLLM_CPU_KVCACHE_SPACE"
    }  # it would override the cache size
    for caching in ("off", "on"):
        command = [sys.executable, __file__, "--model", args.model, "--lengths", ",".join(map(str, args.lengths)),
                   "--repeats", str(args.repeats), "--depths", ",".join(map(str, args.depths)),
                   "--orders", ",".join(args.orders), "--seed", str(args.seed), "--caching", caching]  # fmt: skip
        for flag, value in (
            ("--data-dir", args.data_dir),
            ("--max-model-len", args.max_model_len),
            ("--cache-tokens", args.cache_tokens),
        ):
            if value is not None:
                command += [flag, str(value)]
        print(f"engine with prefix caching {caching}: {', '.join(args.orders)} ...", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            sys.exit(f"bench_eval: the engine with caching {caching} failed:\n{done.stderr[-3000:]}")
        results += [json.loads(line.removeprefix("RESULT ")) for line in lines]
    base = next((r for r in results if r["order"] == "shipped" and r["caching"] == "off"), results[0])
    first = results[0]
    print(
        f"{CONFIG}: {first['rows']} rows (lengths {args.lengths}, repeats {args.repeats}, depths {args.depths}), "
        f"KV cache {first['cache_tokens']:,} tokens, max_model_len {first['max_model_len']}, shuffle seed {args.seed}"
    )
    for r in results:
        if r["order"] != "shipped":
            print(f"  {r['order']} ({r['caching']}): {' '.join(r['row_ids'])}")
            break
    print(check)
    print(
        f"{'order':<11} {'cache':>5} {'rows':>5} {'prompt tok':>10} {'prefill tok':>11} {'hit rate':>8} {'wall s':>8} "
        f"{'prefill x':>9} {'wall x':>7}"
    )
    for r in results:
        print(
            f"{r['order']:<11} {r['caching']:>5} {r['rows']:>5} {r['prompt_tokens']:>10,} {r['prefill_tokens']:>11,} "
            f"{r['hit_rate']:>8.1%} {r['wall_s']:>8.1f} "
            f"{r['prefill_tokens'] / base['prefill_tokens']:>9.2f} {r['wall_s'] / base['wall_s']:>7.2f}"
        )
    print(f"(ratios to shipped order without caching; whole bench {time.perf_counter() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
