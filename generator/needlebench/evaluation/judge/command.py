"""``needlebench judge``: rescore logged lm-eval samples with a model judge on Inspect NIAH's 1-10 rubric.

Any OpenAI-compatible chat endpoint works (``vllm serve MODEL`` is the usual one). Only the question, the reference
answer and the model's answer are sent, never the long context. Requests run concurrently; each must finish
within ``--timeout`` seconds in all (a server that trickles bytes is cut there) and its body may not exceed
:data:`MAX_REPLY_BYTES`. Transient failures (HTTP 408/429/5xx, refused or dropped connections, timeouts) are
retried with bounded exponential backoff. Every reply of the judge model is a verdict and is cached
(``.needlebench-judge-cache.jsonl`` in the results folder, keyed by judge model and the three texts), so an
interrupted run resumes where it stopped; a request that never got a reply is not cached, its row stays unjudged
and a rerun asks again. ATC and Counting-Stars rows are never sent: the report keeps their rule scores whatever a
judge says (:func:`needlebench.evaluation.families.scored_by_rule`). For each ``samples_<task>_<date>.jsonl`` with
rows to judge, all with a verdict, the judged samples are written beside it as
``judged_samples_<task>_<date>.jsonl``: the original record plus ``judge`` (``score`` 1-10 or null when the judge
never gave a usable rating, ``model``, ``reply``, ``endpoint``), with its tag
``judged_samples_<task>_<date>.jsonl.tag`` (signed with this user's secret; ``needlebench report`` reads only a
judged file whose tag verifies). A samples file with a row left without a verdict gets no judged file, and one
there before (from an earlier run or from the folder's sender) is removed. The results folder may
come from someone else: every file in it is read and written through :mod:`needlebench.evaluation.judge.files`
(no link followed, values read with limits, cache entries signed with this user's secret). Credentials in
``--base-url`` (``user:pass@``, a query string) and the API key are never written or printed: the endpoint is
recorded as ``scheme://host:port/path`` and secrets echoed in a reply are blanked. Ratings are read by
:func:`parse_rating`: ``[[N]]``, ``Rating: N``, ``N/10``, a JSON object (repaired with json-repair) or a restated
rubric anchor (matched with rapidfuzz); a reply without one (small judges often just talk) keeps ``score`` null
and its raw text."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from needlebench.errors import NeedlebenchError
from needlebench.evaluation.families import scored_by_rule
from needlebench.evaluation.harness.lm_eval_files import JUDGED_PREFIX, SAMPLES_RE, response_text
from needlebench.evaluation.judge.files import (
    CACHE_NAME,
    JudgeCache,
    find_samples,
    iter_samples,
    load_json,
    new_file_mode,
    open_results,
    remove_judged,
    shown,
    write_judged,
)
from needlebench.safe_fs import Folder

__all__ = ["CACHE_NAME", "JUDGED_PREFIX", "SAMPLES_RE", "JudgeConfig", "judge_results", "parse_rating", "sample_files"]

RUBRIC = """You are judging the answer of an AI assistant to a question about a long document. You see the question,
the reference answer and the assistant's answer (not the document). Rate how well the assistant's answer matches
the reference answer on a scale of 1 to 10:
1: the answer is completely unrelated to the reference.
3: the answer has minor relevance but does not align with the reference.
5: the answer has moderate relevance but contains inaccuracies.
7: the answer aligns with the reference but has minor omissions.
10: the answer is completely accurate and aligns perfectly with the reference.
Reply with the rating only, in the form: Rating: [[N]]

[Question]
{question}

[Reference answer]
{reference}

