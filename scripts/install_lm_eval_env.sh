#!/usr/bin/env bash
# A virtual environment with lm-eval and WITHOUT needlebench: what a user has after lm-eval merges the exported
# task folder (`needlebench export-tasks`). Used by tests/test_export_tasks.py.
#
#   bash scripts/install_lm_eval_env.sh          # prints the venv's python on the last line
#
# Venv: ${NEEDLEBENCH_LM_EVAL_VENV:-${NEEDLEBENCH_CACHE:-$HOME/.cache/needlebench}/lm-eval-venv}. Idempotent: a
# marker file written last records what was installed; with the marker present nothing is done.
# lm-eval core needs no torch (the `dummy` model and the dataset loaders are enough); the scorers of the exported
# folder declare rapidfuzz and json-repair (see the folder's README). About 1-2 minutes and 0.8 GB the first time.
set -euo pipefail
unset PYTHONPATH  # the venv must see neither this checkout nor the calling environment's packages

CACHE="${NEEDLEBENCH_CACHE:-$HOME/.cache/needlebench}"
VENV="${NEEDLEBENCH_LM_EVAL_VENV:-$CACHE/lm-eval-venv}"
BASE_PYTHON="${PYTHON:-python3}"
MARKER="$VENV/needlebench-lm-eval-env.txt"
WANT="lm-eval==0.4.13 rapidfuzz>=3.0 json-repair>=0.30"  # the bounds of the exported folder's README

if [ -f "$MARKER" ] && [ "$(head -n1 "$MARKER")" = "$WANT" ]; then
    echo "lm-eval env ready (cached): $VENV/bin/python"
    exit 0
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$BASE_PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
# shellcheck disable=SC2086
"$PY" -m pip install -q $WANT
"$PY" - <<'PYCHECK'
import importlib.util
import importlib.metadata as md
assert importlib.util.find_spec("needlebench") is None, "needlebench must not be installed here"
import json_repair, lm_eval, rapidfuzz  # noqa: F401,E401
print("lm-eval", md.version("lm_eval"), "torch", importlib.util.find_spec("torch") is not None)
PYCHECK
printf '%s\n' "$WANT" > "$MARKER"
echo "lm-eval env ready: $PY"
