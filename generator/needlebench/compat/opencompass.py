"""`--compat opencompass`: the reference NeedleBench v1 construction, byte for byte from the same inputs.

S-RT and M-RT of v2 are built here too (the reference v2 loaders differ only in their frames and in asking the
question without the guide sentence); v2 M-RS and ATC are in :mod:`needlebench.compat.opencompass_v2`.

What the reference does and this module replays (open-compass/opencompass:
``opencompass/datasets/needlebench/origin.py``, ``parallel.py`` and ``multi.py``): the haystack documents are shuffled
in place with ``random.seed(repeat)`` per repeat, so the order of repeat k results from the shuffles 0..k; documents
are encoded one by one and concatenated without separators, cut to ``length - buffer - needle tokens`` and the needle
tokens (``'\\n' + needle + '\\n'``) are inserted at raw token offsets, then the whole is decoded (which may split
words or, in Chinese, characters). The repeat index alone seeds the needle choice. M-RT joins its questions with '、'
in both languages. Python's `random` is replayed on a local `random.Random`.

Differences from the default mode are listed in the README. One thing cannot be replayed exactly: the
reference shuffles the M-RT needle file with whatever global random state earlier loaders left; within a run,
every load leaves the same state (the last calls are seed(R-1) and the shuffle of its needles), and this module
starts every load from that state, which is what OpenCompass produces for every length after the first of a run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.sources.corpus import read_jsonl_documents
from needlebench.sources.haystacks import corpus_for
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.families import multi_reasoning, multi_retrieval, single
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import effective_buffer
from needlebench.tasks.multi_reasoning import REASONING_NEEDLE_SPACING
from needlebench.tasks.needle_bank import needle_bank
from needlebench.tasks.needle_file import load_needles_file
from needlebench.tasks.needles import EDITION_QUESTION, LANGUAGE_NAMES
from needlebench.tasks.prompts import frame_parts, guide_sentence
from needlebench.tasks.reasoning_needles import (
    generate_reasoning_set,
    load_reasoning_file,
)
from needlebench.tasks.settings import HaystackSettings


@dataclass(frozen=True)
class _Inputs:
    documents: tuple[str, ...]
    document_tokens: tuple[tuple[int, ...], ...]
    corpus: str


@cache
def _inputs(haystack: str | None, language: str) -> _Inputs:
    """The haystack documents in file order (raw `text` of a .jsonl; otherwise the corpus' documents)."""
    if haystack is not None and haystack.endswith(".jsonl") and Path(haystack).is_file():
        documents = tuple(read_jsonl_documents(Path(haystack)))
        label = f"{Path(haystack).name}"
    else:
        corpus = corpus_for(haystack, language)
        documents = corpus.documents
        label = corpus.name
    if not documents:
        raise NeedlebenchError(f"haystack {haystack!r} has no documents")
    encoding = get_tokenizer().encoding
    tokens = tuple(tuple(t) for t in encoding.encode_ordinary_batch(list(documents), num_threads=2))
    return _Inputs(documents, tokens, label)


@cache
def _needle_lines(path: str | None) -> tuple[str, ...]:
    """Raw lines of needles.jsonl (all languages, file order); the built-in bank in its order when None."""
    if path is None:
        records = [needle.as_record() for language in ("en", "zh") for needle in needle_bank(language)]
        return tuple(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    try:  # the reference's readlines() (never splits on U+2028 and the like, unlike str.splitlines)
        with open(path, encoding="utf-8") as handle:
            return tuple(handle.readlines())
    except (OSError, UnicodeDecodeError) as error:
        raise NeedlebenchError(f"cannot read needles file {path}: {error}") from error


def _needle_records(path: str | None, language: str) -> list[dict]:
    """The raw records of a language, in file order (the file is validated first: one-line errors)."""
    if path is not None:
        load_needles_file(path, language)
    records = []
    for number, line in enumerate(_needle_lines(path), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.strip())
        except json.JSONDecodeError:
            raise NeedlebenchError(f"malformed JSON on line {number} of needles file {path}") from None
        if record.get("language") == LANGUAGE_NAMES[language]:
            records.append(record)
    if not records:
        raise NeedlebenchError(f"needles file {path} has no {LANGUAGE_NAMES[language]} needles")
    return records


@cache
def _reasoning_records(path: str | None, language: str) -> tuple[dict, ...]:
    if path is None:
        return tuple(
            {
                "derivations": list(chain.needles),
                "derivation_count": count,
                "question": chain.question,
                "answer": chain.answer,
            }
            for count in (2, 3, 4, 5)
            for chain in (generate_reasoning_set(count, language, seed) for seed in range(50))
        )
    load_reasoning_file(path, language)  # validates every record (one-line errors)
    return tuple(json.loads(Path(path).read_text(encoding="utf-8")))


def _accumulate(inputs: _Inputs, order: list[int], target: int) -> list[int]:
    tokens: list[int] = []
    for index in order:
        tokens.extend(inputs.document_tokens[index])
        if len(tokens) >= target:
            break
    return tokens[:target]


def _row(spec, settings, length, buffer, repeat, context, question, family, extra, fields=None) -> dict:
    encoding = get_tokenizer().encoding
    before, after = frame_parts(family, spec.language, question, "end", spec.edition, **(fields or {}))
    prompt = before + context + after
    return {
        "task": spec.task_label,
        "config": spec.name,
        "language": spec.language,
        "size": spec.size,
        "context_length": length,
        "prompt": prompt,
        "question": question,
        "repeat": repeat,
        "seed": repeat,
        "corpus": _inputs(settings.haystack, spec.language).corpus,
        "tokenizer": settings.tokenizer,
        "prompt_tokens": len(encoding.encode_ordinary(prompt)),
        "haystack_tokens": len(encoding.encode_ordinary(context)),
        "version": __version__,
        "buffer": buffer,
        "corpus_cycles": 0,
        "compat": "opencompass",
        **extra,
    }


def single_rows(spec: ConfigSpec, settings: HaystackSettings, lengths) -> Iterator[dict]:
    encoding = get_tokenizer().encoding
    inputs = _inputs(settings.haystack, spec.language)
    needles = _needle_records(settings.needles, spec.language)
    for length in lengths:
        buffer = effective_buffer(spec, length, settings)
        for depth in settings.depths_for(spec.depths):
            order = list(range(len(inputs.documents)))
            rnd = random.Random()
            for repeat in range(spec.repeats):
                rnd.seed(repeat)
                rnd.shuffle(order)
                rnd.seed(repeat)
                record = rnd.choice(needles)
                needle = "\n" + record["needle"] + "\n"
                needle_tokens = encoding.encode_ordinary(needle)
                tokens = _accumulate(inputs, order, max(0, length - buffer - len(needle_tokens)))
                point = int(len(tokens) * (depth / 100))
                context = encoding.decode(tokens[:point] + needle_tokens + tokens[point:])
                question = record["retrieval_question"]
                question = EDITION_QUESTION[spec.edition](question, spec.language)  # v2: as it stands
                yield {
                    "id": f"{spec.name}-L{length}-d{depth:g}-r{repeat}",
                    **_row(spec, settings, length, buffer, repeat, context, question, spec.family, {}),
                    "depth_percent": float(depth),
                    "needle_depths": [100.0 * point / len(tokens) if tokens else 0.0],
                    "answer": needle + "*" + record["arg2"],
                    "keywords": [record["arg2"]],
                    "needles": [record["needle"]],
                    "requested_depths": [float(depth)],
                }


def _unique_entries(rnd: random.Random, lines: list[str], count: int, language: str) -> list[dict]:
    """The reference's greedy pick of needles with unseen arg1, arg2 and (arg1, arg2), after a shuffle."""
    lines = list(lines)
    rnd.shuffle(lines)
    seen_arg1, seen_arg2, seen_pairs, results = set(), set(), set(), []
    for line in lines:
        try:
            entry = json.loads(line.strip())
        except json.JSONDecodeError:
            continue
        if entry.get("language") != LANGUAGE_NAMES[language]:
            continue
        arg1, arg2 = entry.get("arg1", ""), entry.get("arg2", "")
        if arg1 not in seen_arg1 and arg2 not in seen_arg2 and (arg1, arg2) not in seen_pairs:
            seen_arg1.add(arg1)
            seen_arg2.add(arg2)
            seen_pairs.add((arg1, arg2))
            results.append(entry)
        if len(results) == count:
            break
    return results


def multi_retrieval_rows(spec: ConfigSpec, settings: HaystackSettings, lengths) -> Iterator[dict]:
    encoding = get_tokenizer().encoding
    inputs = _inputs(settings.haystack, spec.language)
    lines = list(_needle_lines(settings.needles))
    depths = list(settings.depths_for(spec.depths))
    stop, lead, fmt = (
        ("?", "Please answer in the format of '", "'") if spec.language == "en" else ("？", "请按照'", "'的格式回答。")
    )
    period = "." if spec.language == "en" else "。"
    for length in lengths:
        buffer = effective_buffer(spec, length, settings)
        # the state every previous load leaves behind: its last calls are seed(R-1) and the shuffle of its needles
        rnd = random.Random(spec.repeats - 1)
        rnd.shuffle(list(range(len(depths))))
        chosen = _unique_entries(rnd, lines, len(depths), spec.language)
        order = list(range(len(inputs.documents)))
        for repeat in range(spec.repeats):
            rnd.seed(repeat)
            rnd.shuffle(order)
            needles = list(chosen)
            rnd.seed(repeat)  # the reference seeds again before shuffling the needles
            rnd.shuffle(needles)
            for item in needles:
                if item["retrieval_question"].count("'") < 2:
                    raise NeedlebenchError(
                        f"needle question {item['retrieval_question'][:60]!r} has no quoted answer format "
                        "('...'), which the reference M-RT question needs"
                    )
            wrapped = ["\n" + item["needle"] + "\n" for item in needles]
            questions = "、".join(item["retrieval_question"].split(stop)[0] + stop for item in needles)
            formats = "、".join(item["retrieval_question"].split("'")[1].split(period)[0] for item in needles)
            question = questions + lead + formats + fmt
            question = EDITION_QUESTION[spec.edition](question, spec.language)
            needle_tokens = [encoding.encode_ordinary(text) for text in wrapped]
            tokens = _accumulate(inputs, order, max(0, length - buffer - sum(map(len, needle_tokens))))
            points = [int(len(tokens) * (depth / 100)) for depth in depths]
            inserted = 0
            for point, piece in zip(points, needle_tokens):
                at = min(point + inserted, len(tokens))
                tokens = tokens[:at] + piece + tokens[at:]
                inserted += len(piece)
            context = encoding.decode(tokens)
            base_tokens = len(tokens) - inserted
            yield {
                "id": f"{spec.name}-L{length}-r{repeat}",
                **_row(spec, settings, length, buffer, repeat, context, question, spec.family, {}),
                "depth_percent": None,
                "needle_depths": [100.0 * min(p, base_tokens) / base_tokens if base_tokens else 0.0 for p in points],
                "answer": "*".join(item["arg2"] for item in needles) + "#" + "*".join(f"{d:g}" for d in depths),
                "keywords": [item["arg2"] for item in needles],
                "needles": [item["needle"] for item in needles],
                "requested_depths": [float(d) for d in depths],
                "num_needles": len(needles),
            }


def _reasoning_points(total: int, depth: float, lengths: list[int]) -> list[int]:
    points: list[int] = []
    for i in range(len(lengths)):
        if i == 0:
            point = int(total * (depth / 100))
        else:
            point = int(points[i - 1] + lengths[i - 1] + total * (REASONING_NEEDLE_SPACING / 100))
        points.append(min(point, total + sum(lengths[:i])))
    return points


def insert_reasoning_needles(tokens: list[int], depth: float, needle_tokens: list[list[int]]) -> list[int]:
    """The haystack `tokens` with the M-RS needles inserted as the reference inserts them: the first at `depth`
    percent of the haystack, each further one the needle spacing after the end of the one before (capped at the
    end), every later point moved by the needles inserted before it."""
    points = _reasoning_points(len(tokens), depth, [len(piece) for piece in needle_tokens])
    for i, piece in enumerate(needle_tokens):
        tokens = tokens[: points[i]] + piece + tokens[points[i] :]
        for j in range(i + 1, len(points)):
            points[j] += len(piece)
    return tokens


def multi_reasoning_rows(spec: ConfigSpec, settings: HaystackSettings, lengths) -> Iterator[dict]:
    encoding = get_tokenizer().encoding
    inputs = _inputs(settings.haystack, spec.language)
    records = _reasoning_records(settings.needles, spec.language)
    for length in lengths:
        buffer = effective_buffer(spec, length, settings)
        for count in spec.needle_counts:
            matching = [record for record in records if record.get("derivation_count") == count]
            if not matching:
                raise NeedlebenchError(f"the reasoning needles have no record with derivation_count {count}")
            for depth in settings.depths_for(spec.depths):
                order = list(range(len(inputs.documents)))
                rnd = random.Random()
                for repeat in range(spec.repeats):
                    rnd.seed(repeat)
                    rnd.shuffle(order)
                    record = rnd.choice(matching)
                    wrapped = ["\n" + needle + "\n" for needle in record["derivations"]]
                    needle_tokens = [encoding.encode_ordinary(text) for text in wrapped]
                    tokens = _accumulate(inputs, order, max(0, length - buffer - sum(map(len, needle_tokens))))
                    tokens = insert_reasoning_needles(tokens, depth, needle_tokens)
                    question = record["question"] + guide_sentence(spec.language)
                    requested = [min(100.0, depth + REASONING_NEEDLE_SPACING * i) for i in range(count)]
                    yield {
                        "id": f"{spec.name}-L{length}-d{depth:g}-n{count}-r{repeat}",
                        **_row(
                            spec,
                            settings,
                            length,
                            buffer,
                            repeat,
                            encoding.decode(tokens),
                            question,
                            spec.family,
                            {},
                        ),
                        "depth_percent": float(depth),
                        "needle_depths": requested,
                        "answer": record["answer"],
                        "keywords": [record["answer"]],
                        "needles": list(record["derivations"]),
                        "requested_depths": requested,
                        "num_needles": count,
                    }


#: The `needle_boundaries` value of compat rows (needles at the reference's raw offsets).
COMPAT_BOUNDARY = "compat"


MODE = "opencompass"


def with_compat_boundaries(rows: Iterator[dict]) -> Iterator[dict]:
    """The rows with the needle boundary of raw token offsets: the reference inserts needles there, choosing none."""
    for row in rows:
        row["needle_boundaries"] = [COMPAT_BOUNDARY] * len(row["needles"])
        yield row


#: The v1 loaders of each haystack family (v2 S-RT and M-RT use them too: :mod:`.opencompass_v2`).
HAYSTACK_ROWS = {
    single.FAMILY.key: single_rows,
    multi_retrieval.FAMILY.key: multi_retrieval_rows,
    multi_reasoning.FAMILY.key: multi_reasoning_rows,
}


def as_generator(loader):
    """A loader as a row generator (the common signature; compat prompts are always text)."""

    def generate(spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool):
        return with_compat_boundaries(loader(spec, settings, lengths))

    return generate


#: This module's generators: (family key, mode, edition) -> rows.
GENERATORS = {(key, MODE, "v1"): as_generator(loader) for key, loader in HAYSTACK_ROWS.items()}
