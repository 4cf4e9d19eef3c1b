"""NeedleBench v2 Ancestral Trace Challenge: kinship chains alone, 0-shot, four question types, ``\\boxed{}`` answers.

For every relation count (2, 4, ..., 512), question type (eldest ancestor, n-th ancestor, n-th descendant,
relationship distance) and repeat there is one item: a chain of ``n`` relations (``n + 1`` names), its sentences
shuffled into a story, and the reference v2 prompt of the type (``data/atc_v2.yaml``). Answers: the eldest name
(eldest ancestor, n-th ancestor of the youngest person, n being the chain's generation count), the youngest name
(n-th descendant of the eldest), or the generation count as digits (relationship distance).

Default mode: names are the built-in list (or ``--names``) minus names shown in the prompts' examples; seeds are
``derive_seed(release_seed, config, question type, relations, repeat)``; English sentences are joined with a
space and ordinals are correct ("3rd"). ``needlebench.compat.opencompass_v2`` replays the reference instead.
"""

from __future__ import annotations

from collections.abc import Iterator

from needlebench import __version__
from needlebench.errors import NeedlebenchError
from needlebench.seeding import RELEASE_SEED, derive_seed
from needlebench.sources.tokenizer import (
    DEFAULT_TOKENIZER,
    TextTokenizer,
    get_tokenizer,
)
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.kinship import (
    KinshipChain,
    kinship_chain,
    kinship_data,
    question_prompt,
    reserved_text,
)
from needlebench.tasks.names import distinct_names, load_names, names_corpus_label
from needlebench.tasks.schema import check_row, columns_for
from needlebench.tasks.settings import HaystackSettings

__all__ = ["SCHEMA", "atc_v2_row", "atc_v2_rows", "iter_atc_v2_rows", "last_line", "v2_names_pool"]

#: The row schema of v2 ATC configs (:mod:`needlebench.tasks.schema`).
SCHEMA = "atc_v2"
_COLUMNS = tuple(columns_for(SCHEMA))


def last_line(prompt: str) -> str:
    """The prompt's final question (its last non-empty line)."""
    return [line for line in prompt.splitlines() if line.strip()][-1]


def v2_names_pool(names_path: str | None, language: str) -> list[str]:
    """Distinct names of the list (built-in or ``--names``) that no v2 prompt text shows."""
    reserved = reserved_text(language)
    return [name for name in distinct_names(load_names(names_path, language)) if name not in reserved]


def atc_v2_row(
    spec: ConfigSpec,
    chain: KinshipChain,
    story: str,
    question_type: str,
    repeat: int,
    seed: int,
    *,
    corpus: str,
    compat: str,
    tokenizer: TextTokenizer,
    version: str = __version__,
) -> dict:
    """One ATC v2 row (columns of ``schema.columns_for(SCHEMA)``, in order)."""
    prompt, answer = question_prompt(question_type, chain, story, reference_ordinals=bool(compat))
    tokens = tokenizer.count(prompt)
    row = {
        "id": f"{spec.name}-n{chain.relations}-{question_type.lower()}-r{repeat}",
        "task": spec.task_label,
        "config": spec.name,
        "language": spec.language,
        "size": None,
        "context_length": tokens,
        "depth_percent": None,
        "needle_depths": [],
        "prompt": prompt,
        "question": last_line(prompt),
        "answer": answer,
        "keywords": [answer],
        "needles": list(chain.fragments),
        "repeat": repeat,
        "seed": seed,
        "corpus": corpus,
        "tokenizer": DEFAULT_TOKENIZER,
        "prompt_tokens": tokens,
        "haystack_tokens": tokenizer.count(story),
        "version": version,
        "num_needles": chain.relations,
        "question_type": question_type,
        "generations": chain.generations,
        "compat": compat,
    }
    ordered = {name: row[name] for name in _COLUMNS}
    check_row(SCHEMA, ordered)
    return ordered


def iter_atc_v2_rows(
    spec: ConfigSpec,
    *,
    release_seed: int = RELEASE_SEED,
    version: str = __version__,
    names_path: str | None = None,
) -> Iterator[dict]:
    """Rows of a v2 ATC config, default mode: relation count outer, then question type, then repeat (the
    reference's order)."""
    if spec.schema_family != SCHEMA:
        raise NeedlebenchError(f"config {spec.name!r} is not a v2 ATC config; allowed: v2_atc_en, v2_atc_zh")
    pool = v2_names_pool(names_path, spec.language)
    separator = kinship_data(spec.language)["sentence_separator"]
    tokenizer = get_tokenizer()
    corpus = names_corpus_label(names_path)
    for relations in spec.needle_counts:
        for question_type in spec.family_object.question_types:
            for repeat in range(spec.repeats):
                seed = derive_seed(release_seed, spec.name, question_type, relations, repeat)
                chain = kinship_chain(relations, spec.language, seed, pool)
                story = separator.join(chain.fragments)
                yield atc_v2_row(
                    spec,
                    chain,
                    story,
                    question_type,
                    repeat,
                    seed,
                    corpus=corpus,
                    compat="",
                    tokenizer=tokenizer,
                    version=version,
                )


def atc_v2_rows(
    spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...] = (), utf8_prompts: bool = False
) -> Iterator[dict]:
    """The family's default v2 generator: v2 ATC reads the release seed and the names list (`settings.needles`);
    it has no context lengths and gives text prompts."""
    return iter_atc_v2_rows(spec, release_seed=settings.release_seed, names_path=settings.needles)
