"""`--compat opencompass` for NeedleBench v2: the reference v2 M-RS and ATC loaders, byte for byte.

v2 M-RS (reference ``needlebench_v2/multi.py``): per dataset (length, depth, needle count) the haystack documents
start in file order; per repeat ``r``: ``random.seed(r)`` and an in-place shuffle of the documents (cumulative
over the repeats, as in v1), then ``random.seed(r)`` again, ``random.sample`` of ``n + 1`` names from the
``names.json`` list of the language (split on ``','``, nothing stripped), a ``random.choice`` of template and
term per link, the sentences joined with ``'*'``, split, emptied fragments dropped, and ``random.shuffle``. The
fragments, each wrapped in ``'\\n'``, go into the token stream as in v1 M-RS (first at the depth, then 10% of the
haystack further, the v1 clamping) and the whole is decoded.

v2 ATC (reference ``needlebench_v2/atc.py``): for each question type ``t`` (in the reference order) and repeat
``i``, ``random.seed((i + 1) + 10000 * t)`` and the same chain calls; the fragments are joined with nothing and
the type's prompt is filled in (English ordinals as the reference writes them, "{n}th").

S-RT and M-RT of v2 are in :mod:`needlebench.compat.opencompass` (the v1 loaders with the v2 frames).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from needlebench import __version__
from needlebench.compat.opencompass import (
    HAYSTACK_ROWS,
    MODE,
    _accumulate,
    _inputs,
    _row,
    as_generator,
    insert_reasoning_needles,
)
from needlebench.errors import NeedlebenchError
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.atc_v2 import SCHEMA as ATC_V2_SCHEMA
from needlebench.tasks.atc_v2 import atc_v2_row
from needlebench.tasks.families import atc, multi_reasoning
from needlebench.tasks.families.atc import V2_ATC_QUESTION_TYPES
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.haystack import effective_buffer
from needlebench.tasks.kinship import KinshipChain, kinship_data, relation_sentence
from needlebench.tasks.multi_reasoning import REASONING_NEEDLE_SPACING
from needlebench.tasks.names import load_names, names_corpus_label, normalize_language
from needlebench.tasks.prompts import v2_reasoning_question
from needlebench.tasks.settings import HaystackSettings

__all__ = ["GENERATORS", "atc_v2_rows", "reference_chain"]


def reference_chain(rnd: random.Random, all_names: Sequence[str], relations: int, language: str) -> KinshipChain:
    """The reference chain of ``relations`` links drawn with ``rnd`` (already seeded), in the reference's calls."""
    code = normalize_language(language)
    data = kinship_data(code)
    if relations + 1 > len(all_names):
        raise NeedlebenchError(
            f"a chain of {relations} relations needs {relations + 1} {code} names but the names list has only "
            f"{len(all_names)}; use a longer names file"
        )
    names = rnd.sample(list(all_names), relations + 1)
    terms, sentences = [], []
    for i in range(relations):
        template = rnd.choice(data["templates"])
        term = rnd.choice(data["relationship_terms"])
        terms.append(term)
        sentences.append(relation_sentence(template, names[i], names[i + 1], term))
    # joined with '*', split, empty fragments dropped: the sentences, unless a name holds a '*'
    fragments = [fragment for fragment in "".join(s + "*" for s in sentences).split("*") if fragment]
    order = list(range(len(fragments)))
    rnd.shuffle(order)  # the same calls as shuffling the fragments themselves
    return KinshipChain(code, tuple(names), tuple(terms), tuple(fragments), tuple(order))


def multi_reasoning_rows(spec: ConfigSpec, settings: HaystackSettings, lengths) -> Iterator[dict]:
    """v2 M-RS in the reference's construction (loop order length, needle count, depth, repeat)."""
    encoding = get_tokenizer().encoding
    inputs = _inputs(settings.haystack, spec.language)
    all_names = load_names(settings.needles, spec.language)
    for length in lengths:
        buffer = effective_buffer(spec, length, settings)
        for count in spec.needle_counts:
            for depth in settings.depths_for(spec.depths):
                order = list(range(len(inputs.documents)))
                rnd = random.Random()
                for repeat in range(spec.repeats):
                    rnd.seed(repeat)
                    rnd.shuffle(order)
                    rnd.seed(repeat)
                    chain = reference_chain(rnd, all_names, count, spec.language)
                    needles = list(chain.fragments)
                    needle_tokens = [encoding.encode_ordinary("\n" + needle + "\n") for needle in needles]
                    tokens = _accumulate(inputs, order, max(0, length - buffer - sum(map(len, needle_tokens))))
                    tokens = insert_reasoning_needles(tokens, depth, needle_tokens)
                    question = v2_reasoning_question(spec.language, chain.youngest)
                    requested = [min(100.0, depth + REASONING_NEEDLE_SPACING * i) for i in range(len(needles))]
                    row = _row(
                        spec,
                        settings,
                        length,
                        buffer,
                        repeat,
                        encoding.decode(tokens),
                        question,
                        spec.family,
                        {},
                        {"last_person": chain.youngest},
                    )
                    yield {
                        "id": f"{spec.name}-L{length}-d{depth:g}-n{count}-r{repeat}",
                        **row,
                        "depth_percent": float(depth),
                        "needle_depths": requested,
                        "answer": chain.eldest,
                        "keywords": [chain.eldest],
                        "needles": needles,
                        "requested_depths": requested,
                        "num_needles": count,
                    }


def atc_v2_rows(spec: ConfigSpec, *, names_path: str | None = None, version: str = __version__) -> Iterator[dict]:
    """v2 ATC rows as the reference builds them (relation count outer, question type, repeat)."""
    if spec.schema_family != ATC_V2_SCHEMA:
        raise NeedlebenchError(f"config {spec.name!r} is not a v2 ATC config; allowed: v2_atc_en, v2_atc_zh")
    all_names = load_names(names_path, spec.language)
    tokenizer = get_tokenizer()
    corpus = names_corpus_label(names_path)
    for relations in spec.needle_counts:
        for type_index, question_type in enumerate(V2_ATC_QUESTION_TYPES):
            for repeat in range(spec.repeats):
                seed = (repeat + 1) + 10000 * type_index
                chain = reference_chain(random.Random(seed), all_names, relations, spec.language)
                yield atc_v2_row(
                    spec,
                    chain,
                    "".join(chain.fragments),
                    question_type,
                    repeat,
                    seed,
                    corpus=corpus,
                    compat=MODE,
                    tokenizer=tokenizer,
                    version=version,
                )


#: The v2 loaders of each haystack family: v1's S-RT and M-RT (with the v2 frames), the v2 M-RS.
V2_HAYSTACK_ROWS = {**HAYSTACK_ROWS, multi_reasoning.FAMILY.key: multi_reasoning_rows}


def _atc_rows(spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool):
    return atc_v2_rows(spec, names_path=settings.needles)


#: This module's generators: (family key, mode, edition) -> rows.
GENERATORS = {
    **{(key, MODE, "v2"): as_generator(loader) for key, loader in V2_HAYSTACK_ROWS.items()},
    (atc.FAMILY.key, MODE, "v2"): _atc_rows,
}
