"""The papers' parameter grids and the registry of dataset configs.

Every config of the dataset is a :class:`ConfigSpec`; its name is the Hub config name and, prefixed with
``needlebench_``, the lm-eval task name. The NeedleBench numbers are the reference v1 table (lengths, depth lists,
buffers per task and language, repeats); the Counting-Stars numbers are the paper's. NeedleBench v2 (the version
OpenCompass runs today, reference ``configs/datasets/needlebench_v2/``) has its own configs, named ``v2_*``, with
the v2 lengths, the 11 depths 0, 10, ..., 100 at every size and one buffer per language and size.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import cache

from needlebench.errors import NeedlebenchError

LANGUAGES = ("en", "zh")
SIZES = ("4k", "8k", "32k", "128k", "200k", "256k", "1000k")

#: Families and the task label used in tables.
FAMILIES = {
    "single": "S-RT",
    "multi_retrieval": "M-RT",
    "multi_reasoning": "M-RS",
    "atc": "ATC",
    "counting_stars": "Counting-Stars",
}

#: The build modes of each family beside the default, as the command line spells them: ``--compat MODE``
#: (the reference construction, byte for byte; Counting-Stars only for the paper's M=32, whose star lists are
#: fixed) and ``--tokenizer hf:...`` (lengths counted in a model's own tokens: the families with a tokenised
#: haystack). `needlebench build` refuses every other combination in one line (:meth:`ConfigSpec.check_mode`),
#: and ``tests/test_front_door.py`` builds, verifies and evaluates every combination declared here: a family or
#: mode joins that matrix by being declared.
COMPAT_MODES_BY_FAMILY = {
    "single": ("opencompass",),
    "multi_retrieval": ("opencompass",),
    "multi_reasoning": ("opencompass",),
    "atc": ("opencompass",),
    "counting_stars": ("counting-stars",),
}
#: Every ``--compat`` mode, in the order they are listed.
COMPAT_MODES = tuple(dict.fromkeys(mode for modes in COMPAT_MODES_BY_FAMILY.values() for mode in modes))
#: Families whose lengths may be counted in another tokenizer (``--tokenizer hf:...``).
HF_TOKENIZER_FAMILIES = ("single", "multi_retrieval", "multi_reasoning")

#: 20-point linear depth list (int-truncated, as the reference computes it) and the 11-point sparse list.
DEPTHS_LINEAR_20 = tuple(int(i * 100 / 19) for i in range(20))
DEPTHS_SPARSE_11 = (0, 10, 21, 31, 42, 52, 63, 73, 84, 94, 100)

CONTEXT_LENGTHS = {
    "4k": (1000, 2000, 3000, 4000),
    "8k": (5000, 6000, 7000, 8000),
    "32k": (9000, 13000, 17000, 21000, 25000, 29000, 31000, 32000),
    "128k": tuple(range(16000, 128001, 16000)),
    "200k": (16000, 48000, 80000, 112000, 128000, 144000, 176000, 200000),
    "256k": (32000, 128000, 256000),
    "1000k": (20000, 160000, 300000, 440000, 580000, 720000, 860000, 1000000),
}

#: (family, language, size) -> length buffer in cl100k tokens (reference v1 configs).
_BUFFERS_EN = {
    "single": {"4k": 600, "8k": 800, "32k": 3000},
    "multi_retrieval": {"4k": 1000, "8k": 1300, "32k": 3000},
    "multi_reasoning": {"4k": 600, "8k": 1000, "32k": 3000},
}
_BUFFERS_EN_DEFAULT = {"single": 600, "multi_retrieval": 3000, "multi_reasoning": 600}
ZH_BUFFER = 200

REPEATS = {"single": 10, "multi_retrieval": 25, "multi_reasoning": 10, "atc": 10, "counting_stars": 1}

#: NeedleBench v2 grid (reference `needlebench_v2_<size>/needlebench_v2_single_<size>.py`; M-RT and M-RS import it).
V2_CONTEXT_LENGTHS = {
    "4k": (1000, 2000, 3000, 4000),
    "8k": tuple(range(1000, 8001, 1000)),
    "32k": (1000, *range(4000, 32001, 4000)),
    "128k": (1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000),
    "200k": (1000, *range(25000, 200001, 25000)),
    "256k": (32000, 128000, 256000),
    "1000k": (1000, *range(125000, 1000001, 125000)),
}
V2_DEPTHS = tuple(range(0, 101, 10))
#: v2 buffers: English 500 at 4k/8k and 3000 from 32k, Chinese 200, the same for S-RT, M-RT and M-RS.
V2_BUFFERS_EN = {"4k": 500, "8k": 500}
V2_BUFFER_EN_DEFAULT = 3000
#: v2 ATC: relation counts (a chain of n relations has n+1 names) and the four question types, in the
#: reference's order (its seeds are ``(repeat + 1) + 10000 * type index``).
V2_ATC_RELATION_COUNTS = tuple(2**k for k in range(1, 10))  # 2 .. 512
V2_ATC_QUESTION_TYPES = ("ELDEST_ANCESTOR", "NTH_ANCESTOR", "NTH_DESCENDANT", "RELATIONSHIP_DISTANCE")
EDITIONS = ("v1", "v2")

#: M-RS needle counts and the spacing between consecutive needles in percent of the haystack.
REASONING_NEEDLE_COUNTS = (2, 3, 4, 5)
REASONING_NEEDLE_SPACING = 10

#: ATC needle counts (number of names in the chain).
ATC_NEEDLE_COUNTS = tuple(range(2, 20))
ATC_EXTENDED_NEEDLE_COUNTS = tuple(2**k for k in range(1, 10))  # 2 .. 512
ATC_ROTATIONS = ("ABCD", "BCDA", "CDAB", "DABC")

#: Counting-Stars: 32 lengths per family and the allowed star counts.
COUNTING_STARS_LENGTHS = {
    "128k": tuple(range(4000, 128001, 4000)),
    "1000k": tuple(round(1_000_000 * (i + 1) / 32) for i in range(32)),
}
COUNTING_STARS_TASKS = ("acquisition", "reasoning")
STAR_COUNTS = (32, 64, 128, 256, 512, 1024)
DEFAULT_STARS = 32
#: For M above the paper's 32, a length is in the config only if it holds at least this many tokens per star,
#: so the star sentences stay a minority of the context (a reasoning star sentence is ~40 tokens).
MIN_TOKENS_PER_STAR = {"acquisition": 64, "reasoning": 96}


def counting_stars_lengths(size: str, task: str, stars: int) -> tuple[int, ...]:
    """The paper's 32 lengths of a family; for M > 32 only those with room for the stars."""
    lengths = COUNTING_STARS_LENGTHS[size]
    if stars <= DEFAULT_STARS:
        return lengths
    return tuple(length for length in lengths if length >= stars * MIN_TOKENS_PER_STAR[task])


