"""``needlebench export-tasks``: an lm-eval task folder in the in-tree form that needs no needlebench install.

* the command writes every config's task and the project's groups reading ``--repo`` at ``--revision``, no
  ``custom_dataset``, and a ``utils.py`` that imports nothing of needlebench; bad arguments are one-line errors;
* the exported hooks and aggregations give the package's outputs on a fuzz set of model outputs;
* as a user would after lm-eval merged the folder: a venv with lm-eval and without needlebench
  (``scripts/install_lm_eval_env.sh``, cached), the folder copied into its ``lm_eval/tasks/``, a release published to
  a local git repo served as a Hub repo by olah; plain ``lm_eval run --tasks needlebench_atc,needlebench_single_en_4k
  --model dummy`` and ``lm_eval validate`` work without ``--include_path``, and the oracle's outputs (logged with
  ``--predict_only``, then perturbed) score the same through the exported folder as through the project's folder,
  for every family.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hub_server import HubServer, olah_fixture
from needlebench.evaluation.harness import tasks as harness
from needlebench.evaluation.harness.upstream import LM_EVAL_PROVIDES, TASK_REQUIREMENTS
from support import (
    atc_rows,
    build_data,
    counting_stars_row,
    fixture_row,
    multi_reasoning_row,
    multi_retrieval_row,
    single_row,
)
from support.scoring_fuzz import outputs as fuzz_outputs

REPO = Path(__file__).resolve().parent.parent
PROJECT_TASKS = REPO / "harness_tasks" / "needlebench"
REPLAY = Path(__file__).resolve().parent / "support" / "replay_lm.py"
DATA_REPO = "org/needlebench"

#: One small config of every family (v1 S-RT, M-RT, M-RS, ATC multiple choice / reasoning / open, Counting-Stars
#: acquisition / reasoning, v2 S-RT, M-RT, M-RS, ATC).
FAMILY_CONFIGS = [
    "single_en_4k",
    "multi_retrieval_en_4k",
    "multi_reasoning_zh_4k",
    "atc_en",
    "atc_zh_reasoning",
    "atc_en_open",
    "counting_stars_acquisition_en_128k",
    "counting_stars_reasoning_zh_128k",
    "v2_single_en_4k",
    "v2_multi_retrieval_zh_4k",
    "v2_multi_reasoning_en_4k",
    "v2_atc_en",
]
#: The group ``needlebench_atc`` needs every ATC config in the release.
ATC_CONFIGS = ["atc_en", "atc_zh", "atc_en_512", "atc_zh_512", "atc_en_reasoning", "atc_zh_reasoning", "atc_en_open",
               "atc_zh_open"]  # fmt: skip
LIMIT = 8

hub = olah_fixture()


def _needlebench(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-c", "from needlebench.cli import main; main()", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "needlebench"
    result = _needlebench(
        "export-tasks",
        "--repo",
        DATA_REPO,
        "--revision",
        "v1.0.0",
        "--out",
        str(out),
        cwd=out.parent,
    )
    assert result.returncode == 0, result.stderr
    return out


def _load_utils(folder: Path):
    spec = importlib.util.spec_from_file_location("exported_needlebench_utils", folder / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------------------------- the folder


@pytest.mark.slow
def test_export_writes_the_in_tree_folder(exported: Path):
    from needlebench.evaluation.harness.upstream import load_yaml
    from needlebench.tasks.grid import registry

    files = {path.name: path for path in exported.iterdir()}
    project = {path.name for path in PROJECT_TASKS.iterdir() if path.name.endswith(("yaml", "_yaml"))}
    assert project <= set(files) and {"utils.py", "README.md"} <= set(files)
    texts = {name: path.read_text(encoding="utf-8") for name, path in files.items()}
    assert not any("custom_dataset" in text for name, text in texts.items() if name != "README.md")
    for config in registry():
        data = load_yaml(texts[f"{config}.yaml"])
        assert data["task"] == f"needlebench_{config}" and data["dataset_name"] == config
        base = load_yaml(texts[data["include"]])
        assert base["dataset_path"] == DATA_REPO and base["dataset_kwargs"] == {"revision": "v1.0.0"}
    groups = {load_yaml(texts[name])["group"] for name in project if name.startswith("_needlebench")}
    assert {
        "needlebench_atc",
        "needlebench_4k",
        "needlebench_single",
        "needlebench_v2",
    } <= groups
    assert groups == {load_yaml(texts[n])["group"] for n in texts if n.startswith("_needlebench")}
    # utils.py imports only the standard library, lm-eval's dependencies and the declared requirements
    tree = ast.parse(texts["utils.py"])
    imported = {
        (alias.name if isinstance(node, ast.Import) else node.module).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert "needlebench" not in imported
    assert imported - set(sys.stdlib_module_names) == set(LM_EVAL_PROVIDES) | set(TASK_REQUIREMENTS)
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    named = {ref.split(".")[1] for text in texts.values() for ref in _function_refs(text)}
    assert named and named <= defined
    readme = texts["README.md"]
    for heading in (
        "### Paper",
        "### Citation",
        "#### Groups",
        "#### Tasks",
        "### Checklist",
    ):
        assert heading in readme
    # the README states the scoring the exported hooks apply: the default unclosed-reasoning policy, where another
    # policy is chosen, and the reference twins to quote beside published numbers
    from needlebench.evaluation.scoring import thinking

    assert f"`{thinking.THINK_END_KEY}`" in readme and f"`{thinking.THINK_UNCLOSED_KEY}`" in readme
    assert "NEEDLEBENCH_THINK" not in readme
    assert "scored on its whole text" in readme and thinking.DEFAULT_UNCLOSED == "keep"
    assert "quote the `*_reference` metrics" in readme
    # the declared requirements are the package's own, with its bounds
    import tomllib

    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in TASK_REQUIREMENTS.values():
        assert requirement in dependencies and f"'{requirement}'" in readme


def _function_refs(text: str) -> list[str]:
    return [line.split("!function", 1)[1].strip() for line in text.splitlines() if "!function" in line]


@pytest.mark.slow
def test_export_refuses_bad_arguments_and_foreign_folders(tmp_path: Path):
    cases = [
        (
            ["--repo", "needlebench", "--revision", "v1.0.0"],
            "--repo 'needlebench' is not a Hub dataset id",
        ),
        (
            ["--repo", DATA_REPO, "--revision", "main"],
            "--revision 'main' does not pin a release",
        ),
    ]
    for args, message in cases:
        result = _needlebench("export-tasks", *args, "--out", str(tmp_path / "new"), cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1
        assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    result = _needlebench(
        "export-tasks",
        "--repo",
        DATA_REPO,
        "--revision",
        "v1.0.0",
        "--out",
        str(mine),
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "notes.txt" in result.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def _fuzz_docs() -> list[dict[str, Any]]:
    return [
        single_row(),
        single_row("single_zh_4k"),
        multi_retrieval_row(),
        multi_reasoning_row(),
        multi_reasoning_row("multi_reasoning_zh_4k", answer="巴黎", language="zh"),
        *atc_rows(),
        *atc_rows("atc_zh_reasoning", item_id="item-1"),
        *atc_rows("atc_en_open", item_id="item-2"),
        counting_stars_row(),
        counting_stars_row("counting_stars_reasoning_zh_128k"),
        single_row("v2_single_en_4k"),
        multi_reasoning_row("v2_multi_reasoning_en_4k"),
        *(fixture_row("v2_atc_en", id=f"v2-{n}", answer="Ann", num_needles=n) for n in (2, 3, 5)),
    ]


@pytest.mark.slow
def test_exported_hooks_equal_the_package_hooks_on_a_fuzz_set(exported: Path):
    from needlebench.evaluation.harness.tasks import TEMPLATES, template_key
    from needlebench.tasks.grid import get_config

    utils = _load_utils(exported)
    texts = fuzz_outputs(300, seed=26, big_every=0)
    compared = 0
    for doc in _fuzz_docs():
        template = TEMPLATES[template_key(get_config(doc["config"]))]
        oracle = harness.oracle_answer(doc)
        candidates = [
            oracle,
            f"<think>{texts[0]}</think>{oracle}",
            f"<think>{oracle}",
            oracle[: len(oracle) // 2],
        ]
        mine, theirs = (
            getattr(utils, template.process_results),
            getattr(harness, template.process_results),
        )
        rows_mine, rows_theirs = [], []
        for output in [*candidates, *texts]:
            got, want = mine(doc, [output]), theirs(doc, [output])
            assert got == want, (doc["config"], output[:200])
            rows_mine.append(got)
            rows_theirs.append(want)
            compared += 1
        for metric, aggregation in template.metrics:
            if aggregation != "mean":
                items = [row[metric] for row in rows_theirs]
                assert getattr(utils, aggregation)(items) == getattr(harness, aggregation)(items)
    assert compared > 5000


# --------------------------------------------------------------------------------------------- as a user


@pytest.fixture(scope="session")
def lm_eval_venv() -> Path:
    """The python of a venv with lm-eval 0.4.13 (no torch) and without needlebench, built once and cached."""
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "install_lm_eval_env.sh")],
        capture_output=True, text=True, timeout=1200, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    python = Path(result.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    check = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('needlebench') is None)"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert check.stdout.strip() == "True", "the lm-eval venv must not have needlebench"
    return python


@pytest.fixture(scope="module")
def release(hub: HubServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every ATC config and one config per family, published as ``org/needlebench`` v1.0.0; returns the folder."""
    from needlebench.dataset.publish import publish_to_git

    folder = tmp_path_factory.mktemp("release") / "needlebench"
    build_data(list(dict.fromkeys([*ATC_CONFIGS, "single_en_4k", *FAMILY_CONFIGS])), folder)
    publish_to_git(folder, hub.repo_path(DATA_REPO), version="1.0.0")
    return folder


