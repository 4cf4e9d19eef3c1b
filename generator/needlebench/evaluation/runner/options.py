"""The arguments of ``needlebench eval``: needlebench's own options with our parser, lm-eval's with lm-eval's.

needlebench's options (``--subset``, ``--no-length-check``, ``--skip-too-long``, ``--resume``, ``--reasoning``,
``--think-end``, ``--think-unclosed``, ``--chunk-rows``, ``--no-chunk``, ``--shard``, ``--merge-shards``,
``--full-samples``) are added as the first
group of lm-eval's own ``run`` parser (:func:`add_own_options`) and taken out of the parsed namespace before lm-eval
sees it; everything else is parsed by lm-eval's own sub-command parsers (``lm_eval/_cli/run.py``, ``ls.py``,
``validate.py``, as ``lm_eval/_cli/harness.py`` assembles them), so ``--model_args``/``--metadata``/
``--gen_kwargs`` are merged and typed exactly as lm-eval merges them. Every parse error is one line
(:class:`NeedlebenchError`, exit status 2), and ``--help`` lists needlebench's options first, then lm-eval's.

Then :func:`check_run` validates a run before anything starts: lm-eval's own cross-option checks
(``EvaluatorConfig`` of ``lm_eval/config/evaluate_config.py``), the ``--model`` name and the needlebench task
names (each with a did-you-mean), the ``--metadata`` keys the tasks read, and ``--output_path``. A ``--config``
YAML fills the options the command line left unset first (:func:`fill_from_config`), so its settings get the
same merging and checks.
"""

from __future__ import annotations

import argparse
import json
import logging
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.subset import SUBSET_KEY, parse_subset
from needlebench.evaluation.harness.tasks import TASK_PREFIX, all_group_names, all_task_names
from needlebench.evaluation.runner import lm_eval_seam
from needlebench.evaluation.runner.engines import check_engine
from needlebench.evaluation.runner.guard import WINDOWLESS_MODELS, EvalArgs, needlebench_configs
from needlebench.evaluation.scoring.thinking import THINK_END_KEY, THINK_UNCLOSED_KEY, UNCLOSED_CHOICES, policy_from

#: lm-eval's sub-commands (``lm-eval run|ls|validate``); a command line starting with an option is a ``run``.
SUBCOMMANDS = ("run", "ls", "validate")
#: The ``--metadata`` keys the needlebench tasks read (``harness.load_dataset``; ``repo_id`` is refused there
#: with the name of its replacement).
METADATA_KEYS = (
    "data_dir",
    "data_repo",
    "data_revision",
    "release_seed",
    "context_lengths",
    "subset",
    THINK_END_KEY,
    THINK_UNCLOSED_KEY,
    "repo_id",
)
#: Hint appended to every parse error.
HELP_HINT = "see `needlebench eval run --help`"


class _OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one-line :class:`NeedlebenchError` (exit status 2), not usage dumps.

    lm-eval's sub-command parsers are made with ``add_parser`` from a root of this class, so they are too."""

    def error(self, message: str) -> NoReturn:
        raise NeedlebenchError(f"{message}; see `{self.prog} --help`")


def _positive_tokens(value: str) -> str:
    if value != "double" and not (value.isdigit() and int(value) > 0):  # argparse passes the const through too
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a positive number of tokens; use --reasoning (doubles) or --reasoning N"
        )
    return value


def _unclosed(value: str) -> str:
    if value not in UNCLOSED_CHOICES:
        raise argparse.ArgumentTypeError(f"{value!r} is not allowed; allowed: {', '.join(UNCLOSED_CHOICES)}")
    return value


def _chunk_rows(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of rows, e.g. --chunk-rows 16")
    return int(value)


def _shard(value: str) -> tuple[int, int]:
    """``i/N`` of ``--shard``: this job's share (1 <= i <= N) of a run cut into N shards."""
    index, slash, count = value.partition("/")
    if slash and index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count):
        return int(index), int(count)
    raise argparse.ArgumentTypeError(
        f"{value!r} is not a shard; allowed: i/N with 1 <= i <= N (e.g. --shard 2/4: the second of 4 jobs)"
    )


