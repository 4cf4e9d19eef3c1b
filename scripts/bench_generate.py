"""Benchmark whole `needlebench` CLI processes against the reference algorithm, measured in the same run.

    python scripts/bench_generate.py                      # every target below
    python scripts/bench_generate.py --target custom128k  # one of: custom128k, 1000k, cli

Targets (each timed as a whole CLI process, `python -c "from needlebench.cli import main; main()" ...`, with
the peak RSS of its largest process (workers included) beside it; the token cache and the sentence tables are
warmed first, and needlebench's bytecode compiled as `pip install` does; a build is run `--builds` times, 3 by
default, each followed by a timing of the reference, and the medians are compared, since wall times on a shared
virtual machine swing by a quarter between runs):

* ``custom128k``: `needlebench build single_en_128k --haystack-en FILE`, where FILE is a user's haystack of about
  1.76 MB of English text, written by this script (the first books of the default English corpus, as a JSONL file
  of documents like the reference's PaulGrahamEssays.jsonl). Goal: >= 30x the reference.
* ``1000k``: `needlebench build 'single_*_1000k'` with the default codec (zstd). Goal: >= 40x the reference.
* ``cli``: `needlebench list` and `needlebench --help` (median of several runs; goal under 0.5 s), beside a bare
  `python -c pass` on the same machine.
* ``hftok128k`` (only with ``--hf-tokenizer DIR``): `needlebench build single_en_128k` counted in cl100k_base and
  with `--tokenizer hf:DIR`, one after the other in this run: both wall times, their ratio and peak RSS.

The reference is OpenCompass' NeedleBench v1 single-needle loader (``open-compass/opencompass:
opencompass/datasets/needlebench/origin.py``), one call per (length, depth) cell, emulated step by step (see
`reference_cell_seconds`): the cell reads its haystack JSONL file, and
for every repeat shuffles the documents, reads the needles file for its needle, re-encodes documents until the
target is reached, inserts the needle tokens at the depth's token offset, decodes and frames the prompt; the cell's
rows end in a `datasets.Dataset`. Its inputs are the same haystack and the built-in needle bank written as the
reference's JSONL files. `--reference-cells` whole cells (all repeats) are timed per length and their mean time
stands for every cell of that length. Both figures come from this run, taken in turn. On a busy machine wall times
swing with the load of the moment, so the CPU ratio is printed too (CPU seconds of the whole CLI process tree,
workers included, against the reference's CPU seconds): it does not credit the build's use of both cores.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

import needlebench
from needlebench.dataset.manifest import read_manifest
from needlebench.dataset.options import BuildOptions
from needlebench.sources.corpus import default_english
from needlebench.sources.haystacks import corpus_for
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.grid import match_configs
from needlebench.tasks.haystack import effective_buffer, tokenized_corpus
from needlebench.tasks.needle_bank import needle_bank
from needlebench.tasks.needles import LANGUAGE_NAMES
from needlebench.tasks.prompts import frame_parts
from needlebench.tasks.sentence_table import sentence_points

console = Console()
TARGETS = ("custom128k", "1000k", "cli", "hftok128k")
#: Size of the custom haystack file (bytes of UTF-8 text, about the size of the reference's English file).
CUSTOM_HAYSTACK_BYTES = 1_760_000
CLI = [sys.executable, "-c", "from needlebench.cli import main; main()"]


#: A small launcher that runs the command and reports its wall time and rusage. The benchmark process itself is
#: large, and a child forked from it starts with that RSS as its high-water mark (Linux keeps it across exec),
#: so the command is started from this small process instead.
_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime,
                  "status": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}))
"""


def compile_bytecode() -> None:
    """Compile needlebench's modules to bytecode, as `pip install` does for a wheel, so the timed processes import
    as an installed needlebench does. (Without it, a machine that sets PYTHONDONTWRITEBYTECODE, as this one does,
    compiles ~30 modules from source in every process: 0.12-0.15 s of each build.)"""
    import compileall

    compileall.compile_dir(Path(needlebench.__file__).parent, quiet=1)