@pytest.fixture(scope="module")
def installed(lm_eval_venv: Path, exported: Path) -> Path:
    """The exported folder copied into the venv's lm_eval/tasks/needlebench, as a merge would put it."""
    found = subprocess.run(
        [str(lm_eval_venv), "-c", "import lm_eval, pathlib; print(pathlib.Path(lm_eval.__file__).parent / 'tasks')"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    target = Path(found.stdout.strip()) / "needlebench"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(exported, target)
    return target


def _user_env(hub: HubServer, home: Path) -> dict[str, str]:
    """A user's shell pointed at the local Hub: no PYTHONPATH (which would reach this checkout's needlebench)."""
    env = hub.env(home)
    env.pop("PYTHONPATH", None)
    return env


def _results(output: Path) -> dict[str, Any]:
    return json.loads(sorted(output.rglob("results_*.json"))[-1].read_text(encoding="utf-8"))["results"]


@pytest.mark.slow
def test_lm_eval_runs_the_tasks_by_name_without_needlebench(
    hub: HubServer, release: Path, installed: Path, lm_eval_venv: Path, tmp_path: Path
):
    env = _user_env(hub, tmp_path / "hf")
    lm_eval = [str(lm_eval_venv.parent / "lm_eval")]  # the venv's console script, as a user types it
    validate = subprocess.run(
        [*lm_eval, "validate", "--tasks", "needlebench_atc,needlebench_single_en_4k,needlebench_4k"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert validate.returncode == 0 and "All tasks found and valid" in validate.stdout, validate.stdout[-2000:]
    run = subprocess.run(
        [*lm_eval, "--tasks", "needlebench_atc,needlebench_single_en_4k", "--model", "dummy",
         "--limit", "4", "--output_path", str(tmp_path / "out")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    results = _results(tmp_path / "out")
    assert {
        "needlebench_atc",
        "needlebench_single_en_4k",
        *(f"needlebench_{c}" for c in ATC_CONFIGS),
    } <= set(results)
    assert results["needlebench_single_en_4k"]["score,none"] < 100.0  # the dummy answers "lol"


def _perturbed(output: str, index: int, noise: str) -> str:
    """A mix of right, wrong and partly right outputs (so equal scores are not all 0 or 100)."""
    return [
        output,
        f"<think>{noise}</think>\n{output}",
        output[: len(output) // 2],
        f"<think>{output}",
        noise,
        output.upper(),
    ][index % 6]


@pytest.mark.slow
def test_exported_folder_scores_equal_the_project_folder_on_the_same_outputs(
    hub: HubServer, release: Path, installed: Path, lm_eval_venv: Path, tmp_path: Path
):
    tasks = ",".join(f"needlebench_{config}" for config in FAMILY_CONFIGS)
    # 1. the oracle's outputs through the project's folder, logged without scoring
    oracle = _needlebench(
        "eval", "run", "--model", "needlebench-oracle", "--tasks", tasks, "--limit", str(LIMIT),
        "--metadata", json.dumps({"data_dir": str(release)}), "--log_samples", "--predict_only",
        "--output_path", str(tmp_path / "oracle"), cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert oracle.returncode == 0, oracle.stderr[-4000:]
    noise = fuzz_outputs(50, seed=7, big_every=0)
    recorded: dict[str, dict[str, str]] = {}
    for path in sorted((tmp_path / "oracle").rglob("samples_*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            sample = json.loads(line)
            task = path.name.split("_", 1)[1].rsplit("_", 1)[0]
            output = sample["resps"][0][0]
            row = sample["doc"]["id"]
            recorded.setdefault(task, {})[row] = _perturbed(output, sample["doc_id"], noise[sample["doc_id"]])
    assert set(recorded) == {f"needlebench_{config}" for config in FAMILY_CONFIGS}
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(recorded, ensure_ascii=False), encoding="utf-8")
    common = ["run", "--model", "replay", "--tasks", tasks, "--limit", str(LIMIT)]
    # 2. the same outputs through the project's folder (needlebench installed) ...
    project = subprocess.run(
        [sys.executable, str(REPLAY), str(outputs), *common, "--include_path", str(PROJECT_TASKS),
         "--metadata", json.dumps({"data_dir": str(release)}), "--output_path", str(tmp_path / "project")],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert project.returncode == 0, project.stderr[-4000:]
    # 3. ... and through the exported folder in lm-eval's tree, reading the served release, without needlebench
    exported_run = subprocess.run(
        [str(lm_eval_venv), str(REPLAY), str(outputs), *common, "--output_path", str(tmp_path / "exported")],
        capture_output=True, text=True, cwd=tmp_path, timeout=900, env=_user_env(hub, tmp_path / "hf"),
    )  # fmt: skip
    assert exported_run.returncode == 0, exported_run.stderr[-4000:]
    theirs, mine = _results(tmp_path / "project"), _results(tmp_path / "exported")
    mixed = 0
    for config in FAMILY_CONFIGS:
        task = f"needlebench_{config}"
        metrics = {key: value for key, value in theirs[task].items() if key.endswith(",none")}
        assert metrics and metrics == {key: value for key, value in mine[task].items() if key.endswith(",none")}, task
        print(task, metrics)  # shown with pytest -s: the scores both folders gave
        mixed += any(0.0 < value < (1.0 if "counting" in config else 100.0) for value in metrics.values())
    assert mixed >= len(FAMILY_CONFIGS) // 2, theirs


# --------------------------------------------------------------------------------------------- the bundler


def _fake_package(root: Path, modules: dict[str, str], package: str) -> None:
    """Write the modules, their package ``nbfake`` renamed to ``package`` (one per test: imports are cached)."""
    for name, text in modules.items():
        name, text = name.replace("nbfake", package), text.replace("nbfake", package)
        path = root / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


FAKE = {
    "nbfake.__init__": "",
    "nbfake.scoring.__init__": (
        "from nbfake.scoring.alpha import score_alpha\nfrom nbfake.scoring.beta import score_beta\n"
    ),
    "nbfake.scoring.alpha": (
        "import re\n\n_WORD = re.compile(r'\\w+')\n# the weight of a word\n_WEIGHT = 2\n\n\n"
        "def _helper(text):\n    return len(_WORD.findall(text)) * _WEIGHT\n\n\n"
        "def score_alpha(text):\n    return _helper(text)\n\n\ndef unused():\n    import nbfake.hooks\n"
    ),
    "nbfake.scoring.beta": (
        "import numpy as np\n\n_TABLE = np.zeros(4)\n_TABLE[1] = 5.0\n\n\n"
        "def _helper(text):\n    return float(_TABLE[len(text) % 4])\n\n\n"
        "def score_beta(text):\n    return _helper(text) + 1\n"
    ),
    "nbfake.hooks": (
        "from nbfake import scoring\nfrom nbfake.scoring.alpha import _WEIGHT as WEIGHT\n\n\n"
        "def process(doc, results):\n    text = results[0]\n"
        "    return {'a': scoring.score_alpha(text) * WEIGHT, 'b': scoring.score_beta(text)}\n"
    ),
}


def test_bundler_follows_names_renames_clashes_and_keeps_module_level_changes(tmp_path: Path, monkeypatch):
    from needlebench.evaluation.harness.bundle import bundle

    _fake_package(tmp_path, FAKE, "nbfake_one")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = bundle(
        [("nbfake_one.hooks", "process")], header='"""fake"""', allowed_external=["numpy"], package="nbfake_one"
    )
    imports = [node for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert not any("nbfake" in ast.unparse(node) for node in imports) and "def unused" not in text
    assert "# the weight of a word" in text and "_TABLE[1] = 5.0" in text  # comments and mutations kept
    namespace: dict[str, Any] = {}
    exec(compile(text, "bundle", "exec"), namespace)  # noqa: S102 - the code under test
    hooks = importlib.import_module("nbfake_one.hooks")
    for output in ["", "a", "two words", "x y z!"]:
        assert namespace["process"]({}, [output]) == hooks.process({}, [output])
    assert {"_helper", "_beta_helper"} <= set(namespace) or {"_helper", "_alpha_helper"} <= set(namespace)


def test_bundler_refuses_what_it_cannot_copy_faithfully(tmp_path: Path, monkeypatch):
    from needlebench.errors import NeedlebenchError
    from needlebench.evaluation.harness.bundle import bundle

    _fake_package(
        tmp_path,
        {
            **FAKE,
            "nbfake.lazy": (
                "def hook(doc, results):\n"
                "    from nbfake.scoring import score_alpha\n"
                "    return score_alpha(results[0])\n"
            ),
            "nbfake.heavy": "import scipy\n\n\ndef hook(doc, results):\n    return scipy.stats\n",
        },
        "nbfake_two",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(NeedlebenchError, match="imports nbfake_two.scoring inside its body"):
        bundle([("nbfake_two.lazy", "hook")], header="", allowed_external=[], package="nbfake_two")
    with pytest.raises(NeedlebenchError, match="imports 'scipy', which lm-eval does not bring"):
        bundle([("nbfake_two.heavy", "hook")], header="", allowed_external=["numpy"], package="nbfake_two")
