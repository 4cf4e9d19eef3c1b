#!/usr/bin/env bash
# Prove the install a user gets, in brand-new virtual environments that hold only what pip installs
# (no --system-site-packages, nothing from the machine's environment):
#   1. the README's first command, exactly as the README writes it (read from README.md "Set up"), run in a
#      copy of the checkout, then one built config loaded with datasets.load_dataset;
#   2. `pip wheel .` installed into another fresh venv and used from a folder outside the repository:
#      build atc_en, load it, and resolve the lm-eval task folder with `needlebench tasks-path`;
#   3. the README's test command, exactly as the README writes it, in a third fresh venv on another clean copy of
#      the checkout: it installs every test dependency itself (the `test` extra, scripts/install_test_deps.sh with
#      the vLLM CPU environment, reused when installed) and runs the whole suite once, so a dependency the tests
#      import but the command does not install fails here.
# Needs only a package registry (PyPI). Usage: bash scripts/ci_fresh_install.sh [--no-tests]
#   --no-tests: steps 1 and 2 only.   PYTHON=python3.X chooses the interpreter.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_TESTS=1
case "${1:-}" in
    "") ;;
    --no-tests) RUN_TESTS=0 ;;
    *) echo "usage: bash scripts/ci_fresh_install.sh [--no-tests]" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-python}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/needlebench-fresh.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONNOUSERSITE=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV NEEDLEBENCH_CARD_TEMPLATE
export NEEDLEBENCH_CACHE="$WORK/cache"

step() { printf '\n=== [%4ds] %s\n' "$SECONDS" "$*"; }

# A clean copy of the checkout (tracked and new files, not ignored ones such as build/ or needlebench-data/).
copy_checkout() {
"$PYTHON" - "$REPO" "$1" <<'EOF'
import shutil
import subprocess
import sys
from pathlib import Path

source, target = Path(sys.argv[1]), Path(sys.argv[2])
try:
    listed = subprocess.run(
        ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True,
    ).stdout.decode().split("\0")
except (OSError, subprocess.CalledProcessError):  # not a git checkout: copy all but .git
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".git"))
else:
    for name in filter(None, listed):
        if (source / name).is_file():  # a tracked file deleted in the work tree is skipped
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)
EOF
}
step "copy the checkout to $WORK/repo"
copy_checkout "$WORK/repo"

# ---------------------------------------------------------------- 1. the README's first command, as written
FIRST="$("$PYTHON" "$REPO/scripts/readme_commands.py" 0)"
step "venv 1: $FIRST"
"$PYTHON" -m venv "$WORK/venv1"
(
    # shellcheck disable=SC1091
    source "$WORK/venv1/bin/activate"
    cd "$WORK/repo"
    bash -euo pipefail -c "$FIRST"
    step "venv 1: load a built config with datasets.load_dataset"
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 python - <<'EOF'
import json
from pathlib import Path

from datasets import load_dataset

import importlib.metadata as md

manifest = json.loads(Path("needlebench-data/needlebench.json").read_text(encoding="utf-8"))
expected = {"single_en_4k", "atc_en"}  # what the README's 5-minute example evaluates
assert set(manifest["configs"]) == expected, f"configs built: {sorted(manifest['configs'])}, want {sorted(expected)}"
for config in sorted(expected):
    ds = load_dataset("needlebench-data", config, split="test")
    rows = manifest["configs"][config]["rows"]
    assert len(ds) == rows > 0, (config, len(ds), rows)
    assert set(ds["config"]) == {config} and all(ds["prompt"]) and all(ds["answer"])
    print(f"load_dataset('needlebench-data', {config!r}): {len(ds)} rows")
# the evaluation extra the example runs on: lm-eval and the pinned torch
print("lm-eval", md.version("lm_eval"), "torch", md.version("torch"), "gguf", md.version("gguf"))
assert md.version("torch").startswith("2.13.0"), md.version("torch")
EOF
)

# ---------------------------------------------------------------- 2. a regular wheel, used outside the repo
step "venv 2: pip wheel . and install the wheel"
"$PYTHON" -m venv "$WORK/venv2"
V2="$WORK/venv2/bin"
(cd "$WORK/repo" && "$V2/pip" wheel --no-deps --wheel-dir "$WORK/wheels" .)
"$V2/pip" install "$WORK"/wheels/needlebench-*.whl
mkdir "$WORK/elsewhere"
(
    cd "$WORK/elsewhere"
    step "venv 2: needlebench build atc_en (from $PWD)"
    "$V2/needlebench" build atc_en --out atc-data
    TASKS="$("$V2/needlebench" tasks-path)"
    step "venv 2: needlebench tasks-path -> $TASKS"
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$V2/python" - "$TASKS" "$WORK/venv2" <<'EOF'
import runpy
import sys
from pathlib import Path

import needlebench
from datasets import load_dataset

tasks, venv = Path(sys.argv[1]), Path(sys.argv[2]).resolve()
package = Path(needlebench.__file__).resolve().parent
assert package.is_relative_to(venv), f"needlebench imported from {package}, not from the wheel in {venv}"
assert tasks.resolve().is_relative_to(package), f"tasks-path {tasks} is not the installed package data"
for name in ("_needlebench_atc.yaml", "_needlebench_4k.yaml", "_default_atc_template_yaml", "atc_en.yaml", "utils.py"):
    assert (tasks / name).is_file(), f"{name} missing from {tasks}"
assert len(list(tasks.glob("*.yaml"))) > 100, "task YAMLs missing"
hooks = runpy.run_path(str(tasks / "utils.py"))  # the hooks lm-eval loads import the installed library
assert callable(hooks["process_atc"]) and callable(hooks["load_dataset"])
card = Path("atc-data/README.md").read_text(encoding="utf-8")
assert card.startswith("---\n") and "atc_en" in card, "the dataset card was not rendered"
ds = load_dataset("atc-data", "atc_en", split="test")
assert len(ds) > 0 and set(ds["config"]) == {"atc_en"}
print(f"wheel install: {package}; tasks {tasks} ({len(list(tasks.iterdir()))} files); atc_en {len(ds)} rows")
EOF
)

# ---------------------------------------------------------------- 3. the README's test command, as written
if [ "$RUN_TESTS" = 1 ]; then
    SECOND="$("$PYTHON" "$REPO/scripts/readme_commands.py" 1)"
    step "copy the checkout to $WORK/repo-tests"
    copy_checkout "$WORK/repo-tests"
    step "venv 3: $SECOND"
    "$PYTHON" -m venv "$WORK/venv3"
    (
        # shellcheck disable=SC1091
        source "$WORK/venv3/bin/activate"
        cd "$WORK/repo-tests"
        unset NEEDLEBENCH_CACHE  # the tests keep their own cache, as on a user's machine (tests/conftest.py)
        bash -euo pipefail -c "$SECOND"
    )
fi
step "fresh-install checks passed"