def run_cli(args: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, workers included) and peak RSS (MiB, of the largest process of
    the tree: Linux reports the maximum over the child and its waited-for descendants) of one CLI process; a
    failure stops the benchmark."""
    launched = subprocess.run([sys.executable, "-c", _LAUNCHER, *CLI, *args], capture_output=True, check=False)
    report = json.loads(launched.stdout.decode().strip().splitlines()[-1])
    if report["status"] != 0:
        raise SystemExit(f"needlebench {' '.join(args)} failed ({report['status']}):\n{launched.stderr.decode()}")
    return report["seconds"], report["cpu"], report["maxrss_kib"] / 1024


def write_custom_haystack(path: Path) -> Path:
    """A user's haystack file, reproducibly: the first books of the default English corpus, one JSON document a
    line, until about CUSTOM_HAYSTACK_BYTES of text."""

    size = 0
    with open(path, "w", encoding="utf-8") as handle:
        for document in default_english().documents:
            if size >= CUSTOM_HAYSTACK_BYTES:
                break
            handle.write(json.dumps({"text": document}, ensure_ascii=False) + "\n")
            size += len(document.encode("utf-8"))
    return path


class ReferenceInputs:
    """The reference loader's input files for one build: its haystack as a JSONL file of documents (the user's own
    file for a custom haystack, else the default corpus written out the same way) and a ``needles.jsonl`` of the
    built-in needle bank (every language, the reference's record fields)."""

    def __init__(self, options, folder: Path) -> None:
        self.options, self.folder, self._haystacks = options, folder, {}

        self.needles = folder / "needles.jsonl"
        with open(self.needles, "w", encoding="utf-8") as handle:
            for language in ("en", "zh"):
                records = (needle.as_record() for needle in needle_bank(language))
                handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)

    def haystack(self, language: str) -> Path:
        given = self.options.haystack(language)
        if given and Path(given).suffix == ".jsonl":
            return Path(given)
        if language not in self._haystacks:
            path = self._haystacks[language] = self.folder / f"haystack_{language}.jsonl"
            documents = corpus_for(given, language).documents
            with open(path, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps({"text": document}, ensure_ascii=False) + "\n" for document in documents)
        return self._haystacks[language]


def reference_cell_seconds(
    spec, options, inputs: ReferenceInputs, length: int, depth: int, encoding
) -> tuple[float, float]:
    """Wall and CPU seconds of one (length, depth) cell of `spec` built the reference's way: one call of
    OpenCompass' v1 single-needle loader, step by step as ``open-compass/opencompass:
    opencompass/datasets/needlebench/origin.py`` does it.

    The cell reads and parses its haystack file, then for each repeat ``counter``: ``random.seed(counter)`` and
    an in-place shuffle of the documents (cumulative), the needle record of the language drawn from the needles
    file (read again for each repeat, every line parsed), the documents encoded one by one (``encode``, with its
    special-token check) until the target is reached (cycled when the corpus is too short, like our default
    mode), the needle's tokens inserted at ``int(len * depth / 100)``, the whole decoded and framed. The cell
    ends with its rows in a ``datasets.Dataset``."""
    import random

    from datasets import Dataset

    language = LANGUAGE_NAMES[spec.language]
    buffer = effective_buffer(spec, length, options.settings_for(spec))
    started, cpu = time.perf_counter(), time.process_time()
    with open(inputs.haystack(spec.language), encoding="utf-8") as handle:
        lines = [json.loads(line.strip()) for line in handle]
    data: dict[str, list[str]] = {"prompt": [], "answer": []}
    for counter in range(spec.repeats):
        random.seed(counter)
        random.shuffle(lines)
        with open(inputs.needles, encoding="utf-8") as handle:
            records = [json.loads(line.strip()) for line in handle if json.loads(line.strip())["language"] == language]
        random.seed(counter)
        record = random.choice(records)
        needle = "\n" + record["needle"] + "\n"
        needle_tokens = encoding.encode(needle)
        target = max(0, length - buffer - len(needle_tokens))
        tokens: list[int] = []
        position = 0
        while len(tokens) < target:
            tokens.extend(encoding.encode(lines[position % len(lines)]["text"]))
            position += 1
        tokens = tokens[:target]
        point = int(len(tokens) * (depth / 100))
        context = encoding.decode(tokens[:point] + needle_tokens + tokens[point:])
        before, after = frame_parts("single", spec.language, record["retrieval_question"])
        data["prompt"].append(before + context + after)
        data["answer"].append(needle + "*" + record["arg2"])
    Dataset.from_dict(data)
    return time.perf_counter() - started, time.process_time() - cpu


