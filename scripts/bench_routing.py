"""Routing across vLLM replicas: does a router keep the rows of an S-RT cell on the replica that cached their haystack?

Run it with the vLLM environment's Python (``scripts/install_vllm_env.sh``, which also installs ``vllm-router``)::

    ~/.cache/needlebench/vllm-venv/bin/python scripts/bench_routing.py --quick --out routing.md

(``--quick``: 20 rows, five setups, about 12 minutes on 2 shared CPU cores with SmolLM2-135M; measured 2026-11-26:
one replica 0.211, round_robin 0.099, cache_aware with the router's defaults 0.174-0.193 from run to run,
cache_aware with ``--cache-threshold 0.2`` 0.211 with the rows split 9 / 11, ``--data-parallel-size 2`` 0.112.)

The rows of one (length, repeat) cell of an S-RT config share their haystack up to the shallower needle, so a
replica that prefilled one row of a cell finds most of the next row's prompt in its prefix cache; a router that
scatters a cell over the replicas makes every replica prefill the haystack again. The same rows (``single_en_4k``,
built on the fly from the pinned seed, or ``--data-dir``) go through ``needlebench eval run --model
local-completions`` (what a user runs: lm-eval formats the prompts, chat template applied, and keeps
``--concurrency`` requests in flight) to each setup, with fresh servers (empty prefix caches) every time:

- ``one``: one ``vllm serve`` replica (the reference hit rate H0);
- ``round_robin``, ``cache_aware_default``, ``consistent_hash``: two replicas behind ``vllm-router --policy P``
  with the router's defaults (``consistent_hash`` with no routing key: lm-eval's API models send one fixed
  ``header`` dict, not settable in ``--model_args``, so a per-cell ``X-Session-ID`` cannot be set; the router then
  hashes the request body, a row-by-row spread: not in ``--quick``);
- ``cache_aware``: the same with ``--cache-threshold 0.2`` (``--tuned-router-args``), which keeps a cell together;
- ``dp2``: ``vllm serve --data-parallel-size 2`` (vLLM's internal load balancing), if it starts on this build.

Every replica runs ``--enable-prefix-caching``, greedy, ``max_gen_toks`` 16. Before and after a run the script
reads every replica's ``/metrics`` (vLLM's Prometheus counters ``vllm:request_success``,
``vllm:prefix_cache_queries`` / ``vllm:prefix_cache_hits`` in tokens, ``vllm:prompt_tokens_by_source`` with
``local_compute`` / ``local_cache_hit``) and prints per setup: requests per replica, the hit rate (hits / queries),
prompt tokens computed and taken from the cache, wall time. Last line::

    cache_aware: hit rate H vs one replica H0 (ratio R); round_robin: H2

Progress goes to stderr; ``--out FILE`` also writes the tables as Markdown. Servers run in their own process
groups and are stopped (the whole group) after each setup, on an error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONFIG = "single_en_4k"
TASK = f"needlebench_{CONFIG}"
SERVED_NAME = "smollm2"
WINDOW = 8192
MAX_GEN_TOKS = 16
SETUPS = ("one", "round_robin", "cache_aware_default", "cache_aware", "consistent_hash", "dp2")
QUICK_SETUPS = ("one", "round_robin", "cache_aware_default", "cache_aware", "dp2")
#: vllm-router's cache_aware sends a request to the replica whose routed prompts share the longest prefix with it
#: when that prefix is over ``--cache-threshold`` of the prompt (default 0.3), else to the replica with the smallest
#: prefix tree (vllm-project/router ``src/policies/cache_aware.rs``). A row of an S-RT cell shares its cell's
#: haystack up to the shallower needle, so rows with needles at 26% of the haystack fall under 0.3 and are
#: scattered; the threshold that keeps a cell together is just above what rows of *different* cells share (the
#: task's instruction preamble: ~13% of a 1k-token prompt here, well under 1% at 128k). ``--cache-threshold 0.2``
#: keeps every row deeper than 20% with its cell at 1k-4k tokens.
TUNED_ROUTER_ARGS = "--cache-threshold 0.2"
#: The prompt-token counters by source (vLLM v1 ``vllm/v1/metrics/loggers.py``): computed here, or taken from
#: this replica's prefix cache.
COMPUTED, CACHED = "local_compute", "local_cache_hit"


def log(message: str) -> None:
    print(f"[bench_routing {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out.update(
        PYTHONPATH=str(REPO / "generator"),  # this checkout, whatever the venv's editable install points to
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB per replica: ~23k tokens of SmolLM2-135M in float32, a few cells
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return out


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Group:
    """Processes started by this script, each in its own session (process group), stopped as groups."""

    processes: list[tuple[subprocess.Popen, Path]] = field(default_factory=list)

    def start(self, command: list[str], log_path: Path) -> subprocess.Popen:
        handle = log_path.open("w", encoding="utf-8")
        process = subprocess.Popen(command, env=env(), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        handle.close()
        self.processes.append((process, log_path))
        return process

    def stop(self) -> None:
        for process, _ in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in self.processes:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            try:  # children left in the group (vLLM's engine core processes)
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes.clear()

    def wait_ready(self, url: str, process: subprocess.Popen, log_path: Path, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                tail = log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
                raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout:.0f} s")
            time.sleep(1)


def serve_command(model_dir: Path, port: int, extra: list[str]) -> list[str]:
    return [
        str(BIN / "vllm"), "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", SERVED_NAME, "--max-model-len", str(WINDOW), "--dtype", "float32",
        "--enforce-eager", "--enable-prefix-caching", "--seed", "0", *extra,
    ]  # fmt: skip


def router_command(workers: list[str], port: int, policy: str, extra: list[str]) -> list[str]:
    return [
        str(BIN / "vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *workers,
        "--policy", policy, *extra,
    ]  # fmt: skip


def read_metrics(url: str) -> dict[tuple[str, str], float]:
    """The counters this bench reads, summed per (name, engine label): a DP server reports one engine per rank."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    from prometheus_client.parser import text_string_to_metric_families  # deferred: the vLLM venv has it

    out: dict[tuple[str, str], float] = {}
    wanted = {
        "vllm:request_success_total": "requests",
        "vllm:prefix_cache_queries_total": "queries",
        "vllm:prefix_cache_hits_total": "hits",
        "vllm:prompt_tokens_total": "prompt",
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            engine = sample.labels.get("engine", "0")
            if sample.name in wanted:
                key = (wanted[sample.name], engine)
            elif sample.name == "vllm:prompt_tokens_by_source_total":
                key = (sample.labels.get("source", "?"), engine)
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


@dataclass
class Result:
    setup: str
    command: str
    replicas: list[dict[str, float]] = field(default_factory=list)
    wall: float = 0.0
    error: str = ""

    def total(self, key: str) -> float:
        return sum(replica.get(key, 0.0) for replica in self.replicas)

    @property
    def hit_rate(self) -> float:
        queries = self.total("queries")
        return self.total("hits") / queries if queries else 0.0


def select_rows(data_dir: Path, lengths: list[int], repeats: list[int], depths: list[int]) -> list[int]:
    """Indices (lm-eval ``--samples``) of the chosen rows of ``single_en_4k`` in the shipped order."""
    import pyarrow.parquet as pq  # deferred: only the vLLM venv runs this script

    files = sorted((data_dir / "data" / CONFIG).glob("*.parquet"))
    rows = [row for path in files for row in pq.read_table(path, columns=["id"]).to_pylist()]
    wanted = {f"{CONFIG}-L{length}-d{depth}-r{repeat}" for length in lengths for repeat in repeats for depth in depths}
    chosen = [index for index, row in enumerate(rows) if row["id"] in wanted]
    if len(chosen) != len(wanted):
        found = {rows[index]["id"] for index in chosen}
        raise SystemExit(f"bench_routing: rows not in {CONFIG}: {sorted(wanted - found)[:5]}")
    return chosen


def run_eval(endpoint: str, model_dir: Path, data_dir: Path, samples: list[int], concurrency: int, out: Path) -> None:
    model_args = (
        f"model={SERVED_NAME},base_url={endpoint}/v1/completions,tokenizer={model_dir},tokenizer_backend=huggingface,"
        f"max_length={WINDOW},num_concurrent={concurrency},seed=0,timeout=600"
    )
    command = [
        str(BIN / "needlebench"), "eval", "run", "--model", "local-completions", "--model_args", model_args,
        "--include_path", str(REPO / "harness_tasks"), "--tasks", TASK, "--samples", json.dumps({TASK: samples}),
        "--metadata", json.dumps({"data_dir": str(data_dir)}), "--apply_chat_template",
        "--gen_kwargs", f"max_gen_toks={MAX_GEN_TOKS}", "--output_path", str(out / "results"),
    ]  # fmt: skip
    with (out / "eval.log").open("w", encoding="utf-8") as handle:
        done = subprocess.run(command, env=env(), stdout=handle, stderr=subprocess.STDOUT, timeout=3600)
    if done.returncode != 0:
        tail = (out / "eval.log").read_text(encoding="utf-8", errors="replace")[-3000:]
        raise RuntimeError(f"needlebench eval run exited with {done.returncode}:\n{tail}")


def run_setup(setup: str, args: argparse.Namespace, samples: list[int], work: Path) -> Result:
    out = work / setup
    out.mkdir()
    group = Group()
    try:
        if setup in ("one", "dp2"):
            port = free_port()
            extra = ["--data-parallel-size", "2"] if setup == "dp2" else []
            command = serve_command(args.model_dir, port, extra)
            process = group.start(command, out / "serve.log")
            endpoint = f"http://127.0.0.1:{port}"
            log(f"{setup}: starting {' '.join(command[1:3])} ... {' '.join(extra)}")
            group.wait_ready(f"{endpoint}/v1/models", process, out / "serve.log")
            replicas = [endpoint]
            shown = " ".join(["vllm serve MODEL", *command[3:]])
        else:
            ports = [free_port() for _ in range(2)]
            started = [
                (group.start(serve_command(args.model_dir, port, []), out / f"serve{i}.log"), port, i)
                for i, port in enumerate(ports)
            ]
            log(f"{setup}: starting two vllm serve replicas side by side")
            for process, port, i in started:
                group.wait_ready(f"http://127.0.0.1:{port}/v1/models", process, out / f"serve{i}.log")
            replicas = [f"http://127.0.0.1:{port}" for port in ports]
            router_port = free_port()
            policy, extra = setup, list(args.router_args)
            if setup == "cache_aware_default":
                policy = "cache_aware"
            elif setup == "cache_aware":
                extra += args.tuned_router_args
            command = router_command(replicas, router_port, policy, extra)
            process = group.start(command, out / "router.log")
            endpoint = f"http://127.0.0.1:{router_port}"
            group.wait_ready(f"{endpoint}/health", process, out / "router.log", timeout=120)
            shown = " ".join(["vllm-router", *command[1:]])
        before = [read_metrics(url) for url in replicas]
        log(f"{setup}: {len(samples)} rows, {args.concurrency} in flight, through {endpoint}")
        start = time.monotonic()
        run_eval(endpoint, args.model_dir, args.data_dir, samples, args.concurrency, out)
        wall = time.monotonic() - start
        after = [read_metrics(url) for url in replicas]
        result = Result(setup, shown, wall=wall)
        for old, new in zip(before, after):
            for engine in sorted({engine for _, engine in new}):
                result.replicas.append(
                    {name: new[(name, eng)] - old.get((name, eng), 0.0) for name, eng in new if eng == engine}
                )
        log(f"{setup}: done in {wall:.0f} s, hit rate {result.hit_rate:.3f}")
        return result
    except RuntimeError as error:
        log(f"{setup}: failed: {str(error).splitlines()[0]}")
        return Result(setup, "", error=str(error))
    finally:
        group.stop()


def error_line(error: str) -> str:
    """The line of a failed setup's log that says why (the last ``Error`` line), for the table."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "failed"


def tables(results: list[Result]) -> list[str]:
    lines = [
        "| setup | requests per replica | prefix-cache hit rate | prompt tokens computed | prompt tokens cached "
        "| wall time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.error:
            lines.append(f"| {r.setup} | did not run: {error_line(r.error)} | | | | |")
            continue
        per = " / ".join(f"{replica.get('requests', 0):.0f}" for replica in r.replicas)
        lines.append(
            f"| {r.setup} | {per} | {r.hit_rate:.3f} ({r.total('hits'):.0f}/{r.total('queries'):.0f}) "
            f"| {r.total(COMPUTED):.0f} | {r.total(CACHED):.0f} | {r.wall:.0f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 cells x 5 depths (lengths 1000/2000, repeats 0/1)")
    parser.add_argument("--data-dir", type=Path, help="a built dataset folder holding single_en_4k")
    parser.add_argument("--model-dir", type=Path, help="SmolLM2-135M-Instruct folder (default: the tests' one)")
    parser.add_argument(
        "--setups", help=f"comma-separated, of {', '.join(SETUPS)} (default: all; --quick: no consistent_hash)"
    )
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight (lm-eval num_concurrent)")
    parser.add_argument(
        "--router-args", default="", help="extra vllm-router options for every router, e.g. '--log-level debug'"
    )
    parser.add_argument(
        "--tuned-router-args", default=TUNED_ROUTER_ARGS, help=f"the cache_aware setup's options ({TUNED_ROUTER_ARGS})"
    )
    parser.add_argument("--out", type=Path, help="also write the tables as Markdown here")
    parser.add_argument("--keep", type=Path, help="keep the servers' and runs' logs in this (new) folder")
    args = parser.parse_args()
    args.router_args = args.router_args.split()
    args.tuned_router_args = args.tuned_router_args.split()
    if args.setups is None:
        args.setups = ",".join(QUICK_SETUPS if args.quick else SETUPS)
    setups = [name.strip() for name in args.setups.split(",") if name.strip()]
    unknown = sorted(set(setups) - set(SETUPS))
    if unknown:
        parser.error(f"unknown setup(s) {', '.join(unknown)}; choose from {', '.join(SETUPS)}")
    if args.model_dir is None:
        sys.path.insert(0, str(REPO / "tests"))
        from support.smollm import smollm_dir  # deferred: the tests' model helper, only when no --model-dir

        args.model_dir = smollm_dir()
    if args.quick:
        lengths, repeats, depths = [1000, 2000], [0, 1], [0, 26, 52, 78, 100]
    else:
        lengths, repeats, depths = [1000, 2000, 3000, 4000], [0, 1], [0, 10, 21, 31, 42, 52, 63, 73, 84, 100]
    with tempfile.TemporaryDirectory(prefix="bench-routing-") as tmp:
        work = Path(tmp)
        if args.keep:
            args.keep.mkdir(parents=True)
            work = args.keep
        if args.data_dir is None:
            sys.path.insert(0, str(REPO / "generator"))
            from needlebench.dataset.build import build_dataset  # deferred: only when no --data-dir is given
            from needlebench.dataset.options import BuildOptions  # deferred: as above

            args.data_dir = work / "needlebench"
            log(f"building {CONFIG} into {args.data_dir}")
            build_dataset([CONFIG], args.data_dir, BuildOptions(), progress=False)
        samples = select_rows(args.data_dir, lengths, repeats, depths)
        log(f"{len(samples)} rows: lengths {lengths}, repeats {repeats}, depths {depths}")
        results = [run_setup(setup, args, samples, work) for setup in setups]
    lines = [
        f"{len(samples)} rows of {CONFIG} (lengths {lengths}, repeats {repeats}, depths {depths}), "
        f"{args.concurrency} in flight, max_gen_toks {MAX_GEN_TOKS}, fresh servers per setup",
        "",
        *tables(results),
        "",
    ]
    for r in results:
        if r.command:
            lines.append(f"- {r.setup}: `{r.command}`")
    by_name = {r.setup: r for r in results if not r.error}
    rr = f"{by_name['round_robin'].hit_rate:.3f}" if "round_robin" in by_name else "n/a"

    def summary(name: str) -> str:
        if name not in by_name or "one" not in by_name:
            return "n/a"
        h, h0 = by_name[name].hit_rate, by_name["one"].hit_rate
        return f"hit rate {h:.3f} vs one replica {h0:.3f} (ratio {h / h0 if h0 else float('nan'):.2f})"

    lines += [
        "",
        f"cache_aware with vllm-router's defaults: {summary('cache_aware_default')}",
        f"cache_aware is `{' '.join(args.tuned_router_args)}`:",
        f"cache_aware: {summary('cache_aware')}; round_robin: {rr}",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
