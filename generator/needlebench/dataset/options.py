"""Build options: everything besides the config name that decides a split's bytes (recorded as the recipe)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from needlebench import __version__
from needlebench.dataset.writer import COMPRESSIONS
from needlebench.errors import NeedlebenchError
from needlebench.seeding import RELEASE_SEED
from needlebench.sources.hub import OPENCOMPASS_REVISION, opencompass_file, parse_corpus_option, pin_hub_spec
from needlebench.sources.inputs import (
    LOCAL_INPUT_OPTIONS,
    check_given,
    check_recipe_paths,
    input_record,
    is_input_record,
    is_local_spec,
    locate,
)
from needlebench.sources.tokenizer import CL100K_NAMES, DEFAULT_TOKENIZER, canonical_tokenizer
from needlebench.tasks.grid import COMPAT_MODES, ConfigSpec
from needlebench.tasks.settings import HaystackSettings

__all__ = ["COMPAT_MODES", "BuildOptions", "RecipeError"]  # modes: the family objects declare them (tasks.grid)


#: The paper's haystack file of each language in the Hub dataset opencompass/NeedleBench.
OPENCOMPASS_HAYSTACKS = {"en": "PaulGrahamEssays.jsonl", "zh": "zh_finance.jsonl"}


def is_opencompass_spec(spec: str | None) -> bool:
    return spec is not None and (spec == "opencompass" or spec.startswith("opencompass@"))


def resolve_input(spec: str | None, filename: str) -> str | None:
    """A local path for an input spec: ``opencompass[@REV]`` downloads `filename` of the paper's Hub dataset
    (cached); None and local paths pass through. Recipes record the spec, never the machine's cache path."""
    if not is_opencompass_spec(spec):
        return spec

    _, revision = parse_corpus_option(spec)
    return str(opencompass_file(filename, revision))


class RecipeError(NeedlebenchError):
    """A recorded recipe that cannot be read back (a key of the wrong type or value)."""


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
        object.__setattr__(self, "tokenizer", _recorded_tokenizer(self.tokenizer, self.compat))
        if self.compression not in COMPRESSIONS:
            raise NeedlebenchError(f"unknown compression {self.compression!r}; allowed: {', '.join(COMPRESSIONS)}")
        if self.depths is not None:
            object.__setattr__(self, "depths", tuple(float(d) for d in self.depths))
            bad = [d for d in self.depths if not 0 <= d <= 100]
            if bad or not self.depths:
                raise NeedlebenchError(f"depths {list(self.depths)} must be percentages between 0 and 100")
            repeated = sorted({d for d in self.depths if self.depths.count(d) > 1})
            if repeated:  # a depth given twice would give two rows the same id
                raise NeedlebenchError(
                    f"depths {list(self.depths)} give {repeated[0]:g} more than once; allowed: distinct percentages"
                )
        if self.compat is not None and self.compat not in COMPAT_MODES:
            raise NeedlebenchError(f"unknown compat mode {self.compat!r}; allowed: {', '.join(COMPAT_MODES)}")
        if self.question_position not in ("end", "start"):
            raise NeedlebenchError(f"unknown question position {self.question_position!r}; allowed: end, start")
        if self.compat == "opencompass" and self.question_position != "end":
            raise NeedlebenchError("compat mode opencompass supports only --question-position end")
        if self.buffer is not None and self.buffer < 0:
            raise NeedlebenchError(f"buffer {self.buffer} is negative; it must be 0 or more tokens")

    def check_modes(self, spec: ConfigSpec) -> None:
        """The compat mode and the tokenizer apply to `spec` (as its family declares: ``Family.compat``,
        ``Family.hf_tokenizer``); a one-line error before anything is built when they do not."""
        spec.check_mode(self.compat)
        self.check_tokenizer(spec)

    def check_tokenizer(self, spec: ConfigSpec) -> None:
        """A tokenizer other than cl100k_base counts only the haystack families (built-in and experiments)."""
        if self.tokenizer != DEFAULT_TOKENIZER and not spec.accepts_hf_tokenizer:
            raise NeedlebenchError(
                f"config {spec.name} counts cl100k_base tokens only; --tokenizer {self.tokenizer} applies to the "
                "single_*, multi_retrieval_* and multi_reasoning_* configs and to experiments"
            )

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

    def _haystack_read(self, language: str) -> str | None:
        """The haystack a family reads: compat mode opencompass reads the paper's file as a local file, the default
        mode reads the haystack spec itself."""
        return self.haystack_file(language) if self.compat == "opencompass" else self.haystack(language)

    def family_input(self, name: str | None, language: str) -> str | None:
        """A family's needles input (:attr:`Family.needles_input`) of a language, resolved to what it reads."""
        return self._FAMILY_INPUTS[name](self, language)

    #: The family inputs by name: retrieval needles, reasoning needle sets, names list, none.
    _FAMILY_INPUTS = {
        "needles": lambda self, language: self.needles_file(),
        "reasoning_needles": lambda self, language: self.reasoning_needles(language),
        "names": lambda self, language: self.names_file(),
        None: lambda self, language: None,
    }

    def settings_for(self, spec: ConfigSpec) -> HaystackSettings:
        """What the family of a config reads from these options, its inputs resolved (its family says which:
        :attr:`Family.needles_input`, :attr:`Family.reads_haystack`); a config with its own settings (an experiment)
        keeps them."""
        family = spec.family_object
        language = spec.language
        settings = HaystackSettings(
            release_seed=self.release_seed,
            haystack=self._haystack_read(language) if family.reads_haystack else None,
            needles=self.family_input(family.needles_input.get(spec.edition), language),
            tokenizer=self.tokenizer,
            question_position=self.question_position,
            buffer=self.buffer,
            depths=self.depths,
            halve_full_buffer=self.compat is None,
        )
        return family.settings(spec, settings)

    def pinned(self, corpora: dict) -> BuildOptions:
        """The same options with every Hub input pinned to a revision, so the recipe rebuilds the same bytes:
        ``opencompass`` gets the pinned revision, ``hub:ORG/NAME`` the commit that was read (from `corpora`,
        the description of the loaded haystacks by language)."""

        changes = {}
        for name in ("haystack_en", "haystack_zh", "needles", "reasoning_needles_en", "reasoning_needles_zh", "names"):
            spec = getattr(self, name)
            if spec == "opencompass":
                changes[name] = f"opencompass@{OPENCOMPASS_REVISION}"
            elif name.startswith("haystack_") and spec is not None and spec.startswith("hub:"):
                commit = corpora.get(name[-2:], {}).get("revision")
                if commit:
                    changes[name] = pin_hub_spec(spec, commit)
        return replace(self, **changes) if changes else self

    def to_recipe(self) -> dict:
        """The options as recorded in the manifest: a local input becomes its file name, size and sha256 (no
        path), so the recipe travels (:mod:`needlebench.sources.inputs`)."""

        recipe = {"generator_version": __version__, **asdict(self)}
        recipe["depths"] = list(self.depths) if self.depths is not None else None
        for name in LOCAL_INPUT_OPTIONS:
            if is_local_spec(recipe[name]):
                recipe[name] = input_record(recipe[name])
        return recipe

    @classmethod
    def from_recipe(cls, recipe: dict, inputs: dict[str, str | None] | None = None) -> BuildOptions:
        """The options of a recorded recipe; `inputs` re-points recorded local inputs (option name -> path).

        A malformed recipe (a key of the wrong type) is a one-line error naming the key."""

        if not isinstance(recipe, dict):
            raise RecipeError(f"the recipe is {type(recipe).__name__}, not an object")
        check_recipe(recipe)
        try:
            check_recipe_paths(recipe)
        except NeedlebenchError as error:
            raise RecipeError(str(error)) from None
        given = dict(inputs or {})
        check_given(recipe, given)
        names = {field.name for field in fields(cls)}
        values = {key: value for key, value in recipe.items() if key in names}
        for name in LOCAL_INPUT_OPTIONS:
            if isinstance(values.get(name), dict):
                values[name] = locate(name, values[name], given.get(name))
        if values.get("depths") is not None:
            values["depths"] = tuple(values["depths"])
        try:
            return cls(**values)
        except NeedlebenchError as error:
            raise RecipeError(f"the recipe is not valid: {error}") from None


