"""One entry point for the rows of any config: a registry lookup of its generator.

This is where the build recipe (:class:`BuildOptions`) meets the families: the family checks the recipe's mode
and question position, gets only the settings it reads (:meth:`BuildOptions.settings_for`), and its generator for
the compat mode (:func:`needlebench.compat.generator`) builds the rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from needlebench import compat
from needlebench.dataset.options import BuildOptions
from needlebench.tasks.grid import ConfigSpec


def iter_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None = None, *, utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of `spec` (only the given context lengths when `lengths` is set), in a stable order.

    With `utf8_prompts` the haystack tasks may give each prompt as its UTF-8 bytes (joined from byte spans of
    the corpus, for the Parquet writer); other values and families are unchanged."""
    if lengths is not None and not spec.lengths:
        raise ValueError(f"{spec.task_label} configs have no context lengths to select")
    family = spec.family_object
    family.check_mode(spec, options.compat)
    family.check_question_position(spec, options.question_position)
    family.check_spec(spec)
    selected = spec.select_lengths(lengths)
    generate = compat.generator(spec, options.compat)
    return generate(spec, options.settings_for(spec), selected, utf8_prompts)
