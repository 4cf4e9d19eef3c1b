"""needlebench's one seam with lm-eval: every lm-eval symbol the package uses is reached through this module.

No other module of the package imports ``lm_eval`` (tests/test_lm_eval_seam.py checks it, function-level imports
included), and that test lists each symbol used here with the parameters expected of it, so a new lm-eval release
that changes one of them fails that one test with the list of what changed.

lm-eval is imported inside the functions, never when this module is imported: ``needlebench --help`` and
``needlebench list`` load no lm-eval (tests/test_cli.py measures it), and importing the runner without lm-eval
installed works until lm-eval is needed (:func:`require_lm_eval` then says how to install it).

The public API comes first (models and their registry, the task manager, logging, the API models). What
needlebench needs beyond it (lm-eval's command-line parsers, its evaluator's aggregation helpers, the attributes
replaced while ``needlebench eval run`` runs) is wrapped below, each with why and the lm-eval file it comes from.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from needlebench.errors import NeedlebenchError

#: The lm-eval releases this seam is tested with (the ``eval`` and ``vllm`` extras of pyproject.toml pin the same).
SUPPORTED = ">=0.4.13,<0.4.14"
#: lm-eval's distribution (for its version and the extras it declares) and its import package.
DISTRIBUTION = "lm_eval"
PACKAGE = "lm_eval"
#: The package of lm-eval's model backends (``lm_eval/models/``), whose sources the backend checks read.
MODELS_PACKAGE = "lm_eval.models"
#: The logger of lm-eval's tasks (``lm_eval/api/task.py``: ``logging.getLogger(__name__)``).
TASK_LOGGER = "lm_eval.api.task"
#: The start of lm-eval's advice to pass ``--metadata`` (``ConfigurableTask.download`` in ``lm_eval/api/task.py``),
#: logged to :data:`TASK_LOGGER` after ``"<task>: "``.
METADATA_ADVICE = "Custom kwargs can be passed to `--metadata`"
#: lm-eval's message when a task name matches nothing (``lm_eval/config/evaluate_config.py``, ``process_tasks``:
#: ``ValueError(f"Tasks not found: ...")``); lm-eval has no exception class of its own for it.
TASKS_NOT_FOUND = "Tasks not found: "
#: How to install lm-eval with needlebench.
INSTALL = "pip install 'needlebench[eval]'"


# --------------------------------------------------------------------------------------------- installation


def installed_version() -> str | None:
    """The installed lm-eval's version (from its metadata: nothing imported), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def require_lm_eval() -> None:
    """lm-eval is installed, in a release of :data:`SUPPORTED`, and importable; else one line saying what to do."""
    from packaging.specifiers import SpecifierSet  # packaging: a declared dependency
    from packaging.version import InvalidVersion, Version

    found = installed_version()
    if found is None:
        raise NeedlebenchError(f"eval needs lm-evaluation-harness; install it with `{INSTALL}`")
    try:
        supported = Version(found) in SpecifierSet(SUPPORTED)
    except InvalidVersion:
        supported = False
    if not supported:
        raise NeedlebenchError(
            f"lm-eval {found} is installed; needlebench eval supports lm-eval{SUPPORTED}; install it with `{INSTALL}`"
        )
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise NeedlebenchError(f"eval needs lm-evaluation-harness; install it with `{INSTALL}`") from None


# --------------------------------------------------------------------------------------------- public API


def lm_base() -> type:
    """lm-eval's model base class (``lm_eval/api/model.py``), for models passed to ``simple_evaluate`` or registered."""
    from lm_eval.api.model import LM

    return LM


def model_registry() -> Any:
    """lm-eval's model registry (``lm_eval/api/registry.py``), with its built-in models' lazy entries
    (``lm_eval/models/__init__.py``): ``name in registry``, ``registry.keys()``, ``registry.items()`` (a lazy entry's
    value is its ``module:Class`` path)."""
    import lm_eval.models  # noqa: F401  (registers the built-in lazy entries)
    from lm_eval.api.registry import model_registry as registry

    return registry


def register_model(name: str, cls: type) -> None:
    """Register ``cls`` as ``--model name`` (``lm_eval.api.registry.register_model``), unless the name is taken."""
    from lm_eval.api.registry import register_model as register

    if name not in model_registry():
        register(name)(cls)


def task_manager(include_path: str | list[str] | None = None, include_defaults: bool = True) -> Any:
    """lm-eval's task index (``lm_eval.tasks.TaskManager``); ``.all_tasks`` lists its task and group names."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=include_path, include_defaults=include_defaults)


def setup_logging() -> None:
    """lm-eval's logging set-up (``lm_eval/utils.py``), as its command line does before a run."""
    from lm_eval.utils import setup_logging as setup

    setup()


def parse_args_string(text: str) -> dict[str, Any]:
    """``key=value,key=value`` as lm-eval types it (``simple_parse_args_string`` in ``lm_eval/utils.py``)."""
    from lm_eval.utils import simple_parse_args_string

    return simple_parse_args_string(text)


