"""What every benchmark family is made of: the config record (:class:`ConfigSpec`), an explicit grid value
(:class:`Grid`), the :class:`Family` base class and the grid tables several families share.

A config is data only (name, family key, language, size, variant, stars, edition, an optional explicit grid); its
grid (lengths, depths, buffer, repeats, needle counts, rows, approximate tokens), its row columns, its build modes
and its row generator are asked of its family object, found by key in :data:`FAMILIES` (filled, in order, by
:mod:`needlebench.tasks.families`). Edition differences are tables keyed by ``spec.edition``.

This module imports no other family module and nothing heavy: ``needlebench list`` reads the grid through it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from needlebench.errors import NeedlebenchError

if TYPE_CHECKING:  # the settings module imports numpy (seeding), which `needlebench list` must not load
    from needlebench.tasks.settings import HaystackSettings

LANGUAGES = ("en", "zh")
SIZES = ("4k", "8k", "32k", "128k", "200k", "256k", "1000k")
#: NeedleBench editions: "v1" (the paper's) and "v2" (OpenCompass's current one), in registry order.
EDITIONS = ("v1", "v2")
#: Config-name prefix of each edition (v2 configs are named ``v2_*``).
EDITION_PREFIX = {"v1": "", "v2": "v2_"}

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
#: Chinese length buffer of every haystack config, both editions (reference configs).
ZH_BUFFER = 200
#: v2 buffers: English 500 at 4k/8k and 3000 from 32k, the same for S-RT, M-RT and M-RS.
V2_BUFFERS_EN = {"4k": 500, "8k": 500}
V2_BUFFER_EN_DEFAULT = 3000
#: The v2 English buffers as the families' tables hold them: by size, and for the sizes not listed.
V2_EN_BUFFERS = (V2_BUFFERS_EN, V2_BUFFER_EN_DEFAULT)

#: The haystack grid of each edition: lengths by size, depths by size.
HAYSTACK_LENGTHS = {"v1": CONTEXT_LENGTHS, "v2": V2_CONTEXT_LENGTHS}
#: Sizes with the 20-point linear depth list in v1 (the 11-point sparse list from 32k); v2 has 11 depths everywhere.
_LINEAR_DEPTH_SIZES = ("4k", "8k")
HAYSTACK_DEPTHS = {
    "v1": {size: DEPTHS_LINEAR_20 if size in _LINEAR_DEPTH_SIZES else DEPTHS_SPARSE_11 for size in SIZES},
    "v2": dict.fromkeys(SIZES, V2_DEPTHS),
}
#: Sizes whose haystack configs get one Parquet shard per context length.
LONG_SIZES = ("128k", "200k", "256k", "1000k")

#: Column types of the row schemas, as `datasets` names them; a list column is ``list<TYPE>``
#: (:mod:`needlebench.tasks.schema` turns them into Arrow types).
HAYSTACK_COLUMNS = {
    "buffer": "int64",
    "requested_depths": "list<float64>",
    "needle_boundaries": "list<string>",  # per needle: sentence, clause, paragraph, line, word; compat
    "corpus_cycles": "int64",  # > 0 when the haystack wrapped around the corpus
    "compat": "string",
}

#: A row generator: ``(spec, settings, lengths, utf8_prompts) -> rows`` (`lengths` the selected context lengths,
#: all of the config's when it has none to select; `utf8_prompts` lets haystack families give prompts as bytes).
RowGenerator = Callable[["ConfigSpec", "HaystackSettings", tuple[int, ...], bool], Iterator[dict]]


@dataclass(frozen=True)
class Grid:
    """An explicit grid, for a config whose grid is not its family's tables: an experiment file's (with the
    generator and settings of its rows) or one observed in a run's samples (nothing to build).

    `num_rows` and `approx_tokens` None: the family's formula over these values."""

    lengths: tuple[int, ...]
    depths: tuple[float, ...] = ()
    buffer: int = 0
    repeats: int = 1
    needle_counts: tuple[int, ...] = (1,)
    num_rows: int | None = None
    approx_tokens: int | None = None
    #: What builds the rows (None: the family's default generator, over this grid; an observed grid is never built)
    #: and the settings they read.
    rows: RowGenerator | None = field(default=None, compare=False)
    settings: HaystackSettings | None = None
    #: Where the grid comes from (an experiment: :class:`needlebench.tasks.experiment.Experiment`).
    source: Any = field(default=None, compare=False)
    #: Read from a run's samples (a config with no registry entry and no manifest at hand; nothing to build).
    observed: bool = False