def reference_seconds(specs, options, cells: int) -> tuple[float, float, int, float]:
    """Extrapolated reference wall and CPU time for all rows of `specs`, the samples (rows) timed and their
    seconds: `cells` whole (length, depth) cells are timed per length (depths spread over the grid), and their
    mean time stands for every cell of that length."""
    import datasets  # imported once before timing: the reference process imports it once too

    del datasets
    encoding = get_tokenizer().encoding
    estimate = cpu_estimate = timed_seconds = 0.0
    timed = 0
    with tempfile.TemporaryDirectory(prefix="nb-bench-reference-") as folder:
        inputs = ReferenceInputs(options, Path(folder))
        for spec in specs:
            depths = spec.depths or (50,)
            for length in spec.lengths:
                chosen = [depths[(i * len(depths)) // cells] for i in range(min(cells, len(depths)))]
                times = [reference_cell_seconds(spec, options, inputs, length, depth, encoding) for depth in chosen]
                timed += len(times) * spec.repeats
                timed_seconds += sum(wall for wall, _ in times)
                estimate += float(np.mean([wall for wall, _ in times])) * len(depths)
                cpu_estimate += float(np.mean([cpu for _, cpu in times])) * len(depths)
    return estimate, cpu_estimate, timed, timed_seconds


def warm_cache(specs, options) -> None:
    """Tokenise the haystacks of `specs` into the token cache, with their sentence tables (the targets are measured
    with a warm cache)."""

    for spec in specs:
        sentence_points(tokenized_corpus(spec, options.settings_for(spec)))


def bench_build(
    name: str, configs: list[str], extra: list[str], options, samples: int, num_proc: int, cold: bool, builds: int = 3
) -> dict:

    specs = match_configs(configs)
    if cold:  # the build starts from an empty token cache (its first tokenisation is timed too)
        os.environ["NEEDLEBENCH_CACHE"] = tempfile.mkdtemp(prefix="nb-bench-cache-")
    else:
        warm_cache(specs, options)
    extra = [*extra, "--compression", options.compression]
    runs, references = [], []
    for _ in range(1 if cold else builds):  # a cold build is timed once (later runs would find the cache warm)
        out = Path(tempfile.mkdtemp(prefix="nb-bench-")) / "data"
        try:
            runs.append(run_cli(["build", *configs, *extra, "--out", str(out), "--num-proc", str(num_proc)]))
            manifest = read_manifest(out)
            rows = sum(manifest["configs"][s.name]["rows"] for s in specs)
            tokens = sum(manifest["configs"][s.name]["haystack_tokens"] for s in specs)
            size = sum(p.stat().st_size for p in out.rglob("*.parquet"))
        finally:
            shutil.rmtree(out.parent, ignore_errors=True)
        # the reference right after each build: the machine's speed drifts by a fifth over a minute, so the two
        # are measured in turn and their medians compared
        references.append(reference_seconds(specs, options, samples))
    seconds = statistics.median(run[0] for run in runs)
    cpu = statistics.median(run[1] for run in runs)
    rss = max(run[2] for run in runs)
    reference = statistics.median(ref[0] for ref in references)
    reference_cpu = statistics.median(ref[1] for ref in references)
    timed, timed_seconds = sum(ref[2] for ref in references), sum(ref[3] for ref in references)
    return {
        "target": name,
        "command": f"needlebench build {' '.join(configs + extra)} --out DIR --num-proc {num_proc}",
        "rows": rows,
        "context_tokens": tokens,
        "parquet_mib": round(size / 2**20),
        "seconds": round(seconds, 2),
        "builds": len(runs),
        "min_seconds": round(min(run[0] for run in runs), 2),
        "peak_rss_mib": round(rss),
        "reference_seconds": round(reference, 1),
        "reference_runs": [round(ref[0], 1) for ref in references],
        "build_runs": [round(run[0], 2) for run in runs],
        "reference_samples": timed,
        "reference_sampled_seconds": round(timed_seconds, 1),
        "ratio": round(reference / seconds, 1),
        "cpu_seconds": round(cpu, 2),
        "reference_cpu_seconds": round(reference_cpu, 1),
        "cpu_ratio": round(reference_cpu / cpu, 1),
    }


def bench_tokenizers(tokenizer_dir: str, num_proc: int, cold: bool, compression: str) -> list[dict]:
    """`single_en_128k` counted in cl100k_base, then in the Hugging Face tokenizer at `tokenizer_dir`."""

    specs = match_configs(["single_en_128k"])
    results = []
    for tokenizer in ("cl100k_base", f"hf:{tokenizer_dir}"):
        if cold:
            os.environ["NEEDLEBENCH_CACHE"] = tempfile.mkdtemp(prefix="nb-bench-cache-")
        else:
            warm_cache(specs, BuildOptions(tokenizer=tokenizer, compression=compression))
        out = Path(tempfile.mkdtemp(prefix="nb-bench-")) / "data"
        extra = ["--tokenizer", tokenizer, "--compression", compression]
        try:
            seconds, cpu, rss = run_cli(
                ["build", "single_en_128k", *extra, "--out", str(out), "--num-proc", str(num_proc)]
            )
            manifest = read_manifest(out)
        finally:
            shutil.rmtree(out.parent, ignore_errors=True)
        results.append(
            {
                "target": f"hftok128k {tokenizer.split('/')[-1]}",
                "command": f"needlebench build single_en_128k {' '.join(extra)} --out DIR --num-proc {num_proc}",
                "tokenizer": manifest["recipe"]["tokenizer"],
                "rows": manifest["configs"]["single_en_128k"]["rows"],
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
                "peak_rss_mib": round(rss),
            }
        )
    results[1]["ratio_to_cl100k"] = round(results[1]["seconds"] / results[0]["seconds"], 2)
    results[1]["cpu_ratio_to_cl100k"] = round(results[1]["cpu_seconds"] / results[0]["cpu_seconds"], 2)
    return results


def bench_cli(repeats: int) -> list[dict]:
    results = []
    for label, args in (
        ("python -c pass (interpreter alone)", None),
        ("needlebench list", ["list"]),
        ("needlebench --help", ["--help"]),
    ):
        times, peaks = [], []
        for _ in range(repeats):
            if args is None:
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], check=True)
                times.append(time.perf_counter() - started)
                peaks.append(0.0)
            else:
                seconds, _, rss = run_cli(args)
                times.append(seconds)
                peaks.append(rss)
        results.append(
            {
                "target": label,
                "seconds": round(statistics.median(times), 3),
                "min_seconds": round(min(times), 3),
                "peak_rss_mib": round(max(peaks)),
            }
        )
    return results