def _rows(value: str) -> int:
    try:
        number = parse_subset(value)
    except NeedlebenchError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if number is None:  # "0": the metadata's "no subset", but --subset 0 would silently run every row
        raise argparse.ArgumentTypeError(f"{value!r} is not a positive number of rows per task, e.g. --subset 40")
    return number


#: Prefix of the ``dest`` of needlebench's options in the parsed namespace (taken out before lm-eval runs).
OWN_PREFIX = "needlebench_"


def add_own_options(parser: argparse.ArgumentParser) -> None:
    """needlebench's options of ``eval run``, as the first group of lm-eval's run parser (after ``-h``)."""
    group = parser.add_argument_group("needlebench options")
    group.add_argument(
        "--subset",
        dest=OWN_PREFIX + "subset",
        type=_rows,
        metavar="N",
        help="keep N rows per task, stratified over lengths, depths and needle counts (fixed seed)",
    )
    group.add_argument(
        "--no-length-check",
        dest=OWN_PREFIX + "length_check",
        action="store_false",
        default=True,
        help="skip the check that every prompt fits the model's window (lm-eval then left-truncates silently)",
    )
    group.add_argument(
        "--skip-too-long",
        dest=OWN_PREFIX + "skip_too_long",
        action="store_true",
        help="run the rows that fit the model's window and record how many were skipped (default: refuse)",
    )
    group.add_argument(
        "--resume",
        dest=OWN_PREFIX + "resume",
        action="store_true",
        help="keep every answer in a cache under --output_path; the same command run again skips finished rows",
    )
    group.add_argument(
        "--reasoning",
        dest=OWN_PREFIX + "reasoning",
        nargs="?",
        const="double",
        type=_positive_tokens,
        metavar="N",
        help="reasoning models: double every task's max_gen_toks, or set it to N",
    )
    group.add_argument(
        "--think-end",
        dest=OWN_PREFIX + "think_end",
        metavar="MARK",
        help="end-of-reasoning marker; text up to it is stripped before scoring (default '</think>'; '' keeps all)",
    )
    group.add_argument(
        "--think-unclosed",
        dest=OWN_PREFIX + "think_unclosed",
        type=_unclosed,
        metavar="keep|empty",
        help="what the default metrics score of a reasoning block never closed: its text (keep, default) or nothing",
    )
    group.add_argument(
        "--chunk-rows",
        dest=OWN_PREFIX + "chunk_rows",
        type=_chunk_rows,
        metavar="N",
        help="run each task in chunks of N rows (default: chunks of about 8M context tokens; bounded memory)",
    )
    group.add_argument(
        "--no-chunk",
        dest=OWN_PREFIX + "chunked",
        action="store_false",
        default=True,
        help="run each task whole, as plain lm-eval does",
    )
    group.add_argument(
        "--shard",
        dest=OWN_PREFIX + "shard",
        type=_shard,
        metavar="i/N",
        help="run only shard i of N (a job of a scheduler array: sbatch --array=1-4 with "
        "--shard $SLURM_ARRAY_TASK_ID/4): every task is cut into its chunks as usual, the chunks are numbered "
        "1, 2, ... over the tasks in order and "
        "shard i runs chunks i, i+N, i+2N... into the --resume chunk store under --output_path (each chunk file "
        "signed with this user's secret, ~/.config/needlebench/secret.key: give every job the same one, e.g. a shared "
        "HOME or XDG_CONFIG_HOME). A shard writes no results file; with --resume it runs only its missing chunks",
    )
    group.add_argument(
        "--merge-shards",
        dest=OWN_PREFIX + "merge_shards",
        nargs="+",
        metavar="OUT",
        help="after every shard finished: the same command without --shard, plus --merge-shards and the shards' "
        "--output_path folders (one, if they all wrote there): reads every chunk of the run from their chunk stores "
        "(only chunk files this user signed), refuses naming the chunks missing, and writes the results and samples "
        "into --output_path as an unsharded run does; the model is never loaded (the length check still reads its "
        "tokenizer and window, as the shards did)",
    )
    group.add_argument(
        "--full-samples",
        dest=OWN_PREFIX + "full_samples",
        action="store_true",
        help="log samples with their prompts (default: lean logs without the prompt text; see `needlebench show`)",
    )
    parser._action_groups.remove(group)
    parser._action_groups.insert(2, group)  # after "positional arguments" and "options" (-h)