@dataclass(frozen=True)
class ConfigSpec:
    """One dataset config (one Hub config, one lm-eval task): data only; its grid and modes are its family's."""

    name: str
    family: str
    language: str
    size: str | None = None
    #: ATC: "direct", "reasoning", "extended", "open", "v2"; Counting-Stars: "acquisition", "reasoning".
    variant: str = ""
    stars: int | None = None
    #: NeedleBench edition: "v1" (the paper's) or "v2" (OpenCompass's current one).
    edition: str = "v1"
    #: An explicit grid (experiments, observed configs); None: the family's tables.
    grid: Grid | None = field(default=None, compare=False)

    @property
    def family_object(self) -> Family:
        return family_of(self.family)

    @property
    def task_label(self) -> str:
        return self.family_object.label

    @property
    def compat_modes(self) -> tuple[str, ...]:
        """The ``--compat`` modes this config builds in."""
        return self.family_object.compat_modes(self)

    @property
    def accepts_hf_tokenizer(self) -> bool:
        """Can its lengths be counted in a Hugging Face tokenizer (``--tokenizer hf:...``)?"""
        return self.family_object.accepts_hf_tokenizer(self)

    def check_mode(self, compat: str | None) -> None:
        """A one-line error when ``--compat compat`` does not apply to this config (None, the default, always does)."""
        self.family_object.check_mode(self, compat)

    @property
    def schema_family(self) -> str:
        """The row schema of the config (:mod:`needlebench.tasks.schema`): its family's schema for its edition."""
        return self.family_object.schema_key(self)

    @property
    def experiment(self) -> Any:
        """The experiment an experiment config was built from (None for the others)."""
        return self.grid.source if self.grid is not None else None

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.family_object.lengths(self)

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
    def depths(self) -> tuple[float, ...]:
        return self.family_object.depths(self)

    @property
    def buffer(self) -> int:
        return self.family_object.buffer(self)

    @property
    def repeats(self) -> int:
        return self.family_object.repeats(self)

    @property
    def needle_counts(self) -> tuple[int, ...]:
        return self.family_object.needle_counts(self)

    @property
    def num_rows(self) -> int:
        """Rows of the test split."""
        return self.family_object.num_rows(self)

    @property
    def approx_tokens(self) -> int:
        """Approximate context tokens of the split (haystack + needles), for `needlebench list`."""
        return self.family_object.approx_tokens(self)


