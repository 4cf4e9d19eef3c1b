"""Build options: everything besides the config name that decides a split's bytes (recorded as the recipe)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from . import __version__
from .errors import NeedlebenchError
from .seeding import RELEASE_SEED

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

    def __post_init__(self) -> None:
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

    def to_recipe(self) -> dict:
        return {"generator_version": __version__, **asdict(self)}

    @classmethod
    def from_recipe(cls, recipe: dict) -> "BuildOptions":
        names = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in recipe.items() if key in names})