class _JsonChecked(argparse.Action):
    """Wraps one of lm-eval's dict actions (``MergeDictAction``): a value that is broken JSON becomes an
    argparse error naming the option, the value and what JSON reports, instead of a traceback."""

    def __init__(self, inner: argparse.Action) -> None:
        self.__dict__.update(inner.__dict__)
        self._inner = inner

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        first = values[0] if isinstance(values, list) and values else values
        if isinstance(first, str) and first.lstrip().startswith("{"):
            try:
                parsed = json.loads(first)
            except json.JSONDecodeError as error:
                raise argparse.ArgumentError(
                    self,
                    f"{first[:80]!r} is not valid JSON ({error.msg} at column {error.colno}); "
                    'write it as \'{"key": "value"}\' with double quotes, or key=value',
                ) from None
            if not isinstance(parsed, dict):
                raise argparse.ArgumentError(self, f"{first[:80]!r} is not a JSON object")
        try:
            self._inner(parser, namespace, values, option_string)
        except ValueError as error:
            raise argparse.ArgumentError(self, str(error).splitlines()[0]) from None


def _check_json(parser: argparse.ArgumentParser) -> None:
    """Wrap every dict option of ``parser`` (``--model_args``, ``--metadata``, ``--gen_kwargs``...) in
    :class:`_JsonChecked`."""
    for index, action in enumerate(parser._actions):
        if not lm_eval_seam.is_dict_option(action):
            continue
        wrapped = _JsonChecked(action)
        parser._actions[index] = wrapped
        for group in parser._action_groups:
            group._group_actions[:] = [wrapped if item is action else item for item in group._group_actions]
        for option in action.option_strings:
            parser._option_string_actions[option] = wrapped


def lm_eval_parser() -> tuple[_OneLineParser, dict[str, _OneLineParser]]:
    """lm-eval's command-line parser (its ``run``, ``ls`` and ``validate`` sub-commands, as
    ``lm_eval/_cli/harness.py`` assembles them), with one-line errors, and needlebench's options as the first
    group of ``run``."""
    root = _OneLineParser(
        prog="needlebench eval",
        description="lm-eval's command line with needlebench's models and tasks. `needlebench eval run --help` lists "
        "the options of a run: needlebench's own (--subset, --no-length-check, --skip-too-long, --resume, "
        "--reasoning, --think-end, --think-unclosed, --chunk-rows, --no-chunk, --shard, --merge-shards, "
        "--full-samples), then lm-eval's.",
    )
    subparsers = root.add_subparsers(dest="command", metavar="COMMAND")
    lm_eval_seam.add_cli_commands(subparsers)
    choices: dict[str, _OneLineParser] = dict(subparsers.choices)
    run = choices["run"]
    run.prog = "needlebench eval run"
    run.description = textwrap.fill(
        "lm-eval's run with needlebench's models (needlebench-oracle) and tasks (needlebench_<config>). "
        "needlebench's own options come first; every other option is lm-eval's, passed through.",
        width=80,
    )
    run.usage = "needlebench eval [run] --model <model> --tasks <task,...> [needlebench options] [lm-eval options]"
    run.epilog = (
        "other commands: `needlebench eval ls tasks|groups|subtasks|tags` lists lm-eval's tasks (with needlebench's), "
        "`needlebench eval validate --tasks T` checks task configs."
    )
    add_own_options(run)
    _check_json(run)
    return root, choices


