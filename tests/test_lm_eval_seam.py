"""The one seam with lm-eval (``needlebench/evaluation/runner/lm_eval_seam.py``): what it uses of lm-eval, and that
nothing else in the package imports lm-eval.

:data:`CONTRACT` lists every lm-eval symbol the seam reaches, with the parameters expected of it (by name, read with
:mod:`inspect`). A new lm-eval release that renames, removes or changes one of them fails
:func:`test_lm_eval_symbols_the_seam_uses_are_as_expected` with the whole list of what changed."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

import needlebench
from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import lm_eval_seam

ROOT = Path(needlebench.__file__).parent
SEAM = Path(lm_eval_seam.__file__)
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

#: Not a callable whose parameters matter: it must exist (a registry, a constant, a property, a class).
EXISTS = None

#: ``module:qualified.name`` -> the parameter names expected (in order), or EXISTS.
CONTRACT: dict[str, list[str] | None] = {
    # public API
    "lm_eval.api.model:LM": EXISTS,
    "lm_eval.api.model:LM.generate_until": ["self", "requests"],
    "lm_eval.api.model:LM.loglikelihood": ["self", "requests"],
    "lm_eval.api.model:LM.loglikelihood_rolling": ["self", "requests"],
    "lm_eval.api.model:LM.apply_chat_template": ["self", "chat_history", "add_generation_prompt"],
    "lm_eval.api.model:LM.tokenizer_name": EXISTS,
    "lm_eval.api.model:CacheHook.add_partial": ["self", "attr", "req", "res"],  # the oracle's self.cache_hook
    "lm_eval.api.registry:model_registry": EXISTS,
    "lm_eval.api.registry:register_model": ["names"],
    "lm_eval.models": EXISTS,
    "lm_eval.tasks:TaskManager": EXISTS,
    "lm_eval.tasks:TaskManager.__init__": ["self", "verbosity", "include_path", "include_defaults", "metadata"],
    "lm_eval.tasks:TaskManager.all_tasks": EXISTS,
    "lm_eval.utils:setup_logging": ["verbosity"],
    "lm_eval.utils:simple_parse_args_string": ["args_string"],
    "lm_eval.models.openai_completions:LocalCompletionsAPI": EXISTS,
    "lm_eval.models.openai_completions:LocalCompletionsAPI.__init__": [
        "self", "base_url", "tokenizer_backend", "verify_certificate", "ca_cert_path", "auth_token", "kwargs",
    ],
    "lm_eval.models.openai_completions:LocalChatCompletion": EXISTS,
    "lm_eval.models.openai_completions:LocalChatCompletion.__init__": [
        "self", "base_url", "tokenizer_backend", "tokenized_requests", "think_end_token", "verify_certificate",
        "ca_cert_path", "auth_token", "kwargs",
    ],
    # the long-context defaults needlebench passes to the API models (needlebench/evaluation/runner/engines.py)
    "lm_eval.models.api_models:TemplateAPI.__init__": EXISTS,
    # private: the command line (lm_eval/_cli/) and the options it builds (lm_eval/config/evaluate_config.py)
    "lm_eval._cli.run:Run.create": ["subparsers"],
    "lm_eval._cli.ls:List.create": ["subparsers"],
    "lm_eval._cli.validate:Validate.create": ["subparsers"],
    "lm_eval._cli.utils:MergeDictAction": EXISTS,
    "lm_eval._cli.utils:MergeDictAction.__call__": ["self", "parser", "namespace", "values", "option_string"],
    "lm_eval.config.evaluate_config:EvaluatorConfig": EXISTS,
    "lm_eval.config.evaluate_config:EvaluatorConfig.load_yaml_config": ["config_path"],
    "lm_eval.config.evaluate_config:EvaluatorConfig.from_cli": ["namespace"],
    "lm_eval.config.evaluate_config:DICT_KEYS": EXISTS,
    # private: the evaluator and its helpers (lm_eval/evaluator.py, lm_eval/evaluator_utils.py)
    "lm_eval.evaluator:evaluate": [
        "lm", "task_dict", "limit", "samples", "cache_requests", "rewrite_requests_cache", "bootstrap_iters",
        "write_out", "log_samples", "system_instruction", "apply_chat_template", "fewshot_as_multiturn", "verbosity",
        "confirm_run_unsafe_code",
    ],
    "lm_eval.evaluator:get_git_commit_hash": [],
    "lm_eval.evaluator_utils:get_sample_size": ["task", "limit"],
    "lm_eval.evaluator_utils:_process_results": ["eval_results_acc", "groups", "bootstrap_iters"],
    "lm_eval.evaluator_utils:EvalAcc._to_eval_results": ["self", "samples"],
    "lm_eval.api.task:ConfigurableTask.eval_docs": EXISTS,
    # private: results and the model folder (lm_eval/utils.py, lm_eval/loggers/)
    "lm_eval.utils:make_table": ["result_dict", "column", "sort_results"],
    "lm_eval.utils:sanitize_model_name": ["model_name"],
    "lm_eval.loggers.utils:get_commit_from_path": ["repo_path"],
    "lm_eval.loggers.utils:add_tokenizer_info": ["storage", "lm"],
    # private: how simple_evaluate builds its model (--merge-shards stands in for it)
    "lm_eval.api.registry:get_model": ["model_name"],
    "lm_eval.api.model:LM.create_from_arg_string": ["arg_string", "additional_config"],
    "lm_eval.api.model:LM.create_from_arg_obj": ["arg_dict", "additional_config"],
    "lm_eval.loggers.evaluation_tracker:GeneralConfigTracker": EXISTS,
    "lm_eval.loggers.evaluation_tracker:GeneralConfigTracker.log_experiment_args": [
        "self", "model_source", "model_args", "system_instruction", "chat_template", "fewshot_as_multiturn",
    ],
    "lm_eval.loggers.evaluation_tracker:GeneralConfigTracker._get_model_name": ["model_args"],
}  # fmt: skip


def _resolve(key: str) -> Any:
    module, _, qualified = key.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualified.split(".") if qualified else []:
        found = getattr(found, part)
    return found


def _contract_changes() -> list[str]:
    changes = []
    for key, expected in CONTRACT.items():
        try:
            found = _resolve(key)
        except (ImportError, AttributeError) as error:
            changes.append(f"{key}: missing ({type(error).__name__}: {error})")
            continue
        if expected is EXISTS:
            continue
        try:
            parameters = list(inspect.signature(found).parameters)
        except (TypeError, ValueError):
            changes.append(f"{key}: no longer a callable with a signature ({type(found).__name__})")
            continue
        if parameters != expected:
            changes.append(f"{key}: parameters {parameters}, expected {expected}")
    return changes


@pytest.mark.slow
def test_lm_eval_symbols_the_seam_uses_are_as_expected():
    changes = _contract_changes()
    assert changes == [], "lm-eval changed what needlebench's seam uses:\n" + "\n".join(changes)


@pytest.mark.slow
def test_lm_eval_behaviour_the_seam_relies_on():
    """What no signature shows: texts and names the seam matches, calls needlebench stands in for."""
    from lm_eval.api import task as task_module
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.models.api_models import TemplateAPI

    changes = []
    if task_module.eval_logger.name != lm_eval_seam.TASK_LOGGER:
        changes.append(f"lm_eval/api/task.py logs to {task_module.eval_logger.name!r}, not {lm_eval_seam.TASK_LOGGER}")
    if lm_eval_seam.METADATA_ADVICE not in inspect.getsource(task_module.ConfigurableTask.download):
        changes.append("ConfigurableTask.download no longer logs the --metadata advice the seam drops")
    if f'"{lm_eval_seam.TASKS_NOT_FOUND}' not in inspect.getsource(EvaluatorConfig.process_tasks):
        changes.append("EvaluatorConfig.process_tasks no longer raises 'Tasks not found: ...'")
    task_source = inspect.getsource(task_module)
    for attribute in ("self._instances", "self.task_docs = self.eval_docs"):  # what task_on_docs resets
        if attribute not in task_source:
            changes.append(f"lm_eval/api/task.py no longer has {attribute}")
    # the model args needlebench sets when the user did not (needlebench/evaluation/runner/engines.py)
    accepted = set(inspect.signature(TemplateAPI.__init__).parameters)
    for name in ("base_url", "max_length", "timeout", "num_concurrent"):
        if name not in accepted:
            changes.append(f"TemplateAPI.__init__ no longer takes {name}")
    # --merge-shards stands in for the model: simple_evaluate must build it by the registry's module attribute
    # and touch it only through the calls the stand-in answers (lm_eval/evaluator.py)
    from lm_eval import evaluator

    source = inspect.getsource(evaluator.simple_evaluate)
    for call in (
        "lm_eval.api.registry.get_model(model).create_from_arg_obj(",
        "lm_eval.api.registry.get_model(model).create_from_arg_string(",
        "add_tokenizer_info(results, lm)",
        "lm.chat_template(apply_chat_template)",
    ):
        if call not in source:
            changes.append(f"simple_evaluate no longer calls {call}...)")
    from lm_eval.api.registry import model_registry

    if not all(hasattr(model_registry, name) for name in ("__contains__", "keys", "items")):
        changes.append("lm_eval.api.registry.model_registry is no longer a mapping (in, keys, items)")
    assert changes == [], "lm-eval changed what needlebench's seam relies on:\n" + "\n".join(changes)


def _seam_uses() -> set[str]:
    """``module:name`` of every lm-eval import in the seam, and of every attribute it replaces."""
    tree = ast.parse(SEAM.read_text(encoding="utf-8"))
    used: set[str] = set()
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        names: dict[str, str] = {}
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lm_eval":
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
                    used.add(f"{node.module}:{alias.name}")
            elif isinstance(node, ast.Import):
                used.update(alias.name for alias in node.names if alias.name.split(".")[0] == "lm_eval")
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_replaced":
                owner, attribute = ast.unparse(node.args[0]), node.args[1].value  # type: ignore[attr-defined]
                used.add(f"{names[owner]}.{attribute}" if owner in names else f"{owner}:{attribute}")
    return {key for key in used if key != "lm_eval"}  # `import lm_eval`: only whether it imports


def _listed(used: str) -> bool:
    """A symbol is listed itself, or by what the seam uses of it: a class by its methods, a module by its names."""
    return any(key == used or key.startswith((f"{used}.", f"{used}:")) for key in CONTRACT)


def test_the_contract_lists_every_lm_eval_symbol_the_seam_uses():
    missing = sorted(used for used in _seam_uses() if not _listed(used))
    assert missing == [], f"lm-eval symbols the seam uses that tests/test_lm_eval_seam.py does not list: {missing}"


def _lm_eval_imports(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules = [node.module or ""]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            modules = [str(node.args[0].value)]
        else:
            continue
        if any(module.split(".")[0] == "lm_eval" for module in modules):
            lines.append(node.lineno)
    return lines


def test_only_the_seam_imports_lm_eval():
    """Every module of the package but the seam reaches lm-eval through it (function-level imports included)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != SEAM
        for line in _lm_eval_imports(path)
    ]
    assert offenders == []
    assert _lm_eval_imports(SEAM), "the seam itself imports lm-eval"  # the walk above sees imports at all


