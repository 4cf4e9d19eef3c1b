"""``needlebench eval``: lm-eval's own CLI with the needlebench models registered and the task folder included.

lm-eval has no plugin discovery for models, so a model registered in another package is unknown to the plain
``lm_eval`` command. :func:`run_eval` imports this module (which registers ``needlebench-oracle``) and then runs
``lm_eval.__main__.cli_evaluate()`` with every argument passed through; when no ``--include_path`` is given it
adds the repository's ``harness_tasks`` folder.

The oracle model answers every prompt perfectly from the dataset row it was built from: it proves that data
loading, prompts, generation plumbing, ``process_results`` and aggregations agree (every task scores 100, or
1.0 on Counting-Stars). lm-eval is imported lazily, so importing this module without lm-eval installed works
until a model is actually needed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.harness import loaded_rows, oracle_answer

#: Registered name of the oracle model (``--model needlebench-oracle``).
ORACLE_MODEL = "needlebench-oracle"

#: lm-eval sub-commands that accept ``--include_path``.
_INCLUDE_SUBCOMMANDS = ("run", "validate", "ls")


def default_include_path() -> Path | None:
    """The repository's ``harness_tasks`` folder (an editable install), or None when it is not there."""
    candidate = Path(__file__).resolve().parents[3] / "harness_tasks"
    return candidate if (candidate / "needlebench").is_dir() else None


def _has_option(argv: Sequence[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in argv)


def with_default_include_path(argv: Sequence[str], include_path: Path | None = None) -> list[str]:
    """``argv`` with ``--include_path`` added after the sub-command (or at the end, legacy form) if missing."""
    args = list(argv)
    path = include_path if include_path is not None else default_include_path()
    if path is None or not args or _has_option(args, "--include_path") or _has_option(args, "--help") or "-h" in args:
        return args
    if args[0] in _INCLUDE_SUBCOMMANDS:
        return [args[0], "--include_path", str(path), *args[1:]]
    if args[0].startswith("-"):
        return [*args, "--include_path", str(path)]
    return args


def _exit_status(code: object) -> int:
    """The integer status of a ``SystemExit`` code (None is 0, a message is 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_eval(argv: list[str]) -> int:
    """Run lm-eval's CLI on ``argv`` (e.g. ``["run", "--model", "hf", ...]``) with our models registered."""
    register_models()
    from lm_eval.__main__ import cli_evaluate

    saved = sys.argv
    sys.argv = ["lm-eval", *with_default_include_path(argv)]
    try:
        cli_evaluate()
    except SystemExit as exc:
        return _exit_status(exc.code)
    finally:
        sys.argv = saved
    return 0


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


@cache
def _oracle_class() -> type:
    """Define (once) and return the oracle ``LM`` subclass; importing lm-eval happens here."""
    from lm_eval.api.model import LM

    class NeedlebenchOracleLM(LM):
        """A model that answers each NeedleBench / Counting-Stars prompt with the row's correct answer."""

        def __init__(self, **_ignored: Any) -> None:
            super().__init__()

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            return oracle_answers(requests)

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
    import lm_eval.models  # noqa: F401  (the built-in lazy entries; get_model skips them once ours exists)
    from lm_eval.api.registry import model_registry, register_model

    cls = _oracle_class()
    if ORACLE_MODEL in model_registry:
        return
    register_model(ORACLE_MODEL)(cls)


def oracle_model() -> Any:
    """A ready oracle instance (for ``lm_eval.simple_evaluate(model=...)``)."""
    register_models()
    return _oracle_class()()
