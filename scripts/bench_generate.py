"""Benchmark split generation against the reference algorithm, measured in the same run.

    python scripts/bench_generate.py 'single_*_1000k' --num-proc 2 --reference-samples 4

Builds the chosen configs with `needlebench build` (into a temporary folder) and prints prompts/s, context
tokens/s and peak RSS (this process and its workers). Then it times the reference algorithm on a sample of
the same cells: per sample, re-tokenise the haystack documents until the target is reached, cut, insert the
needle tokens at the depth's token offset and decode (what OpenCompass NeedleBench v1 does for every sample),
and extrapolates the sample to all rows of the configs, length by length. Both figures come from this run.
"""

from __future__ import annotations

import json
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

console = Console()


def peak_rss_mib() -> tuple[float, float]:
    """Peak RSS of this process and of its largest finished child, in MiB (Linux reports KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def reference_sample_seconds(spec, options, length: int, depth: int, repeat: int, encoding) -> float:
    """Time one sample built the reference way (documents re-encoded for the sample)."""
    from needlebench.sources.haystacks import corpus_for
    from needlebench.tasks.haystack import effective_buffer
    from needlebench.tasks.needle_bank import needle_bank

    documents = corpus_for(options.haystack(spec.language), spec.language).documents
    needle = "\n" + needle_bank(spec.language)[repeat].text + "\n"
    started = time.perf_counter()
    order = list(range(len(documents)))
    np.random.default_rng(repeat).shuffle(order)
    needle_tokens = encoding.encode_ordinary(needle)
    target = max(0, length - effective_buffer(spec, length, options.settings_for(spec)) - len(needle_tokens))
    tokens: list[int] = []
    position = 0
    while len(tokens) < target:  # cycle the corpus like the default mode when it is too short
        tokens.extend(encoding.encode_ordinary(documents[order[position % len(order)]]))
        position += 1
    tokens = tokens[:target]
    point = int(len(tokens) * depth / 100)
    context = encoding.decode(tokens[:point] + needle_tokens + tokens[point:])
    _prompt = f"The document given to you by the user is {context}\n\nNow, the question is: ?"
    return time.perf_counter() - started


def our_row_seconds(spec, options, length: int, count: int) -> float:
    """Mean time of our generator for `count` rows at `length` (prompt rendered and counted, not written)."""
    from itertools import islice

    from needlebench.dataset.rows import iter_rows

    rows = iter_rows(spec, options, (length,))
    next(rows)  # the first row of a shard also loads its inputs
    started = time.perf_counter()
    produced = sum(1 for _ in islice(rows, count))
    return (time.perf_counter() - started) / max(1, produced)


def main(
    configs: Annotated[list[str], typer.Argument(help="Config names or globs.")],
    num_proc: Annotated[int, typer.Option(help="Worker processes for the build.")] = 2,
    reference_samples: Annotated[int, typer.Option(help="Reference samples timed per (config, length).")] = 2,
    keep: Annotated[Path | None, typer.Option(help="Keep the built folder here.")] = None,
    cold: Annotated[bool, typer.Option(help="Use an empty token cache (time the first tokenisation too).")] = False,
    compression: Annotated[str, typer.Option(help="Parquet codec of the build: zstd, snappy or none.")] = "zstd",
) -> None:
    import os

    if cold:
        os.environ["NEEDLEBENCH_CACHE"] = tempfile.mkdtemp(prefix="nb-bench-cache-")
    from needlebench.dataset.build import build_dataset
    from needlebench.dataset.options import BuildOptions
    from needlebench.sources.tokenizer import get_tokenizer
    from needlebench.tasks.grid import match_configs

    specs = match_configs(configs)
    options = BuildOptions(compression=compression)
    out = Path(tempfile.mkdtemp(prefix="nb-bench-")) / "data"
    started = time.perf_counter()
    manifest = build_dataset([s.name for s in specs], out, options, num_proc=num_proc)
    seconds = time.perf_counter() - started
    own, children = peak_rss_mib()
    rows = sum(manifest["configs"][s.name]["rows"] for s in specs)
    tokens = sum(manifest["configs"][s.name]["haystack_tokens"] for s in specs)
    size = sum(p.stat().st_size for p in out.rglob("*.parquet"))

    encoding = get_tokenizer().encoding
    estimate = 0.0
    ours_estimate = 0.0
    timed = 0
    timed_seconds = 0.0
    for spec in specs:
        depths = spec.depths or (50,)
        for length in spec.lengths:
            samples = [
                reference_sample_seconds(spec, options, length, depths[i % len(depths)], i, encoding)
                for i in range(reference_samples)
            ]
            timed += len(samples)
            timed_seconds += sum(samples)
            rows_at_length = spec.num_rows // len(spec.lengths)
            estimate += float(np.mean(samples)) * rows_at_length
            ours_estimate += our_row_seconds(spec, options, length, reference_samples) * rows_at_length

    table = Table("measure", "value")
    table.add_row("configs", ", ".join(s.name for s in specs))
    table.add_row("rows (prompts)", f"{rows:,}")
    table.add_row("context tokens", f"{tokens:,}")
    table.add_row("build wall time", f"{seconds:.1f} s (num_proc={num_proc}, {compression}{', cold cache' if cold else ''})")
    table.add_row("prompts/s", f"{rows / seconds:,.1f}")
    table.add_row("context tokens/s", f"{tokens / seconds:,.0f}")
    table.add_row("peak RSS", f"{max(own, children):,.0f} MiB (main {own:,.0f}, largest worker {children:,.0f})")
    table.add_row("Parquet size", f"{size / 2**20:,.0f} MiB")
    table.add_row("reference algorithm", f"{timed} samples timed in {timed_seconds:.1f} s, one process")
    table.add_row("reference, extrapolated", f"{estimate:,.0f} s for all {rows:,} rows (one process)")
    table.add_row("our generator, same cells", f"{ours_estimate:,.1f} s for all rows (one process, no Parquet)")
    table.add_row("generation speed-up (same cells, 1 proc each)", f"{estimate / ours_estimate:.1f}x")
    table.add_row("full build vs reference generation", f"{estimate / seconds:.1f}x (build incl. Parquet, num_proc={num_proc})")
    console.print(table)
    console.print_json(json.dumps({
        "rows": rows, "tokens": tokens, "seconds": round(seconds, 2), "peak_rss_mib": round(max(own, children)),
        "reference_seconds_estimate": round(estimate, 1), "our_generation_seconds_estimate": round(ours_estimate, 1),
        "generation_speedup": round(estimate / ours_estimate, 1), "build_speedup": round(estimate / seconds, 1),
    }))
    if keep is not None:
        shutil.move(str(out), keep)
    else:
        shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
