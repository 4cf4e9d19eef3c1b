"""The README's 5-minute evaluation example runs verbatim, to a report naming both models (issue 27).

The block is read from README.md (the fenced block after the marker of ``scripts/readme_commands.py``) and run
by bash exactly as written, in an empty working folder with an empty ``HOME`` (so nothing cached by earlier tests
helps: the configs are built, the GGUF's tokenizer converted, the model loaded, all from scratch). The example
reads the folder the README's first set-up command builds (``needlebench-data``), so the test first runs that
command's ``needlebench build`` part, as written; its ``pip install`` part is what the test environment holds.

It runs in a fresh virtual environment made with ``--system-site-packages`` on top of the test environment: the
example's own ``pip install`` lines then install into that venv (here they find their packages already installed,
as ``scripts/install_test_deps.sh`` put them there), while torch and lm-eval, which the README's first set-up
command installs, come from the test environment instead of a 1.9 GB download on every CI run.
The brand-new-venv proof of the README's set-up command is ``scripts/ci_fresh_install.sh``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: The example must stay small enough for CI: rows per task at most this.
MAX_SUBSET = 4


def _readme_commands():
    spec = importlib.util.spec_from_file_location("readme_commands", REPO / "scripts" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _setup_build(readme_commands, text: str) -> str:
    """The ``needlebench build`` part of the README's first set-up command, as written."""
    (build,) = [
        part for part in readme_commands.setup_commands(text)[0].split(" && ") if part.startswith("needlebench ")
    ]
    return build


def test_example_is_small_enough_for_ci():
    script = _readme_commands().example_script((REPO / "README.md").read_text(encoding="utf-8"))
    runs = [line for line in script.split("needlebench ")[1:] if line.startswith("eval run")]
    assert len(runs) == 2, script
    for run in runs:
        subset = re.search(r"--subset (\d+)", run)
        assert subset and int(subset.group(1)) <= MAX_SUBSET, f"the README's example must use --subset <= {MAX_SUBSET}"
    assert "needlebench report results --out report" in script


def test_the_set_up_builds_what_the_example_evaluates():
    """The set-up builds no data the example does not use, and the example reads what the set-up built."""
    readme_commands = _readme_commands()
    text = (REPO / "README.md").read_text(encoding="utf-8")
    build = _setup_build(readme_commands, text).split()
    out = build[build.index("--out") + 1]
    built = {word for word in build[2 : build.index("--out")]}
    script = readme_commands.example_script(text)
    runs = [line for line in script.replace("\\\n", " ").splitlines() if line.startswith("needlebench eval run")]
    for run in runs:
        tasks = set(re.search(r"--tasks (\S+)", run).group(1).split(","))
        assert tasks == {f"needlebench_{config}" for config in built}, (tasks, built)
        assert f"""--metadata '{{"data_dir": "{out}"}}'""" in run, run


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_readme_example_runs_verbatim_to_a_report(tmp_path: Path):
    readme_commands = _readme_commands()
    text = (REPO / "README.md").read_text(encoding="utf-8")
    script = _setup_build(readme_commands, text) + "\n" + readme_commands.example_script(text)
    home, work, venv = tmp_path / "home", tmp_path / "work", tmp_path / "venv"
    home.mkdir()
    work.mkdir()
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("NEEDLEBENCH_", "VIRTUAL_ENV"))}
    env.pop("TIKTOKEN_CACHE_DIR", None)
    env.pop("HF_HOME", None)
    env.pop("XDG_CACHE_HOME", None)
    env.update(
        HOME=str(home),
        VIRTUAL_ENV=str(venv),
        # the venv first; then the test environment's scripts (`needlebench`, installed there)
        PATH=os.pathsep.join([str(venv / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")]),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, f"README example failed after {took:.0f} s:\n{done.stderr[-4000:]}"
    html = (work / "report" / "report.html").read_text(encoding="utf-8")
    assert "SmolLM2-135M" in html and "needlebench-oracle" in html
    for name in ("needlebench_single_en_4k", "needlebench_atc_en"):
        assert list((work / "results").rglob(f"samples_{name}_*.jsonl")), f"no samples of {name}"
    # the length check read the GGUF's tokenizer as lm-eval does, and cached it under the (empty) HOME
    assert list(home.joinpath(".cache", "needlebench", "gguf-tokenizers").glob("*/tokenizer.json"))
    print(f"README example: {took:.0f} s")