def test_the_seam_imports_no_lm_eval_at_import_time():
    """lm-eval stays lazy: the seam's module level imports nothing of it (`needlebench --help` must not load it)."""
    tree = ast.parse(SEAM.read_text(encoding="utf-8"))
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(node) for node in top if "lm_eval" in ast.unparse(node)] == []


def test_the_supported_range_is_the_pin():
    """The range the seam accepts is the one pyproject.toml installs (every extra that pulls lm-eval in)."""
    from packaging.requirements import Requirement

    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = [
        str(requirement.specifier)
        for requirements in extras.values()
        for requirement in map(Requirement, requirements)
        if requirement.name == "lm-eval"
    ]
    assert pins and {pin for pin in pins} == {str(Requirement(f"lm-eval{lm_eval_seam.SUPPORTED}").specifier)}
    assert lm_eval_seam.installed_version() in Requirement(f"lm-eval{lm_eval_seam.SUPPORTED}").specifier


@pytest.mark.parametrize("version", ["0.4.12", "0.4.14", "0.5.0", "not-a-version"])
def test_an_unsupported_lm_eval_is_one_line_naming_the_range(monkeypatch, version):
    from needlebench.evaluation.runner.evaluate import run_eval

    monkeypatch.setattr(lm_eval_seam, "installed_version", lambda: version)
    expected = (
        f"lm-eval {version} is installed; needlebench eval supports lm-eval>=0.4.13,<0.4.14; "
        "install it with `pip install 'needlebench[eval]'`"
    )
    with pytest.raises(NeedlebenchError) as raised:
        run_eval(["run", "--model", "needlebench-oracle", "--tasks", "needlebench_atc_en_open"])
    assert str(raised.value) == expected


@pytest.mark.slow
def test_needlebench_eval_with_an_unsupported_lm_eval_installed(tmp_path: Path):
    """Through the command: an lm-eval 0.5.0 first on the path (its metadata only) is refused in one line, exit 2,
    before anything of it is imported."""
    site = tmp_path / "site"
    info = site / "lm_eval-0.5.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lm_eval\nVersion: 0.5.0\n", encoding="utf-8")
    code = (
        "import sys\nfrom needlebench.cli import main\n"
        "try:\n    main()\nfinally:\n    print('lm_eval' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "eval", "run", "--model", "needlebench-oracle", "--tasks", "needlebench_atc_en"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        "needlebench: error: lm-eval 0.5.0 is installed; needlebench eval supports lm-eval>=0.4.13,<0.4.14; "
        "install it with `pip install 'needlebench[eval]'`",
        "False",
    ]