def missing_task(error: BaseException) -> str | None:
    """The message of lm-eval's error for task names it indexes nowhere (:data:`TASKS_NOT_FOUND`), else None."""
    message = str(error)
    return message if isinstance(error, ValueError) and message.startswith(TASKS_NOT_FOUND) else None


def first_missing_task(message: str) -> str:
    """The first task name of lm-eval's :data:`TASKS_NOT_FOUND` message."""
    return message.removeprefix(TASKS_NOT_FOUND).split(", ")[0].strip()


# --------------------------------------------------------------------------------------------- private: command line
# lm-eval's command line (``lm_eval/_cli/``) is not a public API, but ``needlebench eval`` is lm-eval's command line
# with needlebench's options added: its parsers give the same options, defaults, merging and help as ``lm_eval``.


def add_cli_commands(subparsers: Any) -> None:
    """lm-eval's ``run``, ``ls`` and ``validate`` sub-command parsers, added as ``lm_eval/_cli/harness.py`` adds them
    (``Run.create``, ``List.create``, ``Validate.create`` of ``lm_eval/_cli/run.py``, ``ls.py``, ``validate.py``)."""
    from lm_eval._cli.ls import List
    from lm_eval._cli.run import Run
    from lm_eval._cli.validate import Validate

    for command in (Run, List, Validate):
        command.create(subparsers)


def is_dict_option(action: object) -> bool:
    """Whether a parser action is one of lm-eval's dict options (``--model_args``, ``--metadata``...): its
    ``MergeDictAction`` (``lm_eval/_cli/utils.py``), which merges repeated ``key=value``/JSON values."""
    from lm_eval._cli.utils import MergeDictAction

    return isinstance(action, MergeDictAction)


# lm-eval's ``EvaluatorConfig`` (``lm_eval/config/evaluate_config.py``) is what its ``run`` builds from the parsed
# options: its checks, its YAML loader and its field names are the ones ``needlebench eval`` must agree with.


def load_config_yaml(path: str) -> dict[str, Any]:
    """A ``--config`` YAML as lm-eval reads it (``EvaluatorConfig.load_yaml_config``)."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    return EvaluatorConfig.load_yaml_config(path)


def config_keys() -> list[str]:
    """The option names a ``--config`` YAML may set (the fields of ``EvaluatorConfig`` but ``config``)."""
    from dataclasses import fields

    from lm_eval.config.evaluate_config import EvaluatorConfig

    return [item.name for item in fields(EvaluatorConfig) if item.name != "config"]


def dict_config_keys() -> tuple[str, ...]:
    """The options lm-eval parses as ``key=value`` dicts (``DICT_KEYS``)."""
    from lm_eval.config.evaluate_config import DICT_KEYS

    return tuple(DICT_KEYS)


def check_options(namespace: Any) -> None:
    """lm-eval's own checks of a run's options (``EvaluatorConfig.from_cli``); raises its ValueError/TypeError."""
    from lm_eval.config.evaluate_config import EvaluatorConfig

    EvaluatorConfig.from_cli(namespace)


# --------------------------------------------------------------------------------------------- private: evaluator
# The chunked runner (:mod:`needlebench.evaluation.runner.chunked`) runs lm-eval's ``evaluate`` on chunks of a
# task's rows and aggregates the samples of all chunks once, with the helpers ``evaluate`` itself uses
# (``lm_eval/evaluator_utils.py``): the same numbers as one whole run, not a re-implementation of them.


def sample_size(task: Any, limit: float | None) -> int | None:
    """The rows of a task lm-eval evaluates under ``--limit`` (``get_sample_size``); None: all."""
    from lm_eval.evaluator_utils import get_sample_size

    return get_sample_size(task, limit)


def aggregate(accumulated: Mapping[str, Any], groups: Any, bootstrap_iters: int | None, log_samples: bool) -> Any:
    """lm-eval's results of evaluated tasks (``_process_results``, then ``EvalAcc._to_eval_results``), from each
    task's ``{"task", "raw_metrics", "logged_samples"}``, as the end of ``evaluate`` in ``lm_eval/evaluator.py``."""
    from lm_eval.evaluator_utils import _process_results

    results = _process_results(accumulated, groups, bootstrap_iters)
    return results._to_eval_results(samples=results.samples if log_samples else None)


def task_on_docs(task: Any, dataset: Mapping[str, Any]) -> Any:
    """A shallow copy of an lm-eval task that evaluates ``dataset`` (split -> rows) instead of its own: lm-eval
    caches a task's docs (``task_docs``, ``lm_eval/api/task.py``) and its requests (``_instances``) on the task."""
    chunk = copy.copy(task)
    chunk.dataset = dataset
    chunk.task_docs = chunk.eval_docs
    chunk._instances = None
    return chunk


# --------------------------------------------------------------------------------------------- private: replaced
# lm-eval's command line builds the task manager, the evaluator call, the results table, the git hash and the
# results folder's name itself, with no hook to change them: while ``needlebench eval run`` runs, the attributes
# below are replaced (and restored after it). Plain ``lm_eval`` is untouched.


@contextmanager
def _replaced(owner: object, name: str, value: Any) -> Iterator[Any]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield original
    finally:
        setattr(owner, name, original)