def main(
    target: Annotated[
        list[str] | None, typer.Option(help=f"Targets to run (default: all): {', '.join(TARGETS)}.")
    ] = None,
    num_proc: Annotated[int, typer.Option(help="Worker processes of the builds.")] = 2,
    reference_cells: Annotated[
        int, typer.Option(help="Reference (length, depth) cells timed per length, each with all its repeats.")
    ] = 1,
    repeats: Annotated[int, typer.Option(help="Runs of each quick command (the median is shown).")] = 7,
    builds: Annotated[
        int, typer.Option(help="Runs of each timed build (the median is shown; the machine's noise).")
    ] = 3,
    compression: Annotated[str, typer.Option(help="Parquet codec of the builds: zstd, snappy or none.")] = "zstd",
    cold: Annotated[
        bool, typer.Option(help="Build with an empty token cache (time the first tokenisation too).")
    ] = False,
    hf_tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer folder for the hftok128k target (e.g. SmolLM2's).")
    ] = None,
) -> None:

    chosen = target or [name for name in TARGETS if name != "hftok128k" or hf_tokenizer]
    if "hftok128k" in chosen and not hf_tokenizer:
        raise typer.BadParameter("target hftok128k needs --hf-tokenizer DIR (a local tokenizer folder)")
    unknown = sorted(set(chosen) - set(TARGETS))
    if unknown:
        raise typer.BadParameter(f"unknown target(s) {unknown}; allowed: {', '.join(TARGETS)}")
    compile_bytecode()
    results: list[dict] = []
    if "custom128k" in chosen:
        folder = Path(tempfile.mkdtemp(prefix="nb-bench-haystack-"))
        try:
            haystack = write_custom_haystack(folder / "my_haystack.jsonl")
            options = BuildOptions(haystack_en=str(haystack), compression=compression)
            result = bench_build(
                "custom128k",
                ["single_en_128k"],
                ["--haystack-en", str(haystack)],
                options,
                reference_cells,
                num_proc,
                cold,
                builds,
            )
            result["haystack_bytes"] = haystack.stat().st_size
            results.append(result)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if "1000k" in chosen:
        options = BuildOptions(compression=compression)
        results.append(bench_build("1000k", ["single_*_1000k"], [], options, reference_cells, num_proc, cold, builds))
    if "cli" in chosen:
        results.extend(bench_cli(repeats))
    if "hftok128k" in chosen:
        results.extend(bench_tokenizers(hf_tokenizer, num_proc, cold, compression))

    cache = "cold" if cold else "warm"
    table = Table(
        "target",
        "rows",
        "wall time",
        "peak RSS",
        "reference (extrapolated)",
        "ratio",
        "CPU ratio",
        title=(f"needlebench CLI processes vs the reference algorithm ({os.cpu_count()} cores, {cache} token cache)"),
    )
    for result in results:
        if "tokenizer" in result:
            ratio = f"{result['ratio_to_cl100k']:.2f}x the cl100k time" if "ratio_to_cl100k" in result else ""
            table.add_row(
                result["command"],
                f"{result['rows']:,}",
                f"{result['seconds']:.2f} s",
                f"{result['peak_rss_mib']:,} MiB",
                "",
                ratio,
                f"{result['cpu_seconds']:.1f} s CPU",
            )
        elif "ratio" in result:
            table.add_row(
                result["command"],
                f"{result['rows']:,}",
                f"{result['seconds']:.2f} s",
                f"{result['peak_rss_mib']:,} MiB",
                f"{result['reference_seconds']:,.1f} s ({result['reference_samples']} samples)",
                f"{result['ratio']:.1f}x",
                f"{result['cpu_ratio']:.1f}x ({result['cpu_seconds']:.1f} s CPU)",
            )
        else:
            table.add_row(
                result["target"],
                "",
                f"{result['seconds']:.3f} s (median; min {result['min_seconds']:.3f})",
                f"{result['peak_rss_mib']:,} MiB" if result["peak_rss_mib"] else "",
                "",
                "",
                "",
            )
    console.print(table)
    console.print_json(json.dumps(results))


if __name__ == "__main__":
    typer.run(main)
