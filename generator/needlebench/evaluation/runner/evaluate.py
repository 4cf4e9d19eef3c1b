"""``needlebench eval``: lm-eval's own CLI with the needlebench models registered and the task folder included.

lm-eval has no plugin discovery for models, so a model registered in another package is unknown to the plain
``lm_eval`` command. :func:`run_eval` registers ``needlebench-oracle``, parses the arguments with lm-eval's own
parser (plus needlebench's options, :mod:`needlebench.evaluation.runner.options`) and runs lm-eval's own command on
them; when no ``--include_path`` is given (on the command line or in a ``--config`` YAML) it adds the task folder
(:func:`needlebench.resources.tasks_path`), else it keeps that folder indexed beside the user's.

The oracle model answers every prompt perfectly from the dataset row it was built from: it proves that data
loading, prompts, generation plumbing, ``process_results`` and aggregations agree (every task scores 100, or
1.0 on Counting-Stars). lm-eval is imported lazily, so importing this module without lm-eval installed works
until a model is actually needed.
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness.task_export import foreign_files
from needlebench.evaluation.harness.tasks import loaded_rows, oracle_answer
from needlebench.evaluation.runner import lm_eval_seam, run_output
from needlebench.evaluation.runner.chunked import (
    ChunkOptions,
    ShardFinished,
    chunk_store,
    chunked_evaluation,
    stand_in_model,
)
from needlebench.evaluation.runner.engines import apply_api_defaults
from needlebench.evaluation.runner.guard import chunks_folder, prepare, write_health
from needlebench.evaluation.runner.options import check_run, known_tasks, parse_eval, unknown_task_message
from needlebench.evaluation.runner.quiet import lm_eval_output
from needlebench.resources import tasks_path
from needlebench.safe_fs import Folder
from needlebench.sources.cache import cache_folder, cache_root
from needlebench.terminal import printable

#: Registered name of the oracle model (``--model needlebench-oracle``).
ORACLE_MODEL = "needlebench-oracle"


def default_include_path() -> Path:
    """The needlebench task folder (``needlebench tasks-path``): the repository's, or the one installed with the
    package."""
    return tasks_path()


def run_eval(argv: list[str]) -> int:
    """Run lm-eval on ``argv`` (e.g. ``["run", "--model", "hf", ...]``) with our models registered; returns the
    exit status.

    The arguments are parsed by lm-eval's own parser with needlebench's options added
    (:mod:`needlebench.evaluation.runner.options`); a run is checked before it starts (options, task names,
    ``--metadata`` keys, ``--output_path``, then the length check of :mod:`needlebench.evaluation.runner.guard`),
    every refusal one line (:class:`NeedlebenchError`). Then lm-eval's own run command is called with the
    parsed options, the project's task folder included.
    """
    import time

    lm_eval_seam.require_lm_eval()

    _command, namespace, args = parse_eval(argv)
    if namespace is None:  # help was printed
        return 0
    register_models()

    user_include = getattr(namespace, "include_path", None)
    # before lm-eval indexes the folder (a FIFO named *.yaml would hang it) or imports anything of it
    foreign = foreign_files(Path(user_include)) if user_include and not _project_tasks(Path(user_include)) else []
    private_bytecode()
    prepared = None
    if args is not None:
        check_run(args)
        root = Path(user_include) if user_include else default_include_path()
        prepared = prepare(args, root)
        apply_api_defaults(prepared)
        namespace = prepared.namespace
    if getattr(namespace, "include_path", "") is None:
        namespace.include_path = str(default_include_path())
    chunking = None
    if prepared is not None:  # the chunked runner (issue 24): lm-eval's evaluate runs in chunks below
        chunking = ChunkOptions(chunk_rows=args.chunk_rows, chunked=args.chunked, full_samples=args.full_samples)
        chunking.store = chunk_store(prepared)
        chunking.read_store = args.resume
        if (args.shard or args.merge_shards) and prepared.output is not None:  # checked: --output_path is given
            chunking.store = prepared.output / chunks_folder(args)
            chunking.shard = args.shard
            # as --resume does (guard.prepare): a link planted at the store's folders is refused before the model loads
            with Folder.open(prepared.output, create=True) as folder, folder.sub(chunks_folder(args), create=True):
                pass
        if args.merge_shards:
            chunking.merge_from = [Path(folder).expanduser() / chunks_folder(args) for folder in args.merge_shards]
            prepared.namespace.use_cache = None  # nothing is asked of the model: no response cache
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        print(
            f"needlebench: --include_path {printable(user_include)} holds files needlebench did not write for you "
            f"({printable(shown)}): lm-eval runs the Python and reads the files its task YAMLs name, as you. Use task "
            "folders you wrote or made with `needlebench tasks`",
            file=sys.stderr,
        )
    for note in prepared.notes if prepared is not None else []:
        print(f"needlebench: {printable(note)}", file=sys.stderr)
    started = time.time()
    status = 0
    shard_done: ShardFinished | None = None
    managers: list[Any] = []
    if prepared is not None and prepared.output is not None:
        # lm-eval writes by path into a folder made for this run; its files are moved by descriptors at the end
        prepared.run = run_output.start(prepared.output)
        namespace.output_path = prepared.run.lm_eval_path
    try:
        if prepared is not None and prepared.run is not None:
            run_output.check_named_model_folder(prepared.run, getattr(namespace, "model_args", None))
        try:
            lm_eval_seam.setup_logging()
            defaults = args is None or not _only_known_tasks(args)
            with (
                lm_eval_output(ORACLE_MODEL),  # first: the model folder check below sees the oracle's folder name
                project_tasks_kept(user_include, managers=managers, defaults=defaults),
                run_output.model_folder_checked(prepared.run if prepared is not None else None),
                chunked_evaluation(chunking) if chunking else contextlib.nullcontext(),
                stand_in_model(chunking.merge_from) if chunking and chunking.merge_from else contextlib.nullcontext(),
            ):
                namespace.func(namespace)
        except ShardFinished as done:  # the shard's chunks are in its store; lm-eval wrote nothing
            shard_done = done
        except SystemExit as exc:
            status = _exit_status(exc.code)
        except ValueError as error:  # a task name lm-eval indexes nowhere: one line, with a did-you-mean
            missing = lm_eval_seam.missing_task(error)
            if missing is None:
                raise
            raise NeedlebenchError(_unknown_tasks(missing, managers)) from None
        except (TypeError, ModuleNotFoundError) as error:  # a model arg or package only the backend could check
            from needlebench.evaluation.runner.backends import late_error  # deferred: reads lm-eval's sources

            message = late_error(error, str(getattr(namespace, "model", "")), args.model_args if args else {})
            if message is None:
                raise
            raise NeedlebenchError(message) from None
        finally:
            for path in prepared.cleanup if prepared is not None else []:
                _remove_folder(path)
        if prepared is not None and status == 0 and shard_done is None:
            write_health(prepared, started)
    finally:
        if prepared is not None and prepared.run is not None:
            run_output.deliver(prepared.run)
    if shard_done is not None:
        print(f"needlebench: {printable(shard_done.summary())}", file=sys.stderr)
        command = merge_command(argv, prepared.output if prepared is not None and prepared.output else Path("."))
        print(
            f"needlebench: when every shard has finished, merge them (after --merge-shards: every shard's "
            f"--output_path, this one if they all wrote here): {printable(command)}",
            file=sys.stderr,
        )
    return status


def merge_command(argv: Sequence[str], output: Path) -> str:
    """The command merging a shard's run: ``argv`` without ``--shard``, with ``--merge-shards`` and the shard's
    output folder."""
    args = list(argv[1:] if argv and argv[0] == "run" else argv)
    kept = []
    for index, item in enumerate(args):
        if item == "--shard" or item.startswith("--shard=") or (index and args[index - 1] == "--shard"):
            continue
        kept.append(item)
    return f"needlebench eval run {shlex.join(kept)} --merge-shards {shlex.quote(str(output))}"


def private_bytecode() -> None:
    """Python's bytecode of the modules lm-eval imports (a task folder's ``utils.py``) is read and written under this
    user's private cache (``sys.pycache_prefix``, read by importlib at every import), never in a ``__pycache__`` of
    the task folder, where someone who handed the folder over could have planted a ``.pyc`` that runs instead of the
    ``utils.py`` beside it (its header names the source's size and time, both theirs to set)."""
    try:
        with cache_folder(cache_root() / "pycache") as folder:
            sys.pycache_prefix = str(folder.path)
    except (OSError, NeedlebenchError):  # no private cache folder: a new one of the run's (0700, mkdtemp)
        import tempfile

        sys.pycache_prefix = tempfile.mkdtemp(prefix="needlebench-pycache-")


def _project_tasks(path: Path) -> bool:
    """Whether `path` is the project's own task folder (``needlebench tasks-path``) or the folder holding it."""
    ours = default_include_path().resolve()
    try:
        return path.resolve() in (ours, ours.parent)
    except (OSError, RuntimeError, ValueError):
        return False


def _remove_folder(path: Path) -> None:
    """Remove a folder the run made (the ``--reasoning`` task folder), by descriptors from its parent: a link
    at its name is removed itself, nothing reached through a link is (:meth:`needlebench.safe_fs.Folder.rmtree`)."""
    with contextlib.suppress(OSError, NeedlebenchError), Folder.open(path.parent) as parent:
        parent.rmtree(path.name)


def _only_known_tasks(args: Any) -> bool:
    """Whether every task of a run is a needlebench task or group, or one of the user's ``--include_path``: then
    lm-eval need not index its own thousands of task YAMLs (seconds on an idle machine)."""
    if not args.tasks or any(task.endswith(".yaml") or Path(task).is_dir() for task in args.tasks):
        return False
    known = set(known_tasks(args.user_include_path))
    return all(task in known for task in args.tasks)


def _unknown_tasks(message: str, managers: Sequence[Any]) -> str:
    missing = lm_eval_seam.first_missing_task(message)
    known = list(managers[-1].all_tasks) if managers else []
    return unknown_task_message(missing, known)


def _exit_status(code: object) -> int:
    """The integer status of a ``SystemExit`` code (None is 0, a message is 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# --------------------------------------------------------------------------------------------- include_path


@contextmanager
def project_tasks_kept(
    user_include_path: str | None,
    include_path: Path | None = None,
    managers: list[Any] | None = None,
    defaults: bool = True,
) -> Iterator[None]:
    """While lm-eval runs, keep the project's task folder indexed beside a user's ``--include_path``.

    lm-eval's CLI takes one ``--include_path``, while its ``TaskManager`` takes a list; when the user names a
    folder of their own, ``lm_eval.tasks.TaskManager`` is wrapped for the duration so that it indexes the
    project's folder first and the user's after it (a user's task of the same name wins). Each task manager
    made meanwhile is appended to ``managers`` (its index names the tasks a mistyped name may have meant).
    ``defaults`` False leaves lm-eval's own task folder unindexed (a run of needlebench tasks only).
    """
    ours = include_path if include_path is not None else default_include_path()
    add_ours = bool(user_include_path) and ours is not None

    def with_project_tasks(original: type) -> type:
        class _WithProjectTasks(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, include_path: Any = None, **kwargs: Any) -> None:
                if add_ours:
                    paths = list(include_path) if isinstance(include_path, (list, tuple)) else [include_path]
                    include_path = [str(ours)] + [str(path) for path in paths if path and Path(path) != ours]
                if not defaults:
                    kwargs["include_defaults"] = False
                super().__init__(*args, include_path=include_path, **kwargs)
                if managers is not None:
                    managers.append(self)

        return _WithProjectTasks

    with lm_eval_seam.task_manager_replaced(with_project_tasks):
        yield


# --------------------------------------------------------------------------------------------- oracle model


class PromptIndex:
    """Dataset rows by prompt text: the rows of the requests, then every split lm-eval loaded in this process."""

    def __init__(self, docs: Iterable[Mapping[str, Any]]) -> None:
        self._rows: dict[str, Mapping[str, Any]] = {}
        self._loaded = False
        for doc in docs:
            self._add(doc)

    def _add(self, row: Mapping[str, Any]) -> None:
        prompt = row.get("prompt")
        if prompt:
            self._rows.setdefault(str(prompt), row)

    def _load_all(self) -> None:
        if not self._loaded:
            self._loaded = True
            for row in loaded_rows():
                self._add(row)

    def find(self, context: str) -> Mapping[str, Any]:
        """The row whose prompt is ``context``, or is contained in it (a chat template wraps the prompt)."""
        for attempt in range(2):
            row = self._rows.get(context)
            if row is not None:
                return row
            matches = [candidate for prompt, candidate in self._rows.items() if prompt in context]
            if matches:
                return max(matches, key=lambda candidate: len(str(candidate["prompt"])))
            if attempt == 0:
                self._load_all()
        raise NeedlebenchError(
            f"the oracle found no dataset row whose prompt matches a request ({len(context)} characters); "
            "the oracle answers only needlebench_* tasks"
        )


def oracle_answers(requests: Sequence[Any]) -> list[str]:
    """Answers for lm-eval ``generate_until`` requests, each looked up by its prompt text."""
    docs = [doc for doc in (getattr(request, "doc", None) for request in requests) if isinstance(doc, Mapping)]
    index = PromptIndex(docs)
    answers = []
    for request in requests:
        context = str(request.args[0])
        doc = getattr(request, "doc", None)
        if isinstance(doc, Mapping) and doc.get("prompt") and str(doc["prompt"]) in context:
            row: Mapping[str, Any] = doc  # fast path: the request's own row, verified by its prompt text
        else:
            row = index.find(context)
        answers.append(oracle_answer(row))
    return answers


#: What the oracle answers on a row it is told to get wrong (``wrong=`` model arg).
WRONG_ANSWER = "I do not know."


def _answered_wrongly(doc: Mapping[str, Any], share: float) -> bool:
    """Is this row among the ``share`` the oracle answers wrongly (by a hash of its id)?"""
    import hashlib

    digest = hashlib.sha256(str(doc.get("id", "")).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@cache
def _oracle_class() -> type:
    """Define (once) and return the oracle ``LM`` subclass; importing lm-eval happens here."""

    class NeedlebenchOracleLM(lm_eval_seam.lm_base()):  # type: ignore[misc]
        """A model that answers each NeedleBench / Counting-Stars prompt with the row's correct answer."""

        def __init__(
            self, delay: float | str = 0.0, request_log: str | None = None, wrong: float | str = 0.0, **_ignored: Any
        ) -> None:
            """``delay`` (seconds per request) and ``request_log`` (a file that gets one line per answered
            request: the row id) make a run observable: resume and progress checks use them. ``wrong`` (0..1)
            answers that share of the rows wrongly, chosen by a hash of the row id (the same rows in every run),
            so that scores, their spread and the aggregations have something to show."""
            super().__init__()
            self.delay = float(delay or 0.0)
            self.request_log = Path(request_log) if request_log else None
            self.wrong = float(wrong or 0.0)

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            import time

            answers = oracle_answers(requests)
            if self.wrong:
                answers = [
                    WRONG_ANSWER if _answered_wrongly(getattr(request, "doc", None) or {}, self.wrong) else answer
                    for request, answer in zip(requests, answers, strict=True)
                ]
            for request, answer in zip(requests, answers, strict=True):
                if self.delay:
                    time.sleep(self.delay)
                if self.request_log is not None:
                    doc = getattr(request, "doc", None) or {}
                    # appended by descriptor: a link at the name is refused, never written through
                    with Folder.open(self.request_log.parent) as folder:
                        folder.append_bytes(self.request_log.name, f"{doc.get('id', '')}\n".encode(), mode=0o644)
                # lm-eval's --use_cache stores each answer as it is produced, so a killed run keeps them
                self.cache_hook.add_partial("generate_until", request.args, answer)
            return answers

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[tuple[float, bool]]:
            raise NotImplementedError("the needlebench oracle only answers generate_until tasks")

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
            raise NotImplementedError("the needlebench oracle only answers generate_until tasks")

        @property
        def tokenizer_name(self) -> str:
            return ORACLE_MODEL

        def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
            """A plain template: the messages' contents, one per line (the prompt stays a substring)."""
            return "\n".join(str(message.get("content", "")) for message in chat_history)

    return NeedlebenchOracleLM


def register_models() -> None:
    """Register ``needlebench-oracle`` with lm-eval (idempotent); the built-in models stay available."""
    lm_eval_seam.register_model(ORACLE_MODEL, _oracle_class())  # built-in lazy entries stay; get_model skips them


def oracle_model() -> Any:
    """A ready oracle instance (for ``lm_eval.simple_evaluate(model=...)``)."""
    register_models()
    return _oracle_class()()