def parse_eval(argv: Sequence[str]) -> tuple[str, argparse.Namespace | None, EvalArgs | None]:
    """Parse ``needlebench eval ARGS``: (sub-command, lm-eval's namespace, the run's :class:`EvalArgs`).

    The namespace is None after help was printed; EvalArgs is None unless the command is ``run``.
    ``--subset N``, ``--think-end`` and ``--think-unclosed`` are merged into ``--metadata`` (as lm-eval merges its own
    ``--metadata`` occurrences): the tasks read them there, as they do in a plain ``lm_eval`` run."""
    args = list(argv)
    if args and args[0] not in (*SUBCOMMANDS, "-h", "--help"):
        args.insert(0, "run")  # lm-eval's legacy form: options without a sub-command run
    root, choices = lm_eval_parser()
    if args in ([], ["run"], ["-h"], ["--help"]):  # `eval [run] [--help]`: the run's options, as lm-eval's `run`
        choices["run"].print_help()
        return "run", None, None
    try:
        namespace, unknown = root.parse_known_args(args)
    except SystemExit as stop:  # --help printed (argparse exits 0 after it)
        if stop.code not in (0, None):
            raise
        return args[0], None, None
    if unknown:
        raise NeedlebenchError(unrecognized_message(unknown, choices.get(namespace.command) or root))
    if namespace.command != "run":
        return namespace.command, namespace, None
    own = {
        name.removeprefix(OWN_PREFIX): vars(namespace).pop(name)
        for name in list(vars(namespace))
        if name.startswith(OWN_PREFIX)
    }
    if getattr(namespace, "config", None):
        fill_from_config(namespace)
    subset = merge_subset(namespace, own["subset"])
    merge_thinking(namespace, own["think_end"], own["think_unclosed"])
    if own["chunk_rows"] is not None and not own["chunked"]:
        raise NeedlebenchError("give --chunk-rows or --no-chunk, not both")
    check_sharding(namespace, own["shard"], own["merge_shards"], own["chunked"])
    parsed = EvalArgs(
        namespace=namespace,
        think_unclosed=own["think_unclosed"],
        chunk_rows=own["chunk_rows"],
        chunked=own["chunked"],
        full_samples=own["full_samples"],
        shard=own["shard"],
        merge_shards=own["merge_shards"],
        skip_too_long=own["skip_too_long"],
        length_check=own["length_check"],
        resume=own["resume"],
        think_end=own["think_end"],
        reasoning=own["reasoning"],
        subset=subset,
        user_include_path=namespace.include_path,
    )
    return "run", namespace, parsed


def check_sharding(
    namespace: argparse.Namespace, shard: tuple[int, int] | None, merge: list[str] | None, chunked: bool
) -> None:
    """``--shard`` and ``--merge-shards`` work on the chunks of the chunk store under ``--output_path``."""
    for option, given in (("--shard", shard), ("--merge-shards", merge)):
        if given is None:
            continue
        if not chunked:
            raise NeedlebenchError(f"{option} works on chunks of rows; give {option} or --no-chunk, not both")
        if not getattr(namespace, "output_path", None):
            raise NeedlebenchError(
                f"{option} needs --output_path (the shards' chunks are kept under it, the merged results written there)"
            )
    if shard is not None and merge is not None:
        raise NeedlebenchError("give --shard (run one shard) or --merge-shards (merge the finished shards), not both")


def _spelling(option: str) -> str:
    """An option's name without its dashes and with ``-`` and ``_`` alike (needlebench's options are written
    with hyphens, lm-eval's with underscores: ``--skip-too-long``, ``--output_path``)."""
    return option.lstrip("-").replace("-", "_").lower()


def suggest_option(given: str, options: Sequence[str]) -> str | None:
    """The option a mistyped one meant: the same name in the other spelling (``--output-path`` for
    ``--output_path``), else the closest long option (rapidfuzz, as :func:`_closest`)."""
    name = given.split("=", 1)[0]
    longs = [option for option in options if option.startswith("--")]
    same = [option for option in longs if _spelling(option) == _spelling(name)]
    if same:
        return same[0]
    by_spelling = {_spelling(option): option for option in longs}
    match = _closest(_spelling(name), list(by_spelling))
    return by_spelling[match] if match else None


