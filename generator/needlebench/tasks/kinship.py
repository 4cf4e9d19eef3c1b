"""NeedleBench v2 kinship chains, shared by v2 M-RS (a chain hidden in a haystack) and v2 ATC (a chain alone).

A chain of ``n`` relations links ``n + 1`` distinct names, eldest first: sentence ``i`` says that ``names[i]`` is
an elder relative of ``names[i + 1]`` (one of the v2 templates of ``data/atc_v2.yaml`` with one relation term).
Parents count one generation and grandparents two, so a chain spans :attr:`KinshipChain.generations`
generations. The sentences are shuffled; the eldest ancestor of the youngest person is ``names[0]``.

The default mode draws with a local numpy generator from a names pool (:func:`kinship_chain`); compat mode
replays the reference's calls on Python's ``random`` (``needlebench.compat.opencompass_v2``). Both build the
same :class:`KinshipChain`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
import yaml

from needlebench.errors import NeedlebenchError
from needlebench.tasks.names import normalize_language
from needlebench.tasks.prompts import prompt_data

__all__ = [
    "KinshipChain",
    "QUESTION_KEYS",
    "kinship_chain",
    "kinship_data",
    "ordinal",
    "question_prompt",
    "reserved_text",
]

#: ATC v2 question types (reference enum names, in its order) -> the key of their prompt in ``atc_v2.yaml``.
QUESTION_KEYS = {
    "ELDEST_ANCESTOR": "eldest_ancestor",
    "NTH_ANCESTOR": "nth_ancestor",
    "NTH_DESCENDANT": "nth_descendant",
    "RELATIONSHIP_DISTANCE": "relationship_distance",
}


@cache
def kinship_data(language: str) -> dict:
    """The ``data/atc_v2.yaml`` section of a language (terms, generations, templates, ATC v2 prompts)."""
    text = resources.files("needlebench").joinpath("data/atc_v2.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)[normalize_language(language)]


@dataclass(frozen=True)
class KinshipChain:
    """One chain: ``names`` eldest first, ``terms[i]`` and ``sentences[i]`` of the link ``names[i] -> names[i+1]``,
    ``order`` the sentence indices in the shuffled (prompt) order."""

    language: str
    names: tuple[str, ...]
    terms: tuple[str, ...]
    sentences: tuple[str, ...]
    order: tuple[int, ...]

    @property
    def relations(self) -> int:
        return len(self.terms)

    @property
    def eldest(self) -> str:
        return self.names[0]

    @property
    def youngest(self) -> str:
        return self.names[-1]

    @property
    def generations(self) -> int:
        """Generations between the two ends: the sum over the links (parent terms 1, grandparent terms 2)."""
        table = kinship_data(self.language)["generations"]
        return sum(table[term] for term in self.terms)

    @property
    def fragments(self) -> tuple[str, ...]:
        """The relation sentences in prompt order."""
        return tuple(self.sentences[index] for index in self.order)


def relation_sentence(template: str, elder: str, younger: str, term: str) -> str:
    return template.format(A=elder, B=younger, relationship=term)


def reserved_text(language: str) -> str:
    """Every prompt text of the language that shows names (the examples and notes): chain names must not occur in
    it, or a chain could be read together with an example."""
    data = kinship_data(language)
    frames = prompt_data("v2")[data["reserved_frames"]][normalize_language(language)]
    return "\n".join([*data["questions"].values(), *frames.values()])


def kinship_chain(
    relations: int,
    language: str,
    seed: int,
    names: Sequence[str],
    leaks: Callable[[str], bool] | None = None,
) -> KinshipChain:
    """A chain of ``relations`` links drawn with a local numpy generator seeded by ``seed`` from ``names``
    (distinct, non-empty). Names for which ``leaks(name)`` is true (they occur in the surrounding text) are
    dropped and redrawn from the same generator.

    Draw order: the names, then a template and a term per link, then the shuffle of the sentences."""
    if isinstance(relations, bool) or not isinstance(relations, int) or relations < 1:
        raise NeedlebenchError(f"kinship chain relation count {relations!r} is not allowed; use an integer >= 1")
    code = normalize_language(language)
    data = kinship_data(code)
    generator = np.random.Generator(np.random.PCG64(seed))
    pool = list(names)
    while True:
        if len(pool) < relations + 1:
            raise NeedlebenchError(
                f"a chain of {relations} relations needs {relations + 1} distinct {code} names but only {len(pool)} "
                "are available; use a longer names file or fewer relations"
            )
        picked = [pool[int(index)] for index in generator.choice(len(pool), size=relations + 1, replace=False)]
        leaked = {name for name in picked if leaks is not None and leaks(name)}
        if not leaked:
            break
        pool = [name for name in pool if name not in leaked]
    templates, terms = data["templates"], data["relationship_terms"]
    template_ids = generator.integers(0, len(templates), size=relations).tolist()
    term_ids = generator.integers(0, len(terms), size=relations).tolist()
    chosen_terms = tuple(terms[index] for index in term_ids)
    sentences = tuple(
        relation_sentence(templates[t], picked[i], picked[i + 1], chosen_terms[i]) for i, t in enumerate(template_ids)
    )
    order = tuple(int(index) for index in generator.permutation(relations))
    return KinshipChain(code, tuple(picked), chosen_terms, sentences, order)


def ordinal(number: int) -> str:
    """English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..."""
    if 10 <= number % 100 <= 20:
        suffix = "th"
    else:
        suffix = {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def question_prompt(
    question_type: str, chain: KinshipChain, story: str, *, reference_ordinals: bool = False
) -> tuple[str, str]:
    """The ATC v2 prompt of a question type about ``chain`` (whose shuffled sentences read ``story``) and its
    answer. English ``{nth}`` is the correct ordinal, or the reference's ``"{n}th"`` with
    ``reference_ordinals``."""
    if question_type not in QUESTION_KEYS:
        raise NeedlebenchError(f"unknown ATC v2 question type {question_type!r}; allowed: {', '.join(QUESTION_KEYS)}")
    template = kinship_data(chain.language)["questions"][QUESTION_KEYS[question_type]]
    n = chain.generations
    fields = {
        "shuffled_story": story,
        "last_person": chain.youngest,
        "person": chain.eldest if question_type == "NTH_DESCENDANT" else chain.youngest,
        "person_a": chain.eldest,
        "person_b": chain.youngest,
        "n": n,
        "nth": f"{n}th" if reference_ordinals else ordinal(n),
    }
    prompt = template.format(**fields)
    if question_type == "NTH_DESCENDANT":
        answer = chain.youngest
    elif question_type == "RELATIONSHIP_DISTANCE":
        answer = str(n)
    else:
        answer = chain.eldest
    return prompt, answer