@contextmanager
def task_manager_replaced(make: Callable[[type], type]) -> Iterator[None]:
    """``lm_eval.tasks.TaskManager`` is ``make(TaskManager)`` while the block runs (lm-eval's CLI takes one
    ``--include_path`` and imports ``TaskManager`` from ``lm_eval.tasks`` when it builds one:
    ``lm_eval/config/evaluate_config.py``, ``lm_eval/_cli/ls.py``, ``validate.py``)."""
    import lm_eval.tasks

    with _replaced(lm_eval.tasks, "TaskManager", make(lm_eval.tasks.TaskManager)):
        yield


@contextmanager
def evaluate_replaced(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``lm_eval.evaluator.evaluate`` is ``make(evaluate)`` while the block runs (``simple_evaluate`` in
    ``lm_eval/evaluator.py`` calls it by its module-level name, with keywords only)."""
    import lm_eval.evaluator

    with _replaced(lm_eval.evaluator, "evaluate", make(lm_eval.evaluator.evaluate)):
        yield


@contextmanager
def results_table_replaced(make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """``lm_eval.utils.make_table`` is ``make(make_table)`` while the block runs (``lm_eval/_cli/run.py`` imports it
    from ``lm_eval.utils`` when it prints the results)."""
    import lm_eval.utils

    with _replaced(lm_eval.utils, "make_table", make(lm_eval.utils.make_table)):
        yield


@contextmanager
def git_hash_replaced(function: Callable[[], str | None]) -> Iterator[None]:
    """``get_git_commit_hash`` as ``simple_evaluate`` reads it (``lm_eval/evaluator.py`` imports it from
    ``lm_eval/loggers/utils.py``) is ``function`` while the block runs."""
    import lm_eval.evaluator

    with _replaced(lm_eval.evaluator, "get_git_commit_hash", function):
        yield


def commit_from_path(path: str) -> str | None:
    """lm-eval's fallback for the git hash: read from ``.git`` under ``path`` (``lm_eval/loggers/utils.py``)."""
    from lm_eval.loggers.utils import get_commit_from_path

    return get_commit_from_path(path)


# lm-eval names a run's results folder in ``GeneralConfigTracker.log_experiment_args``
# (``lm_eval/loggers/evaluation_tracker.py``): ``_get_model_name`` of the model args, sanitised.


@contextmanager
def model_logged(after: Callable[..., None]) -> Iterator[None]:
    """While the block runs, ``after(tracker, model_source, model_args, ...)`` runs once lm-eval's tracker has
    named the run's model (``GeneralConfigTracker.log_experiment_args``, called by ``simple_evaluate`` before it
    evaluates); blocks nest, the innermost's ``after`` runs last."""
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

    original = GeneralConfigTracker.log_experiment_args

    def log_experiment_args(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        after(self, *args, **kwargs)

    with _replaced(GeneralConfigTracker, "log_experiment_args", log_experiment_args):
        yield


def model_name(model_args: Any) -> str | None:
    """The model's name lm-eval reads from the model args (``pretrained=``, ``model=``...), or None."""
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker

    return GeneralConfigTracker._get_model_name(model_args)


def model_folder_name(name: str) -> str:
    """lm-eval's folder name for a model name (``sanitize_model_name`` in ``lm_eval/utils.py``)."""
    from lm_eval.utils import sanitize_model_name

    return sanitize_model_name(name)


def logged_model_folder(tracker: Any) -> str:
    """The results folder name a tracker gave the run's model."""
    return str(tracker.model_name_sanitized)


def name_logged_model(tracker: Any, name: str) -> None:
    """Give the run's model the name ``name`` (and its folder), as ``log_experiment_args`` names it."""
    tracker.model_name = name
    tracker.model_name_sanitized = model_folder_name(name)


# ``simple_evaluate`` (``lm_eval/evaluator.py``) builds the model first, by
# ``lm_eval.api.registry.get_model(model).create_from_arg_string(...)`` (or ``create_from_arg_obj``), then loads the
# tasks and calls ``evaluate``; after it, ``add_tokenizer_info`` (``lm_eval/loggers/utils.py``) copies the
# tokenizer's special tokens into the results. ``needlebench eval run --merge-shards`` never builds the model: it
# stands in for it with what the shards recorded (:mod:`needlebench.evaluation.runner.chunked`).


@contextmanager
def model_factory_replaced(make: Callable[[Callable[[str], Any]], Callable[[str], Any]]) -> Iterator[None]:
    """``lm_eval.api.registry.get_model`` is ``make(get_model)`` while the block runs (``simple_evaluate`` calls it by
    its module attribute: ``lm_eval.api.registry.get_model(model)``)."""
    import lm_eval.api.registry

    with _replaced(lm_eval.api.registry, "get_model", make(lm_eval.api.registry.get_model)):
        yield


def tokenizer_info(lm: Any) -> dict[str, Any]:
    """The tokenizer keys ``simple_evaluate`` adds to the results for ``lm`` (``add_tokenizer_info``), or {}."""
    from lm_eval.loggers.utils import add_tokenizer_info

    storage: dict[str, Any] = {}
    add_tokenizer_info(storage, lm)
    return storage
