"""Fingerprint what needlebench produces, to prove a refactor changes no behaviour.

Builds a fixed set of configs in every build mode (default, ``--compat opencompass``, ``--compat counting-stars``,
the example experiments), evaluates the default build with the oracle model through ``needlebench eval`` and
writes one JSON file: the sha256 of every built file and of the oracle's lm-eval results (the ``results``,
``groups``, ``n-samples``, ``versions`` and ``higher-is-better`` blocks) and logged samples (each line without
lm-eval's timing fields). Run it before and after a change and compare the two files::

    python scripts/fingerprint.py --work /tmp/fp-before --out before.json
    ... change the code ...
    python scripts/fingerprint.py --work /tmp/fp-after --out after.json
    python scripts/fingerprint.py --compare before.json after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

#: (name, build arguments): the configs the refactor issue names (every 4k config, ATC, Counting-Stars 128k,
#: the v2 4k configs) in the default build, and the other modes over the configs they apply to.
BUILDS = {
    "default": ["*_4k", "atc_*", "v2_atc_*", "counting_stars_*_128k*"],
    "opencompass": ["--compat", "opencompass", "*_4k", "atc_*", "v2_atc_*"],
    "counting_stars_compat": ["--compat", "counting-stars", "counting_stars_*_128k"],
    "experiment_niah": ["--experiment", "scripts/experiments/inspect_niah.yaml"],
    "experiment_cdme": ["--experiment", "scripts/experiments/cdme_zh_8k.yaml"],
    "experiment_multi": ["--experiment", "scripts/experiments/cdme_multi_needle_zh.yaml"],
}
#: Oracle evaluation of the default build: rows per task.
ORACLE_LIMIT = "30"
#: Fields lm-eval fills with run-dependent values.
_VOLATILE = {"date", "start_time", "end_time", "total_evaluation_time_seconds", "pretty_env_info", "config"}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): _sha(path.read_bytes()) for path in sorted(folder.rglob("*")) if path.is_file()
    }


def _builds(work: Path, repo: Path) -> dict[str, dict[str, str]]:
    hashes = {}
    for name, args in BUILDS.items():
        out = work / name
        shutil.rmtree(out, ignore_errors=True)
        cmd = ["needlebench", "build", *args, "--out", str(out), "--num-proc", "2"]
        subprocess.run(cmd, check=True, cwd=repo, stdout=subprocess.DEVNULL)
        hashes[name] = _files(out)
        print(f"built {name}: {len(hashes[name])} files", file=sys.stderr)
    return hashes


def _oracle(work: Path, repo: Path) -> dict[str, str]:
    data = work / "default"
    from needlebench.evaluation.harness import (
        tasks as harness,
    )  # deferred: --compare reads two JSON files, imports no needlebench
    from needlebench.tasks.grid import registry  # deferred: --compare reads two JSON files, imports no needlebench

    built = {path.name for path in (data / "data").iterdir() if path.is_dir()}
    tasks = ",".join(harness.task_name(name) for name in registry() if name in built)
    output = work / "oracle"
    shutil.rmtree(output, ignore_errors=True)
    metadata = json.dumps({"data_dir": str(data)})
    cmd = ["needlebench", "eval", "run", "--model", "needlebench-oracle", "--tasks", tasks, "--metadata", metadata]
    cmd += ["--limit", ORACLE_LIMIT, "--output_path", str(output), "--log_samples"]
    subprocess.run(cmd, check=True, cwd=repo, stdout=subprocess.DEVNULL)
    hashes = {}
    for path in sorted(output.rglob("*.json*")):
        if path.name.startswith("results_"):
            results = json.loads(path.read_text(encoding="utf-8"))
            for key in ("results", "groups", "n-samples", "versions", "higher_is_better"):
                hashes[f"results:{key}"] = _sha(json.dumps(results.get(key), sort_keys=True).encode())
        elif path.name.startswith("samples_"):
            task = path.name.rsplit("_", 1)[0]
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            hashes[task] = _sha(json.dumps(lines, sort_keys=True).encode())
    print(f"oracle: {len(hashes)} fingerprints", file=sys.stderr)
    return hashes


def _compare(before: Path, after: Path) -> int:
    old = json.loads(before.read_text(encoding="utf-8"))
    new = json.loads(after.read_text(encoding="utf-8"))
    differences = 0
    for group in sorted(set(old) | set(new)):
        left, right = old.get(group, {}), new.get(group, {})
        for name in sorted(set(left) | set(right)):
            if left.get(name) != right.get(name):
                differences += 1
                print(f"differs: {group} {name}")
        print(f"{group}: {len(left)} before, {len(right)} after")
    print("identical" if differences == 0 else f"{differences} differences")
    return 1 if differences else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, help="folder for the builds and the oracle run")
    parser.add_argument("--out", type=Path, help="fingerprint JSON to write")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--oracle-only", action="store_true", help="keep the builds of --work, redo the oracle run")
    args = parser.parse_args()
    if args.compare:
        return _compare(*args.compare)
    if not (args.work and args.out):
        parser.error("--work and --out are required (or --compare BEFORE AFTER)")
    repo = Path(__file__).resolve().parent.parent
    args.work.mkdir(parents=True, exist_ok=True)
    if args.oracle_only:
        fingerprint = json.loads(args.out.read_text(encoding="utf-8"))
    else:
        fingerprint = {"builds:" + name: hashes for name, hashes in _builds(args.work, repo).items()}
    fingerprint["oracle"] = _oracle(args.work, repo)
    args.out.write_text(json.dumps(fingerprint, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