def unrecognized_message(unknown: Sequence[str], parser: argparse.ArgumentParser) -> str:
    """argparse's "unrecognized arguments" with a did-you-mean for the first option that has one."""
    options = list(parser._option_string_actions)
    hint = ""
    for given in unknown:
        if given.startswith("--") and (suggestion := suggest_option(given, options)):
            hint = f"did you mean {suggestion}? "
            break
    return f"unrecognized arguments: {' '.join(unknown)}; {hint}see `{parser.prog} --help`"


def fill_from_config(namespace: argparse.Namespace) -> None:
    """Fill the options the command line left unset from the ``--config`` YAML, then drop ``--config``.

    lm-eval merges a YAML config under the command line by whole top-level keys (``EvaluatorConfig.from_cli`` in
    ``lm_eval/config/evaluate_config.py``: an option given on the command line replaces the YAML's key, e.g. a
    ``--metadata`` replaces the YAML's whole ``metadata``). The same merge is done here, with lm-eval's own loader,
    before needlebench adds to the options (``--subset`` into ``metadata``, the project's task folder beside an
    ``include_path``) and before the checks of :func:`check_run`, so that a YAML's settings are kept and checked
    like the command line's."""
    path = namespace.config
    try:
        loaded = lm_eval_seam.load_config_yaml(path)
    except (OSError, ValueError, TypeError) as error:
        message = (str(error).splitlines() or [type(error).__name__])[0]
        raise NeedlebenchError(f"--config {path}: {message}; give a YAML file of lm-eval options") from None
    allowed = lm_eval_seam.config_keys()
    dict_keys = lm_eval_seam.dict_config_keys()
    for key, value in loaded.items():
        if key not in allowed:
            suggestion = _closest(str(key), allowed)
            hint = f"did you mean {suggestion}? " if suggestion else ""
            raise NeedlebenchError(
                f"--config {path}: key {key!r} is not an lm-eval option; {hint}allowed: {', '.join(allowed)}"
            )
        current = getattr(namespace, key, None)
        if current or current == 0:  # given on the command line (lm-eval's test of a given option)
            continue
        if key in dict_keys and isinstance(value, str):
            value = lm_eval_seam.parse_args_string(value)
        elif key == "tasks" and isinstance(value, str):
            value = [task.strip() for task in value.split(",") if task.strip()]
        setattr(namespace, key, value)
    namespace.config = None  # every setting is in the namespace now: lm-eval runs on exactly what was checked


def merge_subset(namespace: argparse.Namespace, given: int | None) -> int | None:
    """The rows per task of a run, from ``--subset`` or a ``subset`` in ``--metadata`` (normalised to an int
    there, as the tasks read it); refused beside ``--limit``/``--samples`` either way."""
    metadata = dict(namespace.metadata) if isinstance(namespace.metadata, dict) else {}
    written = metadata.get(SUBSET_KEY)
    try:
        in_metadata = parse_subset(written)
    except NeedlebenchError as error:
        raise NeedlebenchError(f"--metadata {error}") from None
    if given is not None and in_metadata not in (None, given):
        raise NeedlebenchError(f"--subset {given} and --metadata subset={written!r} disagree; pass only one of them")
    subset = given if given is not None else in_metadata
    if subset is None:
        return None
    source = "--subset" if given is not None else "--metadata subset"
    for option in ("limit", "samples"):
        if getattr(namespace, option, None) not in (None, ""):
            raise NeedlebenchError(f"{source} and --{option} both choose rows; pass only one of them")
    namespace.metadata = {**metadata, SUBSET_KEY: subset}
    return subset


def merge_thinking(namespace: argparse.Namespace, end: str | None, unclosed: str | None) -> None:
    """``--think-end`` / ``--think-unclosed`` into ``--metadata`` as ``think_end`` / ``think_unclosed``, the keys the
    task loader reads (:func:`needlebench.evaluation.scoring.thinking.policy_from`); a ``--metadata`` giving another
    value for the same key is refused."""
    given = [(option, key, value) for option, key, value in (
        ("--think-end", THINK_END_KEY, end),
        ("--think-unclosed", THINK_UNCLOSED_KEY, unclosed),
    ) if value is not None]  # fmt: skip
    if not given:
        return
    metadata = dict(namespace.metadata) if isinstance(namespace.metadata, dict) else {}
    for option, key, value in given:
        if key in metadata and metadata[key] != value:
            raise NeedlebenchError(
                f"{option} {value!r} and --metadata {key}={metadata[key]!r} disagree; pass only one of them"
            )
        metadata[key] = value
    namespace.metadata = metadata


