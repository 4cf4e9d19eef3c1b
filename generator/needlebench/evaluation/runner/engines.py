"""Past one GPU: the engines ``needlebench eval`` runs on, and what long contexts need from lm-eval's models.

* **One endpoint.** Many GPUs are reached through one OpenAI-compatible URL: lm-eval's ``local-completions`` /
  ``local-chat-completions`` with ``base_url`` and ``num_concurrent``, whatever stands behind it: one ``vllm serve``,
  ``vllm serve --data-parallel-size N`` (replicas behind one API server, vLLM docs
  ``serving/data_parallel_deployment.md``) or ``vllm-router`` over several servers (its ``cache_aware`` policy keeps
  the rows that share a haystack on one replica). ``docs/scaling-out.md`` has the recipes and the measured routing.
  The home-made round-robin models of earlier versions (``needlebench-local-completions``, ``base_urls=A|B``) are
  gone; naming them is one line saying what to run instead.
* **No reload per chunk.** lm-eval's ``vllm`` model with ``data_parallel_size > 1`` builds a new ``LLM`` on every
  replica in every ``_model_generate`` call and shuts Ray down after it (``lm_eval/models/vllm_causallms.py``);
  ``needlebench eval run`` calls lm-eval once per chunk of rows, so the weights would load again on every GPU for
  every chunk. It is refused before anything loads, pointing at the data-parallel server.
* **Long-context defaults.** lm-eval's API models default to ``max_length=2048`` (longer prompts are
  left-truncated with a log line) and ``timeout=300`` seconds per request. When the user sets neither,
  :func:`apply_api_defaults` passes ``max_length`` = the window the server reports (the one the length check
  counts against) and a ``timeout`` that fits the longest row; one line says what was set, and the user's own
  values always win. A server that reports no window leaves lm-eval's 2048, which the length check then enforces.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner.guard import (
    API_MODELS,
    EvalArgs,
    PreparedRun,
    base_url,
    model_kind,
    server_max_model_len,
)

#: The models of earlier versions that sent request k to server k mod N (``base_urls=URL1|URL2``).
RETIRED_MODELS = {
    "needlebench-local-completions": "local-completions",
    "needlebench-local-chat-completions": "local-chat-completions",
}
#: What to run instead of a home-made splitter, in every refusal.
ONE_ENDPOINT = (
    "put the servers behind one endpoint (`vllm serve MODEL --data-parallel-size N`, or `vllm-router --worker-urls "
    "URL1 URL2 --policy cache_aware`) and pass its URL as base_url=; see docs/scaling-out.md"
)
#: lm-eval's own ``timeout`` of its API models (seconds per request, ``lm_eval/models/api_models.py``).
LM_EVAL_TIMEOUT = 300
#: Prompt tokens a second and generated tokens a second assumed for the default ``timeout``: a slow GPU at 1M
#: tokens (a request also waits for the ``num_concurrent - 1`` others a busy server prefills before it).
PREFILL_TOKENS_PER_SECOND = 1000
DECODE_TOKENS_PER_SECOND = 10


def check_engine(args: EvalArgs) -> None:
    """Refuse, in one line and before anything loads, the engines that would spread or reload by hand."""
    kind = model_kind(args)
    model_args = args.model_args
    if kind in RETIRED_MODELS:
        raise NeedlebenchError(
            f"--model {kind} (a round-robin over base_urls) is gone: {ONE_ENDPOINT}, with --model "
            f"{RETIRED_MODELS[kind]} and num_concurrent=C"
        )
    if "base_urls" in model_args:
        raise NeedlebenchError(
            f"base_urls={str(model_args['base_urls'])[:200]!r} is not a model arg any more: {ONE_ENDPOINT}"
        )
    if kind == "vllm":
        replicas = _whole(model_args.get("data_parallel_size"))
        if replicas is not None and replicas > 1:
            raise NeedlebenchError(
                f"--model vllm with data_parallel_size={replicas} loads the model again on every replica for every "
                "chunk of rows (lm-eval's vllm model builds its engines per call); serve it once with `vllm serve "
                f"MODEL --data-parallel-size {replicas} --tensor-parallel-size M` and run --model local-completions "
                "with base_url=http://HOST:PORT/v1/completions and num_concurrent=C, or use data_parallel_size=1 "
                "(see docs/scaling-out.md)"
            )


def _whole(value: Any) -> int | None:
    """A whole number from a model arg (lm-eval types ``2`` as an int, ``2.0`` as a float, a string otherwise), else
    None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip())  # lm-eval reads "2.0" as 2 (int(float(...)) in its vllm model)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


def api_defaults(args: EvalArgs, prepared: PreparedRun) -> tuple[dict[str, int], str | None]:
    """The ``max_length`` and ``timeout`` model args an API model gets when the user did not set them, and the
    line saying so (None when nothing is set)."""
    kind = model_kind(args)
    model_args = args.model_args
    if kind not in API_MODELS:
        return {}, None
    url = base_url(model_args)
    check = prepared.preflight
    window = server_max_model_len(url) if url else None
    added: dict[str, int] = {}
    said: list[str] = []
    if "max_length" not in model_args and window:
        added["max_length"] = window
        said.append(f"max_length={window} (the server's max_model_len)")
    if "timeout" not in model_args:
        longest = check.longest if check is not None and check.longest else None
        length = longest or _whole(model_args.get("max_length")) or window
        budget = check.budget if check is not None and check.budget else 0
        if length:
            concurrent = max(1, _whole(model_args.get("num_concurrent")) or 1)
            seconds = (length / PREFILL_TOKENS_PER_SECOND + budget / DECODE_TOKENS_PER_SECOND) * concurrent
            timeout = max(LM_EVAL_TIMEOUT, math.ceil(seconds))
            what = f"the longest row, {longest:,} prompt tokens" if longest else f"the window, {length:,} tokens"
            added["timeout"] = timeout
            said.append(
                f"timeout={timeout} s ({what}, at {PREFILL_TOKENS_PER_SECOND:,} prompt and "
                f"{DECODE_TOKENS_PER_SECOND} generated tokens a second, x num_concurrent {concurrent})"
            )
    if not said:
        return {}, None
    return added, f"{kind}: {' and '.join(said)}; set them in --model_args to choose"


def apply_api_defaults(prepared: PreparedRun) -> None:
    """Pass :func:`api_defaults` to lm-eval (the prepared namespace's ``model_args``) and note the line."""
    added, line = api_defaults(prepared.args, prepared)
    current = getattr(prepared.namespace, "model_args", None)
    if not added or not isinstance(current, (Mapping, type(None))):
        return
    prepared.namespace.model_args = {**(current or {}), **added}
    if line:
        prepared.notes.append(line)
