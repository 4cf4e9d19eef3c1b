"""Build options: everything besides the config name that decides a split's bytes (recorded as the recipe)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from . import __version__
from .errors import NeedlebenchError
from .seeding import RELEASE_SEED
from .writer import COMPRESSIONS

COMPAT_MODES = ("opencompass", "counting-stars")


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
        return self.haystack_en if language == "en" else self.haystack_zh

    def reasoning_needles(self, language: str) -> str | None:
        return self.reasoning_needles_en if language == "en" else self.reasoning_needles_zh

    def depths_for(self, spec_depths: tuple[int, ...]) -> tuple[float, ...]:
        """The depth grid to use: the override, or the config's own."""
        return self.depths if self.depths is not None else tuple(float(d) for d in spec_depths)

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