# --------------------------------------------------------------------------------------------- checks before a run


def _closest(name: str, choices: Sequence[str]) -> str | None:
    """The choice closest to a mistyped name (rapidfuzz ratio >= 80, as `needlebench build` suggests configs)."""
    from rapidfuzz import fuzz, process

    match = process.extractOne(name, list(choices), scorer=fuzz.ratio, score_cutoff=80)
    return match[0] if match else None


def known_tasks(user_include_path: str | None) -> list[str]:
    """The needlebench task and group names, and those of the user's ``--include_path`` (indexed without
    lm-eval's own task folder, which takes seconds)."""
    names = [*all_task_names(), *all_group_names()]
    if user_include_path:
        names += lm_eval_seam.task_manager(include_path=user_include_path, include_defaults=False).all_tasks
    return names


#: Language slips in a task name: the needlebench configs name Chinese ``zh`` and English ``en``.
LANGUAGE_SLIPS = {"cn": "zh", "chinese": "zh", "ch": "zh", "english": "en", "eng": "en"}
#: How close an unprefixed name must be to a needlebench config to be taken for it before lm-eval's own tasks are
#: indexed (lm-eval 0.4.13's closest task to a config is ``arc_zh``, 83 from ``atc_zh``).
UNPREFIXED_CUTOFF = 90


def _language_fixed(task: str) -> str:
    return "_".join(LANGUAGE_SLIPS.get(part.lower(), part) for part in task.split("_"))


def suggest_task(task: str, known: Sequence[str], loose: bool = True) -> str | None:
    """The task a mistyped name meant: with ``cn`` read as ``zh`` and the ``needlebench_`` prefix added when it is
    missing (``single_cn_4k`` -> ``needlebench_single_zh_4k``), else the closest name (for a name without the
    prefix: a needlebench config within :data:`UNPREFIXED_CUTOFF`, then, when ``loose``, any name)."""
    known_set = set(known)
    fixed = _language_fixed(task)
    prefixed = task.startswith(TASK_PREFIX)
    for candidate in (fixed, f"{TASK_PREFIX}{fixed}"):
        if candidate != task and candidate in known_set:
            return candidate
    if prefixed:
        return _closest(fixed, known)
    from rapidfuzz import fuzz, process

    ours = [name.removeprefix(TASK_PREFIX) for name in known if name.startswith(TASK_PREFIX)]
    match = process.extractOne(fixed, ours, scorer=fuzz.ratio, score_cutoff=UNPREFIXED_CUTOFF)
    if match:
        return f"{TASK_PREFIX}{match[0]}"
    return _closest(fixed, known) if loose else None


def check_tasks(args: EvalArgs) -> None:
    """An unknown ``needlebench_*`` task name is a one-line error with a did-you-mean, and so is a name that is
    a needlebench task without its prefix or with ``cn`` for ``zh`` (at once: lm-eval's own task index takes
    seconds); other names are lm-eval's to check (see :func:`unknown_task_message`)."""
    if not args.tasks:
        raise NeedlebenchError(
            "no --tasks given; e.g. --tasks needlebench_single_en_4k (a comma-separated list); run "
            "`needlebench list` for the configs (task needlebench_<config>)"
        )
    known = known_tasks(args.user_include_path)
    known_set = set(known)
    for task in args.tasks:
        if task in known_set or task.endswith(".yaml") or Path(task).is_dir():
            continue
        if task.startswith(TASK_PREFIX.rstrip("_")):
            raise NeedlebenchError(unknown_task_message(task, known))
        if suggest_task(task, known, loose=False) is not None:  # a needlebench task meant: said before lm-eval indexes
            raise NeedlebenchError(unknown_task_message(task, known))


