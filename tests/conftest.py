"""Shared fixtures: an isolated cache, the default corpora tokenised once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from support.sandbox import sandbox  # noqa: F401  (the fake HOME the hostile-input tests attack in)

# Keep the tests' caches (tokenised corpora, on-the-fly datasets) apart from a user's, but reuse them across
# runs on the same machine: the first tokenisation of the default corpora takes a few seconds.
os.environ.setdefault("NEEDLEBENCH_CACHE", str(Path.home() / ".cache" / "needlebench-tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def cl100k():
    from needlebench.sources.tokenizer import get_tokenizer

    return get_tokenizer()


@pytest.fixture(scope="session")
def english_corpus(cl100k):
    from needlebench.sources.haystacks import tokenized_for

    return tokenized_for(None, "en", "cl100k_base", 0)


@pytest.fixture(scope="session")
def chinese_corpus(cl100k):
    from needlebench.sources.haystacks import tokenized_for

    return tokenized_for(None, "zh", "cl100k_base", 0)


@pytest.fixture(autouse=True)
def _own_pycache_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process ``needlebench eval run`` points ``sys.pycache_prefix`` at the private cache (``private_bytecode``):
    put it back after each test, so where a later test expects bytecode is not decided by an earlier one."""
    monkeypatch.setattr(sys, "pycache_prefix", sys.pycache_prefix)


@pytest.fixture(autouse=True)
def _default_think_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no recorded reasoning policy: a task loaded by an earlier test (``load_dataset`` with a
    ``think_end``/``think_unclosed`` in its metadata) does not decide how a later test's hooks score."""
    from needlebench.evaluation.scoring import thinking

    monkeypatch.setattr(thinking, "_POLICIES", {})
