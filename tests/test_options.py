"""Build options: validation, pinning of Hub inputs, and the recipe round trip."""

from __future__ import annotations

import pytest

from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.sources.hub import OPENCOMPASS_REVISION


def test_recipe_round_trip():
    options = BuildOptions(release_seed=7, depths=(0, 50.5, 100), buffer=100, compression="none")
    recipe = options.to_recipe()
    assert recipe["depths"] == [0.0, 50.5, 100.0] and recipe["generator_version"]
    assert BuildOptions.from_recipe(recipe) == options


def test_hub_inputs_are_pinned_for_the_recipe():
    options = BuildOptions(haystack_en="hub:org/texts::validation", needles="opencompass", haystack_zh="hub:org/zh@v2")
    pinned = options.pinned({"en": {"revision": "0123abc"}, "zh": {"revision": "fedcba9"}})
    assert pinned.haystack_en == "hub:org/texts@0123abc::validation"
    assert pinned.haystack_zh == "hub:org/zh@v2"  # an explicit revision is kept
    assert pinned.needles == f"opencompass@{OPENCOMPASS_REVISION}"
    assert BuildOptions().pinned({}) == BuildOptions()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"tokenizer": "hf:no-such-org/no-such-model"},
            "not a local folder nor a model in the local Hugging Face cache",
        ),
        ({"tokenizer": "sentencepiece"}, "unknown tokenizer .*; allowed: cl100k_base or hf:PATH_OR_NAME"),
        ({"compression": "gzip"}, "unknown compression"),
        ({"depths": (0, 101)}, "between 0 and 100"),
        ({"compat": "v2"}, "unknown compat mode"),
        ({"question_position": "middle"}, "unknown question position"),
        ({"buffer": -1}, "negative"),
        ({"compat": "opencompass", "question_position": "start"}, "supports only --question-position end"),
    ],
)
def test_bad_options(kwargs, message):
    with pytest.raises(NeedlebenchError, match=message):
        BuildOptions(**kwargs)


def test_tokenizer_aliases_are_recorded_as_cl100k_base():
    assert BuildOptions(tokenizer="gpt-4").tokenizer == "cl100k_base"
