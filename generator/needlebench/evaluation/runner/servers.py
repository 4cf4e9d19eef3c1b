"""Several OpenAI-compatible servers behind one lm-eval model: requests spread round-robin over them.

The conventional way to evaluate 128k-1M contexts on many GPUs is N ``vllm serve`` replicas (tensor parallel
inside each) and lm-eval's ``local-completions`` / ``local-chat-completions`` with ``num_concurrent``. Those
models take one ``base_url``; ``needlebench-local-completions`` and ``needlebench-local-chat-completions`` are
the same models with ``base_urls=URL1|URL2|...`` (``|`` or spaces between URLs, because ``,`` separates model
args): request k goes to server ``k mod N``, so with ``num_concurrent=C`` every server holds about ``C/N``
requests at a time. Responses are cached through lm-eval's cache hook as each request finishes, as in the
parent models. lm-eval is imported when a model is built, never at import time.
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.runner import lm_eval_seam

COMPLETIONS_MODEL = "needlebench-local-completions"
CHAT_COMPLETIONS_MODEL = "needlebench-local-chat-completions"


def parse_base_urls(value: Any) -> list[str]:
    """``URL1|URL2`` (or a list, or spaces) into the list of URLs; at least one, each http(s)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").replace("|", " ").split()
    urls = [str(item).strip() for item in items if str(item).strip()]
    if not urls:
        raise NeedlebenchError(
            "base_urls is empty; pass base_urls=http://HOST:PORT/v1/completions|http://HOST2:PORT/v1/completions"
        )
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise NeedlebenchError(f"base_urls entry {url!r} is not an http(s) URL")
    return urls


class _RotatingSession:
    """An aiohttp session stand-in whose ``post`` sends each request to the next server in turn."""

    def __init__(self, session: Any, urls: itertools.cycle) -> None:
        self._session = session
        self._urls = urls

    def post(self, _url: str, **kwargs: Any) -> Any:
        return self._session.post(next(self._urls), **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def _spreading(base: type) -> type:
    """A subclass of an lm-eval API model that spreads requests over ``base_urls``."""

    class Spreading(base):  # type: ignore[misc, valid-type]
        def __init__(self, base_urls: Any = None, base_url: str | None = None, **kwargs: Any) -> None:
            urls = parse_base_urls(base_urls if base_urls is not None else base_url)
            super().__init__(base_url=urls[0], **kwargs)
            self.base_urls = urls
            self._url_cycle = itertools.cycle(urls)

        def model_call(self, messages: Any, **kwargs: Any) -> Any:
            self.base_url = next(self._url_cycle)  # synchronous path: one request at a time
            return super().model_call(messages, **kwargs)

        # lm-eval's amodel_call posts with ``session.post(self.base_url, json=..., ...)``
        # (tests/test_lm_eval_seam.py checks both signatures)
        async def amodel_call(self, session: Any, sem: Any, messages: Any, **kwargs: Any) -> Any:
            return await super().amodel_call(_RotatingSession(session, self._url_cycle), sem, messages, **kwargs)

    Spreading.__name__ = f"Spreading{base.__name__}"
    return Spreading


@cache
def model_classes() -> dict[str, type]:
    """Registered name -> class (defined once; lm-eval's API models need ``pip install 'lm-eval[api]'``)."""
    try:
        completions, chat_completions = lm_eval_seam.api_models()
    except ImportError as exc:
        raise NeedlebenchError(
            f"the server models need lm-eval's api extra ({exc.name} is missing); pip install 'lm-eval[api]'"
        ) from None
    return {COMPLETIONS_MODEL: _spreading(completions), CHAT_COMPLETIONS_MODEL: _spreading(chat_completions)}
