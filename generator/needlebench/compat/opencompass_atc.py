"""ATC v1 as the reference builds it (``--compat opencompass``): the ``atc_choice`` items of
``open-compass/opencompass: opencompass/datasets/needlebench/atc_choice.py``, replayed call for call with a local
``random.Random(repeat)``, and the reference config's few-shot dialogues
(``opencompass/configs/datasets/needlebench/atc/atc_choice_20.py``).

The open-ended configs use the same calls (seeded like ``atc_choice``, since the reference open loader is
unseeded). Rows are rendered as the default mode renders them (:func:`needlebench.tasks.atc.item_rows`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from needlebench import __version__
from needlebench.sources.tokenizer import get_tokenizer
from needlebench.tasks.atc import (
    LETTERS,
    AtcItem,
    RowContext,
    atc_data,
    check_needle_count,
    item_rows,
    prompt_style,
    question_text,
    relation_sentence,
    too_few_names,
)
from needlebench.tasks.families import atc
from needlebench.tasks.families.base import ConfigSpec
from needlebench.tasks.names import load_names, names_corpus_label, normalize_language
from needlebench.tasks.settings import HaystackSettings

__all__ = ["GENERATORS", "MODE", "atc_rows", "compat_turns", "reference_item", "reference_items"]

MODE = "opencompass"


def reference_item(
    all_names: Sequence[str], num_needles: int, language: str, repeat: int, *, open_ended: bool = False
) -> AtcItem:
    """The reference ``atc_choice`` item of one repeat, with a local ``random.Random(repeat)``.

    Same calls in the same order as the reference: ``sample`` of the names, ``choice`` of a template and a term
    per link, ``shuffle`` of the fragments (the sentences plus the trailing empty fragment left by the ``'*'``
    split), then, for chains shorter than 4 and not ``open_ended``, ``sample`` of padding names.
    """
    check_needle_count(num_needles)
    data = atc_data()[normalize_language(language)]
    rand = random.Random(repeat)
    if num_needles > len(all_names):
        raise too_few_names(num_needles, len(all_names), language)
    chain = rand.sample(list(all_names), num_needles)
    sentences = []
    for i in range(num_needles - 1):
        template = rand.choice(data["templates"])
        term = rand.choice(data["relationship_terms"])
        sentences.append(relation_sentence(template, chain[i], chain[i + 1], term))
    # The shuffle's calls depend on the list length only: shuffle indices, fragment N-1 being the empty one.
    fragments = list(range(num_needles))
    rand.shuffle(fragments)
    order = tuple(index for index in fragments if index < num_needles - 1)
    story = "".join(sentences[index] for index in order)
    options: list[str] = []
    if not open_ended:
        options = list(chain)
        if len(options) < len(LETTERS):
            others = [name for name in all_names if name not in chain]
            if len(others) < len(LETTERS) - len(options):
                raise too_few_names(len(LETTERS), len(chain) + len(others), language)
            options += rand.sample(others, len(LETTERS) - len(options))
        options = options[: len(LETTERS)]
    question = question_text(story, chain[-1], language)
    return AtcItem(normalize_language(language), tuple(chain), tuple(sentences), order, story, question, tuple(options))


def reference_items(
    all_names: Sequence[str], num_needles: int, language: str, repeats: int, *, open_ended: bool = False
) -> list[AtcItem]:
    """The reference items of repeats ``0 .. repeats-1`` (``random.seed(id)`` per repeat ``id``)."""
    return [
        reference_item(all_names, num_needles, language, repeat, open_ended=open_ended) for repeat in range(repeats)
    ]


def compat_turns(language: str, style: str) -> list[tuple[str, str]]:
    """The reference config's 4 ``(question, answer)`` shots of a language and prompt style."""
    shots = atc_data()[normalize_language(language)]["compat_shots"][style]
    return [(shot["question"], shot["answer"]) for shot in shots]


def atc_rows(spec: ConfigSpec, *, names_path: str | None = None, version: str = __version__) -> Iterator[dict]:
    """Rows of a v1 ATC config as the reference builds them: its items with ``random.seed(repeat)`` (the seed
    column is the repeat), the names list exactly as read, the reference's few-shot dialogues."""
    style = prompt_style(spec)
    language = spec.language
    all_names = load_names(names_path, language)
    turns = () if style == "open" else tuple(compat_turns(language, style))
    ctx = RowContext(spec, style, turns, names_corpus_label(names_path), version, MODE, get_tokenizer())
    for num_needles in spec.needle_counts:
        for repeat in range(spec.repeats):
            item = reference_item(all_names, num_needles, language, repeat, open_ended=style == "open")
            yield from item_rows(item, ctx, num_needles, repeat, repeat)


def _rows(spec: ConfigSpec, settings: HaystackSettings, lengths: tuple[int, ...], utf8_prompts: bool) -> Iterator[dict]:
    return atc_rows(spec, names_path=settings.needles)


#: This module's generators: (family key, mode, edition) -> rows.
GENERATORS = {(atc.FAMILY.key, MODE, "v1"): _rows}