class Family:
    """A benchmark family, build half: its grid, row columns, configs, build modes and generators.

    Subclasses fill the class attributes and the methods marked as theirs; one instance of each is registered in
    :data:`FAMILIES`. Every method that takes a spec honours the spec's explicit :class:`Grid` when it has one."""

    #: Registry key (the config's ``family``) and the label of tables (``task`` column).
    key: str = ""
    label: str = ""
    #: Columns of its rows by schema key (beside :data:`needlebench.tasks.schema.BASE_COLUMNS`), and the schema
    #: key of each edition (None: the family key for every edition).
    schemas: Mapping[str, Mapping[str, str]] = {}
    schema_by_edition: Mapping[str, str] | None = None
    #: ``--compat`` modes (the reference construction, byte for byte) and ``--tokenizer hf:`` support.
    compat: tuple[str, ...] = ()
    hf_tokenizer: bool = False
    #: Repeats of a grid cell.
    cell_repeats: int = 1
    #: Does the build read a haystack corpus for it; is it a length x depth grid in a haystack with a buffer.
    reads_haystack: bool = True
    haystack_grid: bool = False
    #: Does each depth of the grid give its own rows (S-RT, M-RS), or place needles in one row (M-RT); does each
    #: needle count give its own rows (M-RS).
    row_per_depth: bool = False
    row_per_needle_count: bool = False
    #: Experiments of this kind put one sampled needle in each prompt (else every needle); their needles are
    #: sentences of one chain with one question, answer and keyword (else each needle has its own).
    one_needle_per_prompt: bool = False
    chain_needles: bool = False
    #: Context lengths per Parquet shard by size (sizes not listed: one shard).
    lengths_per_shard: Mapping[str, int] = {}
    #: The build input its ``needles`` setting reads, by edition (a :class:`BuildOptions` input, or None).
    needles_input: Mapping[str, str | None] = {}
    #: Question positions it supports (None: every one) and why not, for the one-line error.
    question_positions: tuple[str, ...] | None = None
    question_position_note: str = ""
    #: Card text (what it measures) by edition, and the card tags it adds.
    card_text: Mapping[str, str] = {}
    card_tags: tuple[str, ...] = ()

    # ---- its configs and generators (each family's own)

    def configs(self, edition: str) -> list[ConfigSpec]:
        """Its built-in configs of an edition, in registry order."""
        return []

    def generators(self) -> Mapping[str, RowGenerator]:
        """Its default row generator by edition (imported when rows are built, not when the grid is read)."""
        raise NotImplementedError

    def grid_lengths(self, spec: ConfigSpec) -> tuple[int, ...]:
        return ()

    def grid_depths(self, spec: ConfigSpec) -> tuple[float, ...]:
        return ()

    def grid_buffer(self, spec: ConfigSpec) -> int:
        return 0

    def grid_needle_counts(self, spec: ConfigSpec) -> tuple[int, ...]:
        return (1,)

    def count_rows(self, spec: ConfigSpec) -> int:
        """Rows of a config from its grid."""
        raise NotImplementedError

    def count_tokens(self, spec: ConfigSpec) -> int:
        """Approximate context tokens of a config from its grid."""
        raise NotImplementedError

    def no_compat_reason(self, spec: ConfigSpec) -> str:
        """Why a config without compat modes builds only in the default mode (the end of the one-line error)."""
        return "build it without --compat"

    # ---- the grid of a spec (its explicit grid, else the family's tables)

    def lengths(self, spec: ConfigSpec) -> tuple[int, ...]:
        return spec.grid.lengths if spec.grid is not None else self.grid_lengths(spec)

    def depths(self, spec: ConfigSpec) -> tuple[float, ...]:
        return spec.grid.depths if spec.grid is not None else self.grid_depths(spec)

    def buffer(self, spec: ConfigSpec) -> int:
        return spec.grid.buffer if spec.grid is not None else self.grid_buffer(spec)

    def repeats(self, spec: ConfigSpec) -> int:
        return spec.grid.repeats if spec.grid is not None else self.cell_repeats

    def needle_counts(self, spec: ConfigSpec) -> tuple[int, ...]:
        return spec.grid.needle_counts if spec.grid is not None else self.grid_needle_counts(spec)

    def num_rows(self, spec: ConfigSpec) -> int:
        explicit = spec.grid.num_rows if spec.grid is not None else None
        return self.count_rows(spec) if explicit is None else explicit

    def approx_tokens(self, spec: ConfigSpec) -> int:
        explicit = spec.grid.approx_tokens if spec.grid is not None else None
        return self.count_tokens(spec) if explicit is None else explicit

    # ---- schema, modes and rows

    def schema_key(self, spec: ConfigSpec) -> str:
        return (self.schema_by_edition or {}).get(spec.edition, self.key)

    def compat_modes(self, spec: ConfigSpec) -> tuple[str, ...]:
        """Its ``--compat`` modes; a config with an explicit grid is needlebench's own construction (none)."""
        return () if spec.grid is not None else self.compat

    def accepts_hf_tokenizer(self, spec: ConfigSpec) -> bool:
        return spec.grid is not None or self.hf_tokenizer

    def check_mode(self, spec: ConfigSpec, compat: str | None) -> None:
        """A one-line error when ``--compat compat`` does not apply to `spec` (None, the default, always does)."""
        modes = self.compat_modes(spec)
        if compat is None or compat in modes:
            return
        allowed = f"use --compat {' or --compat '.join(modes)}, or no --compat" if modes else None
        raise NeedlebenchError(
            f"compat mode {compat} does not apply to {spec.name}; {allowed or self.no_compat_reason(spec)}"
        )

    def check_spec(self, spec: ConfigSpec) -> None:
        """A one-line error when `spec` is not a valid config of the family (before its lengths are selected)."""

    def check_question_position(self, spec: ConfigSpec, position: str) -> None:
        """A one-line error when the family cannot ask its question at `position`."""
        if self.question_positions is not None and position not in self.question_positions:
            raise NeedlebenchError(
                f"question position {position!r} is not supported by {spec.name}; {self.question_position_note} "
                f"(allowed: {', '.join(self.question_positions)})"
            )

    def generator(self, spec: ConfigSpec) -> RowGenerator:
        """The default-mode generator of `spec`'s rows: its explicit grid's, else the family's for its edition."""
        if spec.grid is not None and spec.grid.rows is not None:
            return spec.grid.rows
        return self.generators()[spec.edition]

    def settings(self, spec: ConfigSpec, settings: HaystackSettings) -> HaystackSettings:
        """The settings `spec`'s rows read, from those of the build: an explicit grid's own settings (an
        experiment's seed, buffer, depths and question position) keep the build's tokenizer and haystack."""
        own = spec.grid.settings if spec.grid is not None else None
        if own is None:
            return settings
        return replace(own, tokenizer=settings.tokenizer, haystack=settings.haystack)

    def shard_groups(self, spec: ConfigSpec) -> list[tuple[int, ...] | None]:
        """The context lengths of each Parquet shard of `spec` (``[None]``: one shard of every length)."""
        per = self.lengths_per_shard.get(spec.size or "")
        if not per:
            return [None]
        lengths = spec.lengths
        return [tuple(lengths[i : i + per]) for i in range(0, len(lengths), per)]