def depths_for(size: str) -> tuple[int, ...]:
    """Depth grid of a NeedleBench size: 20 linear points at 4k/8k, the 11-point sparse list from 32k."""
    return DEPTHS_LINEAR_20 if size in ("4k", "8k") else DEPTHS_SPARSE_11


def buffer_for(family: str, language: str, size: str, edition: str = "v1") -> int:
    """Length buffer (tokens kept free for the prompt frame and question) of the reference configs."""
    if language == "zh":
        return ZH_BUFFER
    if edition == "v2":
        return V2_BUFFERS_EN.get(size, V2_BUFFER_EN_DEFAULT)
    return _BUFFERS_EN[family].get(size, _BUFFERS_EN_DEFAULT[family])


@dataclass(frozen=True)
class ConfigSpec:
    """One dataset config (one Hub config, one lm-eval task)."""

    name: str
    family: str
    language: str
    size: str | None = None
    #: ATC: "direct", "reasoning", "extended", "open"; Counting-Stars: "acquisition", "reasoning".
    variant: str = ""
    stars: int | None = None
    #: NeedleBench edition: "v1" (the paper's) or "v2" (OpenCompass's current one).
    edition: str = "v1"

    @property
    def task_label(self) -> str:
        return FAMILIES[self.family]

    @property
    def compat_modes(self) -> tuple[str, ...]:
        """The ``--compat`` modes this config builds in (:data:`COMPAT_MODES_BY_FAMILY`)."""
        if self.family == "counting_stars" and self.stars != DEFAULT_STARS:
            return ()  # the reference's star lists are fixed at M=32
        return COMPAT_MODES_BY_FAMILY[self.family]

    @property
    def accepts_hf_tokenizer(self) -> bool:
        """Can its lengths be counted in a Hugging Face tokenizer (``--tokenizer hf:...``)?"""
        return self.family in HF_TOKENIZER_FAMILIES

    def check_mode(self, compat: str | None) -> None:
        """A one-line error when ``--compat compat`` does not apply to this config (None, the default, always does)."""
        if compat is None or compat in self.compat_modes:
            return
        if self.compat_modes:
            allowed = f"use --compat {' or --compat '.join(self.compat_modes)}, or no --compat"
        elif self.family == "counting_stars":
            allowed = (
                f"the reference's star lists are fixed for M={DEFAULT_STARS} and it has M={self.stars}; "
                "build it without --compat"
            )
        else:
            allowed = "build it without --compat"
        raise NeedlebenchError(f"compat mode {compat} does not apply to {self.name}; {allowed}")

    @property
    def is_v2(self) -> bool:
        return self.edition == "v2"

    @property
    def schema_family(self) -> str:
        """The row schema of the config (:mod:`needlebench.tasks.schema`): its family, ``atc_v2`` for v2 ATC."""
        return "atc_v2" if self.family == "atc" and self.is_v2 else self.family

    @property
    def lengths(self) -> tuple[int, ...]:
        if self.family == "counting_stars":
            return counting_stars_lengths(self.size, self.variant, self.stars)
        if self.size is None:
            return ()
        return V2_CONTEXT_LENGTHS[self.size] if self.is_v2 else CONTEXT_LENGTHS[self.size]

    def select_lengths(self, lengths: tuple[int, ...] | None) -> tuple[int, ...]:
        """The config's lengths, or the given ones (which must be among them) in grid order."""
        if lengths is None:
            return self.lengths
        unknown = sorted(set(lengths) - set(self.lengths))
        if unknown:
            shown = ", ".join(str(length) for length in self.lengths[:3])
            raise NeedlebenchError(
                f"length {unknown[0]} is not a length of {self.name}; allowed: {shown}, ..., {self.lengths[-1]} "
                f"({len(self.lengths)} lengths)"
            )
        return tuple(length for length in self.lengths if length in lengths)

    @property
    def depths(self) -> tuple[int, ...]:
        if self.family in ("single", "multi_retrieval", "multi_reasoning"):
            return V2_DEPTHS if self.is_v2 else depths_for(self.size)
        return ()

    @property
    def buffer(self) -> int:
        if self.family in ("single", "multi_retrieval", "multi_reasoning"):
            return buffer_for(self.family, self.language, self.size, self.edition)
        return 0

    @property
    def repeats(self) -> int:
        return REPEATS[self.family]

    @property
    def needle_counts(self) -> tuple[int, ...]:
        if self.family == "multi_reasoning":
            return REASONING_NEEDLE_COUNTS
        if self.family == "atc":
            if self.is_v2:
                return V2_ATC_RELATION_COUNTS
            return ATC_EXTENDED_NEEDLE_COUNTS if self.variant == "extended" else ATC_NEEDLE_COUNTS
        if self.family == "multi_retrieval":
            return (len(self.depths),)
        return (1,)

    @property
    def num_rows(self) -> int:
        """Rows of the test split."""
        if self.family == "single":
            return len(self.lengths) * len(self.depths) * self.repeats
        if self.family == "multi_retrieval":
            return len(self.lengths) * self.repeats
        if self.family == "multi_reasoning":
            return len(self.lengths) * len(self.depths) * len(self.needle_counts) * self.repeats
        if self.family == "atc" and self.is_v2:
            return len(self.needle_counts) * self.repeats * len(V2_ATC_QUESTION_TYPES)
        if self.family == "atc":
            rotations = 1 if self.variant == "open" else len(ATC_ROTATIONS)
            return len(self.needle_counts) * self.repeats * rotations
        if self.family == "counting_stars":
            return len(self.lengths)
        raise AssertionError(self.family)

    def _context_tokens(self, length: int) -> int:
        """Haystack + needles of a length in the default build (a buffer not below the length is halved)."""
        return length - self.buffer if self.buffer < length else length // 2

    @property
    def approx_tokens(self) -> int:
        """Approximate context tokens of the split (haystack + needles), for `needlebench list`."""
        if self.family in ("single", "multi_reasoning"):
            per_length = len(self.depths) * self.repeats * len(self.needle_counts)
            return sum(self._context_tokens(length) for length in self.lengths) * per_length
        if self.family == "multi_retrieval":
            return sum(self._context_tokens(length) for length in self.lengths) * self.repeats
        if self.family == "counting_stars":
            return sum(self.lengths)
        return ATC_HAYSTACK_TOKENS.get(self.name, 0)