def unknown_task_message(task: str, known: Sequence[str]) -> str:
    suggestion = suggest_task(task, known)
    hint = f"did you mean {suggestion}? " if suggestion else ""
    return (
        f"unknown task {task!r}; {hint}run `needlebench list` for the configs (task needlebench_<config>) or "
        "`needlebench eval ls tasks` for every task"
    )


def check_metadata(args: EvalArgs) -> None:
    """``--metadata`` keys the needlebench tasks do not read are refused (only when every task is a needlebench
    one: other tasks read keys of their own). The keys lm-eval merges in from ``--model_args`` are not checked."""
    written = dict(args.metadata)
    policy_from(written, "--metadata")  # a bad think_end / think_unclosed: one line before anything runs
    if args.subset is not None:
        written.pop("subset", None)
    if not written or not args.tasks:
        return
    if any(not needlebench_configs([task]) for task in args.tasks):
        return
    unknown = [key for key in written if key not in METADATA_KEYS]
    if unknown:
        allowed = ", ".join(key for key in METADATA_KEYS if key != "repo_id")
        raise NeedlebenchError(
            f"--metadata key {unknown[0]!r} is not read by the needlebench tasks; allowed: {allowed}"
        )


def check_output(args: EvalArgs) -> None:
    """``--output_path`` must be a folder, or a path where one can be made."""
    value = args.value("output_path")
    if not value:
        return
    path = Path(str(value)).expanduser()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is an existing file" if existing == path else f"lies below the file {existing}"
        raise NeedlebenchError(
            f"--output_path {value} {where}; give a folder (lm-eval writes results_<date>.json and the samples "
            "under it)"
        )


def check_lm_eval(namespace: argparse.Namespace) -> None:
    """lm-eval's own checks of a run's options (``EvaluatorConfig.from_cli``: tasks given, ``--log_samples``
    with ``--output_path``, ``--samples`` or ``--limit``, seeds...), as one line before anything starts."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # its warnings (e.g. about --limit) are logged again when the run starts
    try:
        lm_eval_seam.check_options(argparse.Namespace(**vars(namespace)))
    except (ValueError, TypeError) as error:
        message = (str(error).splitlines() or [type(error).__name__])[0]
        raise NeedlebenchError(f"lm-eval refuses the options: {message}; {HELP_HINT}") from None
    finally:
        logging.disable(previous)


def check_model(args: EvalArgs) -> None:
    """``--model`` must be a name in lm-eval's model registry (``lm_eval.api.registry.model_registry``, with
    needlebench's models registered: :func:`needlebench.evaluation.runner.evaluate.register_models`), with a
    did-you-mean."""
    model_registry = lm_eval_seam.model_registry()
    model = args.value("model")
    if not model or model in model_registry:
        return
    names = sorted(model_registry.keys())
    suggestion = _closest(str(model), names)
    hint = f"did you mean {suggestion}? " if suggestion else ""
    raise NeedlebenchError(f"unknown model {model!r}; {hint}allowed: {', '.join(names)}")


def check_backend(args: EvalArgs) -> None:
    """The ``--model`` backend's packages are installed, and it takes every ``--model_args`` key and the model
    folder it is given (:mod:`needlebench.evaluation.runner.backends`: read from its source, nothing imported)."""
    from needlebench.evaluation.runner.backends import (  # deferred: reads lm-eval's sources; eval --help needs none
        check_installed,
        check_model_args,
        check_model_folder,
    )

    model = str(args.value("model") or "")
    if not model:
        return
    check_installed(model)
    check_model_args(model, args.model_args, skip=WINDOWLESS_MODELS)
    check_model_folder(model, args.model_args)


def check_run(args: EvalArgs) -> None:
    """Every check that needs no model and no data, in the order a user would fix them (needlebench's models
    registered first)."""
    check_engine(args)
    check_model(args)
    check_backend(args)
    check_lm_eval(args.namespace)
    check_tasks(args)
    check_metadata(args)
    check_output(args)