[Assistant's answer]
{answer}"""

_RATING = re.compile(
    r"\[\[\s*(\d{1,2})(?:\.0+)?\s*\]\]"  # [[N]]
    r"|\b(?:rating|score)\s*(?:is|of|=|:)?\s*:?\s*\**\s*(\d{1,2})\b(?!\s*/\s*(?!10\b)\d)"  # Rating: N, score of N
    r"|\b(\d{1,2})\s*(?:/\s*10|out\s+of\s+10)\b",  # N/10, N out of 10
    re.IGNORECASE,
)
#: A run of two or more whitespace characters (cut to its first before :data:`_RATING` is matched).
_WHITESPACE_RUN = re.compile(r"(\s)\s+")
#: The rubric's anchors: a reply that restates one ("1: The answer is completely unrelated ...") rates with it.
ANCHORS = {
    1: "the answer is completely unrelated to the reference",
    3: "the answer has minor relevance but does not align with the reference",
    5: "the answer has moderate relevance but contains inaccuracies",
    7: "the answer aligns with the reference but has minor omissions",
    10: "the answer is completely accurate and aligns perfectly with the reference",
}
#: A numbered line; the start skips spaces but no line break (a ``\s*`` there would rescan every following empty
#: line from each line start: quadratic, hours on 64 KiB of line breaks). Same matches: a line break skipped there
#: is a later line's start.
_ANCHOR_LINE = re.compile(r"^[^\S\n]*(\d{1,2})\s*[:.)-]\s*(\S.*)$", re.MULTILINE)
#: How closely (rapidfuzz ratio, 0-100) a restated anchor must match the rubric's words.
ANCHOR_SIMILARITY = 90.0
#: Deepest bracket nesting of a reply handed to json-repair (a rating needs 1; json-repair recurses per level).
MAX_REPAIR_DEPTH = 16
#: Longest text handed to json-repair, from the first ``{`` (the judge may send 32 tokens, a few hundred characters;
#: json-repair takes more than quadratic time on long garbage: a minute and a half on 64 KiB of braces).
MAX_REPAIR_CHARS = 1024


def _json_rating(reply: str) -> int | None:
    """A rating in a JSON object (``{"rating": 7}``), repaired by json-repair when cut or fenced."""
    from json_repair import repair_json

    from needlebench.evaluation.scoring.counting_stars import bracket_depths  # deferred: only a JSON-looking reply

    start = reply.find("{")
    if start < 0:
        return None
    text = reply[start : start + MAX_REPAIR_CHARS]
    if text.count("{") + text.count("[") > MAX_REPAIR_DEPTH:  # cut where it nests deeper (json-repair closes it)
        import numpy as np

        deep = np.flatnonzero(bracket_depths(text) > MAX_REPAIR_DEPTH)
        text = text[: int(deep[0])] if len(deep) else text
    try:
        value = repair_json(text, return_objects=True)
    except (RecursionError, ValueError, TypeError):
        return None
    if not isinstance(value, dict):
        return None
    for key, item in value.items():
        if str(key).lower() in ("rating", "score") and isinstance(item, (int, float, str)):
            try:
                number = float(item)
            except ValueError:
                continue
            if number.is_integer() and 1 <= number <= 10:
                return int(number)
    return None


def _anchor_rating(reply: str) -> int | None:
    """The rating of a line that restates a rubric anchor with its number, e.g. ``1: The answer is completely
    unrelated to the reference.`` (small judges often answer so); the words must match the anchor's closely."""
    from rapidfuzz import fuzz

    for match in _ANCHOR_LINE.finditer(reply):
        value = int(match.group(1))
        if value in ANCHORS:
            text = match.group(2).strip().rstrip(".").lower()
            if fuzz.ratio(text[: len(ANCHORS[value]) + 10], ANCHORS[value]) >= ANCHOR_SIMILARITY:
                return value
    return None


def parse_rating(reply: str) -> int | None:
    """The 1-10 rating in a judge reply, or None when it gives none (never a guess from a bare number).

    Accepted, first match wins: ``[[N]]``, ``Rating: N`` / ``score of N``, ``N/10`` / ``N out of 10``; then a JSON
    object with a ``rating`` or ``score`` key (repaired if cut off); then a line that restates a rubric anchor
    (``7: The answer aligns with the reference but has minor omissions``). Values outside 1-10 are skipped."""
    reply = reply or ""
    # each whitespace run cut to its first character: the same matches (every space in the patterns is \s* or
    # \s+), without the backtracking over long runs that would take hours on a 64 KiB reply of spaces
    for match in _RATING.finditer(_WHITESPACE_RUN.sub(r"\1", reply)):
        value = int(next(group for group in match.groups() if group is not None))
        if 1 <= value <= 10:
            return value
    return _json_rating(reply) or _anchor_rating(reply)


@dataclass(frozen=True)
class JudgeConfig:
    base_url: str
    model: str
    api_key: str | None = None
    concurrency: int = 4
    retries: int = 3
    #: Seconds one request may take in all (connect, wait, read every byte); a server that trickles is cut here.
    timeout: float = 60.0
    backoff: float = 0.5


#: The largest reply body read (64 KiB; a judge asked for 32 tokens sends well under 1 KiB). A longer body is
#: refused after this many bytes, never held whole; the row stays unjudged.
MAX_REPLY_BYTES = 64 * 1024
#: The longest wait between two attempts of a request, seconds.
MAX_BACKOFF = 30.0
#: Secrets shorter than this are not searched for in replies (a 1-letter password would blank every reply).
MIN_SECRET_CHARS = 4


class Endpoint:
    """The chat-completions endpoint of ``--base-url``: where requests go, and how it is shown and stored.

    User name, password and query string (``https://user:pass@host/v1?token=...``) are used for the requests
    and never appear in anything written or printed: :attr:`shown` is ``scheme://host:port/path`` and
    :meth:`scrub` blanks every secret in a text (a reply that echoes a header, say)."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        import httpx

        try:
            url = httpx.URL(base_url.strip())
        except (httpx.InvalidURL, TypeError, ValueError):
            raise NeedlebenchError(
                "--base-url is not a URL; give http(s)://HOST[:PORT]/PATH, e.g. http://localhost:8000/v1"
            ) from None
        if url.scheme not in ("http", "https") or not url.host:
            raise NeedlebenchError(
                f"--base-url {redact_url(base_url)!r} is not an http(s) URL; give http(s)://HOST[:PORT]/PATH, "
                "e.g. http://localhost:8000/v1"
            )
        if api_key is not None and not all("!" <= char <= "~" for char in api_key):
            # an HTTP header value carries ASCII only (RFC 9110 section 5.5); the key itself is never shown
            raise NeedlebenchError(
                "the API key (--api-key-env) holds characters outside printable ASCII "
                "(a letter with an accent, a space, a line break); an API key is sent in an HTTP header, which "
                "allows only the printable ASCII characters ! to ~"
            )
        path = url.path.rstrip("/")
        self.shown = redact_url(base_url)
        self.url = url.copy_with(username=None, password=None, fragment=None, path=path + "/chat/completions")
        self.auth = (url.username, url.password) if url.username or url.password else None
        secrets = [
            url.username,
            url.password,
            f"{url.username}:{url.password}",
            url.userinfo.decode("ascii", "replace"),
            url.query.decode("ascii", "replace"),
            api_key or "",
        ]
        secrets += [value for _, value in url.params.multi_items()]
        if self.auth:  # the Basic authorization header, as a server that echoes headers would show it
            secrets.append(base64.b64encode(f"{url.username}:{url.password}".encode()).decode("ascii"))
        self.secrets = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text


def redact_url(url: str) -> str:
    """``scheme://host:port/path`` of a URL: no user name, password, query string or fragment."""
    import httpx

    try:
        return str(httpx.URL(url.strip()).copy_with(username=None, password=None, query=None, fragment=None))
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<unparsable URL>"


class JudgeFailure(Exception):
    """A request that got no reply from the judge model (``reason`` says what happened and where, with no secret).

    ``transient`` failures (HTTP 408, 429, 5xx, refused or dropped connections, timeouts, a garbled body) are
    retried; the others (HTTP 4xx such as 401 or 404, a body over :data:`MAX_REPLY_BYTES`) are not. Neither is
    cached: the row stays unjudged and a rerun asks again."""

    def __init__(self, reason: str, transient: bool) -> None:
        super().__init__(reason)
        self.reason, self.transient = reason, transient


async def _read_capped(response, endpoint: Endpoint) -> bytes:
    """The body, read in chunks and refused past :data:`MAX_REPLY_BYTES` (never held whole)."""
    if response.headers.get("content-encoding", "identity").lower() not in ("identity", ""):
        encoding = response.headers["content-encoding"]
        raise JudgeFailure(f"a {encoding}-encoded reply (asked for none) from {endpoint.shown}", transient=False)
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > MAX_REPLY_BYTES:
            raise JudgeFailure(f"a reply over {MAX_REPLY_BYTES // 1024} KiB from {endpoint.shown}", transient=False)
    return bytes(body)


async def _post(client, endpoint: Endpoint, config: JudgeConfig, prompt: str) -> str:
    """One request: the judge's reply text, or :class:`JudgeFailure`. All of it (connect, headers, every byte of
    the body) must finish within ``config.timeout`` seconds."""
    import httpx

    payload = {
        "model": config.model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0.0,
        "max_tokens": 32,
    }

    async def exchange() -> bytes:
        async with client.stream("POST", endpoint.url, json=payload, auth=endpoint.auth) as response:
            status = response.status_code
            if status in (408, 429) or status >= 500:
                raise JudgeFailure(f"HTTP {status} from {endpoint.shown}", transient=True)
            if status >= 400:
                raise JudgeFailure(f"HTTP {status} from {endpoint.shown}", transient=False)
            return await _read_capped(response, endpoint)

    try:
        body = await asyncio.wait_for(exchange(), config.timeout)
    except asyncio.TimeoutError:
        raise JudgeFailure(
            f"no complete reply within {config.timeout:g} s from {endpoint.shown}", transient=True
        ) from None
    except httpx.ConnectError:
        raise JudgeFailure(f"cannot connect to {endpoint.shown}", transient=True) from None
    except httpx.HTTPError as error:  # dropped connection, protocol error, the client's own timeouts
        raise JudgeFailure(f"{type(error).__name__} from {endpoint.shown}", transient=True) from None
    content = _chat_content(body)
    if content is None:
        raise JudgeFailure(f"a reply that is not chat-completion JSON from {endpoint.shown}", transient=True)
    return content


def _chat_content(body: bytes) -> str | None:
    """``choices[0].message.content`` of a chat-completion body ("" for null), or None when the body is not one:
    not JSON, JSON nested too deep, ``NaN``/``Infinity`` or huge numbers in it (read by
    :func:`~needlebench.evaluation.judge.files.load_json`), or any of those fields of another type."""
    try:
        reply = load_json(body)
    except ValueError:
        return None
    choices = reply.get("choices") if isinstance(reply, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    content = message.get("content", ...) if isinstance(message, dict) else ...
    if content is None:
        return ""
    return content if isinstance(content, str) else None


async def _ask(client, endpoint: Endpoint, config: JudgeConfig, prompt: str) -> tuple[int | None, str]:
    """One verdict: retried (bounded exponential backoff) on transient failures and replies without a rating.
    A reply with no rating after the retries is a verdict (score None); no reply at all raises
    :class:`JudgeFailure`."""
    reply: str | None = None
    failure: JudgeFailure | None = None
    for attempt in range(config.retries + 1):
        try:
            text = endpoint.scrub(await _post(client, endpoint, config, prompt))
        except JudgeFailure as error:
            if not error.transient:
                raise
            failure = error
        else:
            reply = text
            if (score := parse_rating(text)) is not None:
                return score, text
        if attempt < config.retries:
            await asyncio.sleep(min(config.backoff * (2**attempt), MAX_BACKOFF))
    if reply is not None:
        return None, reply
    assert failure is not None
    raise failure


def _cache_key(model: str, question: str, reference: str, answer: str) -> str:
    payload = json.dumps([model, question, reference, answer], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def sample_files(results_dir: Path) -> list[Path]:
    """The ``samples_*.jsonl`` under `results_dir` (never below a link; see :func:`judge_files.find_samples`)."""
    with open_results(results_dir) as root:
        return [root.path.joinpath(*parts) for parts in find_samples(root)]


def judge_results(results_dir: Path, config: JudgeConfig, progress: bool = True) -> dict:
    """Judge the logged samples under `results_dir`, but for the ATC and Counting-Stars rows (the report scores them
    by rule);
    returns counts (samples: those rows, requested and cached: distinct verdicts asked for and taken from the cache,
    rows sharing their texts sharing one; unrated, files written, failed: rows left unjudged because a request got
    no reply; skipped: ATC and Counting-Stars rows, never sent) and ``failure``, the commonest reason, or None.

    A samples file is written as ``judged_samples_*.jsonl`` only when every row of it has a verdict."""
    with open_results(results_dir) as root:
        return _judge_folder(root, config, progress)


def _judge_folder(root: Folder, config: JudgeConfig, progress: bool) -> dict:
    files = find_samples(root)
    if not files:
        raise NeedlebenchError(f"{root.path} holds no samples_*.jsonl; run lm-eval with --log_samples")
    if config.concurrency < 1 or config.retries < 0:
        raise NeedlebenchError("--concurrency must be 1 or more and --retries 0 or more")
    if not config.timeout > 0:
        raise NeedlebenchError(f"--timeout {config.timeout:g} is not a positive number of seconds")
    endpoint = Endpoint(config.base_url, config.api_key)
    mode = new_file_mode()
    prompts: dict[str, str] = {}
    keys_of: dict[tuple[str, ...], list[str | None]] = {}
    skipped = 0
    for parts in files:  # read row by row, keeping only the keys and prompts (a samples file may be gigabytes)
        keys = keys_of[parts] = []
        for sample in iter_samples(root, parts):
            key = _row_key(sample, config.model)
            keys.append(key)
            if key is None:  # a row the report keeps its rule score for (ATC, Counting-Stars): never sent
                skipped += 1
            elif key not in prompts:
                prompts[key] = RUBRIC.format(**dict(zip(("question", "reference", "answer"), _texts(sample))))
    cache = JudgeCache(root)
    work = {key: prompt for key, prompt in prompts.items() if key not in cache.entries}
    cached = len(prompts) - len(work)  # distinct verdicts taken from the cache (rows with the same texts share one)
    del prompts
    failures = asyncio.run(_judge_all(work, cache, endpoint, config, progress)) if work else {}
    unrated = failed = written = 0
    for parts in files:
        keys = [key for key in keys_of[parts] if key is not None]
        missing = sum(key not in cache.entries for key in keys)
        failed += missing
        if missing or not keys:  # a file without a row to judge reads as itself in the report: no judged copy
            remove_judged(root, parts)
            continue
        unrated += sum(cache.entries[key]["score"] is None for key in keys)
        digest = hashlib.sha256()
        lines = _judged_lines(root, parts, keys_of[parts], cache, config.model, digest)
        try:
            write_judged(root, parts, lines, mode, digest)
        except NeedlebenchError:
            remove_judged(root, parts)
            raise
        written += 1
    total = sum(len(keys) for keys in keys_of.values()) - skipped
    reasons = Counter(failures.values()).most_common(1)
    return {
        "samples": total,
        "requested": len(work),
        "cached": cached,
        "unrated": unrated,
        "files": written,
        "failed": failed,
        "skipped": skipped,
        "failure": reasons[0][0] if reasons else None,
    }


def _texts(sample: dict) -> tuple[str, str, str]:
    """The question, reference answer and model answer of a logged sample."""
    doc = sample.get("doc", {})
    return str(doc.get("question", "")), str(doc.get("answer", "")), response_text(sample)


def _row_key(sample: dict, model: str) -> str | None:
    """The cache key of a row to judge, None for a row the report scores by rule whatever a judge says
    (:func:`needlebench.evaluation.families.scored_by_rule`: ATC and Counting-Stars rows)."""
    if scored_by_rule(sample.get("doc") or {}):
        return None
    return _cache_key(model, *_texts(sample))


def _judged_lines(
    root: Folder, parts: tuple[str, ...], keys: list[str | None], cache: JudgeCache, model: str, digest
) -> Iterator[str]:
    """The judged rows of the samples file `parts`, read again row by row (every byte fed to `digest`): each the
    original record plus ``judge`` (a row the report scores by rule, never sent, stays as it was). A file whose rows
    differ from the first read (changed meanwhile) is a one-line error (the judged file is then not written)."""
    count = 0
    for sample in iter_samples(root, parts, digest):
        key = _row_key(sample, model)
        if count >= len(keys) or key != keys[count]:
            count = -1
            break
        if key is None:
            yield json.dumps(sample, ensure_ascii=False)
            count += 1
            continue
        entry = cache.entries[key]
        verdict = {
            "score": entry["score"],
            "model": entry["model"],
            "reply": entry["reply"],
            "endpoint": entry.get("endpoint"),
        }
        yield json.dumps({**sample, "judge": verdict}, ensure_ascii=False)
        count += 1
    if count == len(keys):
        return
    raise NeedlebenchError(
        f"{shown(root.path.joinpath(*parts))} changed while it was judged; run needlebench judge again"
    )


async def _judge_all(
    work: dict[str, str], cache: JudgeCache, endpoint: Endpoint, config: JudgeConfig, progress: bool
) -> dict[str, str]:
    """Ask for every prompt of ``work`` (at most ``config.concurrency`` at once); cache each verdict as it comes.
    Returns the reason of each key that got no verdict."""
    import httpx

    headers = {"Accept-Encoding": "identity"}
    if config.api_key:
        headers["Authorization"] = f"Bearer {config.api_key}"
    limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
    gate = asyncio.Semaphore(config.concurrency)
    failures: dict[str, str] = {}
    async with httpx.AsyncClient(headers=headers, timeout=config.timeout, limits=limits) as client:

        async def one(key: str, prompt: str) -> None:
            async with gate:
                try:
                    score, reply = await _ask(client, endpoint, config, prompt)
                except JudgeFailure as error:
                    failures[key] = error.reason
                    return
            cache.add(key, config.model, score, reply, endpoint.shown)

        with tqdm(total=len(work), unit="sample", desc="judging", disable=not progress) as bar:
            for done in asyncio.as_completed([one(key, prompt) for key, prompt in work.items()]):
                await done
                bar.update(1)
    return failures