#: Context tokens of each ATC split (its ``haystack_tokens`` column summed: the needle chains, cl100k) as the
#: default build (release seed) writes them: ATC rows are generated, not cut to a length, so this is measured,
#: not derived from a grid; ``tests/test_cli_output.py`` rebuilds them and checks.
ATC_HAYSTACK_TOKENS = {
    "atc_en": 124_548,
    "atc_en_reasoning": 123_088,
    "atc_en_512": 727_720,
    "atc_en_open": 31_045,
    "atc_zh": 180_068,
    "atc_zh_reasoning": 180_240,
    "atc_zh_512": 1_070_980,
    "atc_zh_open": 44_724,
    "v2_atc_en": 927_463,
    "v2_atc_zh": 1_297_521,
}


def _build_registry() -> dict[str, ConfigSpec]:
    specs: list[ConfigSpec] = []
    for family in ("single", "multi_retrieval", "multi_reasoning"):
        for language in LANGUAGES:
            for size in SIZES:
                specs.append(ConfigSpec(f"{family}_{language}_{size}", family, language, size))
    for language in LANGUAGES:
        specs.append(ConfigSpec(f"atc_{language}", "atc", language, variant="direct"))
        specs.append(ConfigSpec(f"atc_{language}_reasoning", "atc", language, variant="reasoning"))
        specs.append(ConfigSpec(f"atc_{language}_512", "atc", language, variant="extended"))
        specs.append(ConfigSpec(f"atc_{language}_open", "atc", language, variant="open"))
    for task in COUNTING_STARS_TASKS:
        for language in LANGUAGES:
            for size in COUNTING_STARS_LENGTHS:
                for stars in STAR_COUNTS:
                    if not counting_stars_lengths(size, task, stars):
                        continue
                    suffix = "" if stars == DEFAULT_STARS else f"_m{stars}"
                    name = f"counting_stars_{task}_{language}_{size}{suffix}"
                    specs.append(ConfigSpec(name, "counting_stars", language, size, variant=task, stars=stars))
    # NeedleBench v2, after every v1 config (so v1 listings and builds keep their order)
    for family in ("single", "multi_retrieval", "multi_reasoning"):
        for language in LANGUAGES:
            for size in SIZES:
                specs.append(ConfigSpec(f"v2_{family}_{language}_{size}", family, language, size, edition="v2"))
    for language in LANGUAGES:
        specs.append(ConfigSpec(f"v2_atc_{language}", "atc", language, variant="v2", edition="v2"))
    return {spec.name: spec for spec in specs}