def _recorded_tokenizer(spec: object, compat: str | None) -> str:
    """The tokenizer as recorded: ``cl100k_base``, or ``hf:LABEL@sha256:HEX`` for ``hf:PATH_OR_NAME`` (loaded
    from a local folder or the local Hugging Face cache, nothing downloaded). A bad spec is a one-line error."""
    if spec in CL100K_NAMES:
        return DEFAULT_TOKENIZER
    if not isinstance(spec, str) or not spec.startswith("hf:") or len(spec) <= 3:
        raise NeedlebenchError(
            f"unknown tokenizer {spec!r}; allowed: cl100k_base or hf:PATH_OR_NAME (a local tokenizer folder or a "
            "model in the local Hugging Face cache)"
        )
    if compat is not None:
        raise NeedlebenchError(
            f"compat mode {compat} counts cl100k_base tokens as the reference does; --tokenizer {spec} applies "
            "without --compat"
        )

    return canonical_tokenizer(spec)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_input(value: object) -> bool:

    return value is None or isinstance(value, str) or is_input_record(value)


#: The type each recipe key must have, and how to say it.
_RECIPE_TYPES = {
    "release_seed": (_is_int, "an integer"),
    "tokenizer": (lambda v: isinstance(v, str), "a string"),
    "haystack_en": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "haystack_zh": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "needles": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "reasoning_needles_en": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "reasoning_needles_zh": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "names": (_is_input, "null, a spec string or a {file, kind, size, sha256} record"),
    "compat": (lambda v: v is None or isinstance(v, str), "null or a string"),
    "question_position": (lambda v: isinstance(v, str), "a string"),
    "buffer": (lambda v: v is None or _is_int(v), "null or an integer"),
    "depths": (
        lambda v: (
            v is None
            or (isinstance(v, list) and all(isinstance(d, (int, float)) and not isinstance(d, bool) for d in v))
        ),
        "null or a list of numbers",
    ),
    "compression": (lambda v: isinstance(v, str), "a string"),
    "generator_version": (lambda v: isinstance(v, str), "a string"),
    "corpora": (lambda v: isinstance(v, dict), "an object"),
}


def check_recipe(recipe: dict) -> None:
    """Every known key of a recorded recipe has the right type (a one-line error naming the first that has not)."""
    for key, (valid, expected) in _RECIPE_TYPES.items():
        if key in recipe and not valid(recipe[key]):
            shown = json.dumps(recipe[key], ensure_ascii=False)
            shown = shown if len(shown) <= 60 else shown[:59] + "…"
            raise RecipeError(f"recipe key {key!r} is {shown}; expected {expected}")
