"""A model's chat template rendered with bounds: it comes with the model folder, from whoever made it.

transformers renders a chat template (Jinja) in jinja2's ``ImmutableSandboxedEnvironment``
(``_compile_jinja_template`` in ``transformers/utils/chat_template_utils.py``): the template cannot reach Python
objects beyond the data it is given, but it can loop (``range`` is capped at 100,000 items, so two nested loops run
10**10 times), build a huge string (``'x' * 10**10``), or raise (``raise_exception``, ``1/0``, an undefined
attribute). :func:`render` bounds the first two and turns the last into one line:

* **Time.** A real-time timer (``setitimer(ITIMER_REAL)``, see setitimer(2) and Python's ``signal`` module) raises
  in the main thread after :data:`SECONDS`; the handler runs between bytecodes, so a Jinja loop stops there.
* **Memory.** The address-space limit (``RLIMIT_AS``, getrlimit(2)) is lowered to what the process holds plus
  :data:`MEMORY_BYTES` while the template renders, so an allocation past it raises ``MemoryError`` instead of
  waking the OOM killer; the previous limit is restored afterwards.
* **Size.** The text it gives may hold the messages' text :data:`TIMES` times and :data:`EXTRA_CHARS` more
  characters; a longer one is refused before it is tokenized.
* **Errors.** Whatever the rendering raises is a :class:`~needlebench.errors.NeedlebenchError` naming the tokenizer
  source and the template's message (its first line, at most 300 characters; the CLI escapes control characters).

Both bounds apply in the main thread only (signals are delivered there; CPython's ``signal`` docs); elsewhere the
template renders without them, and its errors are still one line. An honest template renders a prompt in
milliseconds and a few megabytes, far from either bound.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from needlebench.errors import NeedlebenchError
from needlebench.sources.hf_tokenizer import error_summary

try:  # POSIX only (like setitimer): elsewhere the template renders without the memory bound
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

#: Seconds one rendering may take.
SECONDS = 10.0
#: Bytes of address space one rendering may add to the process.
MEMORY_BYTES = 4 << 30
#: Characters a rendering may add to the messages' text, beyond repeating it :data:`TIMES` times: a template that
#: writes a gigabyte within the bounds above would otherwise be tokenized next (honest ones add a few hundred).
EXTRA_CHARS = 4 << 20
TIMES = 4


class _TimeUp(Exception):
    """Raised by the timer's signal handler inside the rendering."""


def source_of(tokenizer: Any) -> str:
    """Where a tokenizer was read from: what :func:`needlebench.evaluation.runner.model_tokenizer.load_source` recorded,
    else transformers' ``name_or_path``."""
    for attribute in ("needlebench_source", "name_or_path"):
        try:
            value = getattr(tokenizer, attribute, None)
        except Exception:  # a tokenizer class of the folder may raise anything from __getattr__
            value = None
        if isinstance(value, str) and value:
            return value
    return "the tokenizer"


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    if not hasattr(signal, "setitimer"):  # pragma: no cover - not POSIX
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TimeUp

    previous = signal.signal(signal.SIGALRM, expire)
    outer = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if outer[0]:  # a timer set before goes on with the time it had left when the rendering began
            signal.setitimer(signal.ITIMER_REAL, *outer)


def _address_space() -> int | None:
    """Bytes of address space the process holds (``VmSize``, proc(5): ``/proc/self/statm`` in pages), or None."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def _memory_limit(extra: int) -> Iterator[None]:
    held = _address_space() if resource is not None else None
    if held is None:
        yield
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        yield
        return
    limit = held + extra
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def render(tokenizer: Any, messages: Sequence[dict[str, str]], **options: Any) -> str:
    """``tokenizer.apply_chat_template(messages, tokenize=False, **options)`` within :data:`SECONDS` and
    :data:`MEMORY_BYTES` (main thread); any failure is one line naming the tokenizer's source."""
    bounded = threading.current_thread() is threading.main_thread()
    try:
        if bounded:
            with _memory_limit(MEMORY_BYTES), _time_limit(SECONDS):
                rendered = tokenizer.apply_chat_template(list(messages), tokenize=False, **options)
        else:
            rendered = tokenizer.apply_chat_template(list(messages), tokenize=False, **options)
    except _TimeUp:
        raise NeedlebenchError(
            f"tokenizer {source_of(tokenizer)}: its chat template did not finish in {SECONDS:g} s"
        ) from None
    except MemoryError:
        raise NeedlebenchError(
            f"tokenizer {source_of(tokenizer)}: its chat template needed more than {MEMORY_BYTES >> 30} GiB"
        ) from None
    except NeedlebenchError:
        raise
    except Exception as exc:  # jinja2's TemplateError/UndefinedError, or anything the template's code raises
        raise NeedlebenchError(
            f"tokenizer {source_of(tokenizer)}: its chat template failed: {error_summary(exc)}"
        ) from None
    if not isinstance(rendered, str):
        raise NeedlebenchError(
            f"tokenizer {source_of(tokenizer)}: its chat template gave {type(rendered).__name__}, not text"
        )
    given = sum(len(str(message.get("content", ""))) for message in messages)
    if len(rendered) > TIMES * given + EXTRA_CHARS:
        raise NeedlebenchError(
            f"tokenizer {source_of(tokenizer)}: its chat template made {len(rendered)} characters of a message of "
            f"{given}; more than {TIMES} times the message and {EXTRA_CHARS} characters is not counted"
        )
    return rendered