@cache
def registry() -> dict[str, ConfigSpec]:
    """All configs by name, in a stable order."""
    return _build_registry()


#: Configs registered at run time (experiment files), looked up by name after the built-in ones; they are not
#: part of :func:`registry` (so the shipped task files, `list` and globs only see built-in configs).
_REGISTERED: dict[str, ConfigSpec] = {}


def register_config(spec: ConfigSpec) -> None:
    """Make a run-time config (an experiment) resolvable by :func:`get_config`; a built-in name is refused."""
    if spec.name in registry():
        raise NeedlebenchError(f"config name {spec.name!r} is a built-in config; choose another name")
    _REGISTERED[spec.name] = spec


def get_config(name: str) -> ConfigSpec:
    if name in _REGISTERED:
        return _REGISTERED[name]
    try:
        return registry()[name]
    except KeyError:
        suggestion = _closest(name)
        hint = f"did you mean {suggestion}? " if suggestion else ""
        raise NeedlebenchError(
            f"unknown config {name!r}; {hint}run `needlebench list` for the allowed names "
            "(e.g. single_en_4k, multi_retrieval_zh_128k, atc_en, counting_stars_acquisition_en_128k, v2_single_en_4k)"
        ) from None


def _closest(name: str) -> str | None:
    """The registered config name closest to a mistyped one (rapidfuzz ratio >= 80), or None."""
    from rapidfuzz import fuzz, process

    match = process.extractOne(str(name), list(registry()), scorer=fuzz.ratio, score_cutoff=80)
    return match[0] if match else None


_GLOB_CHARS = re.compile(r"[*?\[]")


def match_configs(patterns: list[str] | tuple[str, ...]) -> list[ConfigSpec]:
    """Configs matching names or shell globs, in registry order; an unmatched pattern is an error."""
    names = list(registry())
    chosen: set[str] = set()
    for pattern in patterns:
        hits = fnmatch.filter(names, pattern)
        if not hits and _GLOB_CHARS.search(pattern):
            raise NeedlebenchError(
                f"glob {pattern!r} matches no config; run `needlebench list` for the names "
                "(globs use * and ?, e.g. 'single_*_4k')"
            )
        if not hits:
            get_config(pattern)  # raises the one-line error (with a did-you-mean)
        chosen.update(hits)
    return [registry()[name] for name in names if name in chosen]