class HaystackFamily(Family):
    """S-RT, M-RT and M-RS: a grid of lengths x depths in a haystack cut to length minus a buffer."""

    hf_tokenizer = True
    haystack_grid = True
    lengths_per_shard = dict.fromkeys(LONG_SIZES, 1)
    #: English length buffer by edition: by size, and for the sizes not listed (reference configs).
    en_buffers: Mapping[str, tuple[Mapping[str, int], int]] = {"v2": V2_EN_BUFFERS}

    def grid_lengths(self, spec: ConfigSpec) -> tuple[int, ...]:
        return HAYSTACK_LENGTHS[spec.edition][spec.size]

    def grid_depths(self, spec: ConfigSpec) -> tuple[float, ...]:
        return HAYSTACK_DEPTHS[spec.edition][spec.size]

    def grid_buffer(self, spec: ConfigSpec) -> int:
        return self.buffer_of(spec.language, spec.size, spec.edition)

    def buffer_of(self, language: str, size: str, edition: str = "v1") -> int:
        """Length buffer (tokens kept free for the prompt frame and question) of the reference configs."""
        by_size, default = self.en_buffers[edition]
        return {"zh": ZH_BUFFER}.get(language, by_size.get(size, default))

    def _rows_per_cell(self, spec: ConfigSpec) -> int:
        """Rows of one (length, repeat) cell: one per depth and needle count where each gives its own rows."""
        depths = len(spec.depths) if self.row_per_depth else 1
        return depths * (len(spec.needle_counts) if self.row_per_needle_count else 1)

    def count_rows(self, spec: ConfigSpec) -> int:
        return len(spec.lengths) * self._rows_per_cell(spec) * spec.repeats

    def count_tokens(self, spec: ConfigSpec) -> int:
        """Haystack + needles of each length in the default build (a buffer not below the length is halved)."""
        buffer = spec.buffer
        per_length = self._rows_per_cell(spec) * spec.repeats
        return sum(length - buffer if buffer < length else length // 2 for length in spec.lengths) * per_length

    def configs(self, edition: str) -> list[ConfigSpec]:
        return [
            ConfigSpec(
                f"{EDITION_PREFIX[edition]}{self.key}_{language}_{size}", self.key, language, size, edition=edition
            )
            for language in LANGUAGES
            for size in SIZES
        ]


#: Every family by key, in registry order (filled by :mod:`needlebench.tasks.families`).
FAMILIES: dict[str, Family] = {}


def family_of(spec_or_key: ConfigSpec | str) -> Family:
    """The family object of a config or a family key."""
    key = spec_or_key.family if isinstance(spec_or_key, ConfigSpec) else spec_or_key
    try:
        return FAMILIES[key]
    except KeyError:
        raise NeedlebenchError(f"unknown family {key!r}; allowed: {', '.join(FAMILIES)}") from None
