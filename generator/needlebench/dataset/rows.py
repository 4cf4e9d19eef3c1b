"""One entry point for the rows of any config: dispatch by family and compatibility mode.

This is where the build recipe (:class:`BuildOptions`) meets the families: each family gets only the settings
it reads (:meth:`BuildOptions.settings_for`), with its inputs resolved.
"""

from __future__ import annotations

from collections.abc import Iterator

from needlebench import __version__
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import ConfigSpec


def iter_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None = None, *, utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of `spec` (only the given context lengths when `lengths` is set), in a stable order.

    With `utf8_prompts` the haystack tasks may give each prompt as its UTF-8 bytes (joined from byte spans of
    the corpus, for the Parquet writer); other values and families are unchanged."""
    if lengths is not None and spec.family == "atc":
        raise ValueError("ATC configs have no context lengths to select")
    if spec.family == "counting_stars":
        return _counting_stars_rows(spec, options, lengths)
    from needlebench.tasks.experiment import ExperimentSpec

    if isinstance(spec, ExperimentSpec):
        if options.compat is not None:
            raise NeedlebenchError(f"compat mode {options.compat} does not apply to experiment {spec.name}")
        from needlebench.tasks.experiment import experiment_rows

        return experiment_rows(spec, options.settings_for(spec), spec.select_lengths(lengths))
    spec.check_mode(options.compat)
    if spec.family == "atc" and spec.is_v2:
        if options.compat == "opencompass":
            from needlebench.compat.opencompass_v2 import atc_v2_rows

            return atc_v2_rows(spec, names_path=options.names_file())
        from needlebench.tasks.atc_v2 import iter_atc_v2_rows

        return iter_atc_v2_rows(
            spec, release_seed=options.release_seed, version=__version__, names_path=options.names_file()
        )
    if spec.family == "atc":
        from needlebench.tasks.atc import iter_atc_rows

        return iter_atc_rows(
            spec,
            release_seed=options.release_seed,
            version=__version__,
            names_path=options.names_file(),
            compat=options.compat,
        )
    selected = spec.select_lengths(lengths)
    settings = options.settings_for(spec)
    if options.compat == "opencompass":
        if spec.is_v2:
            from needlebench.compat import opencompass_v2

            return opencompass_v2.rows(spec, settings, selected)
        from needlebench.compat import opencompass

        return opencompass.rows(spec, settings, selected)
    if spec.family == "single":
        from needlebench.tasks.single import single_rows

        return single_rows(spec, settings, selected, utf8_prompts)
    if spec.family == "multi_retrieval":
        from needlebench.tasks.multi_retrieval import multi_retrieval_rows

        return multi_retrieval_rows(spec, settings, selected, utf8_prompts)
    if spec.is_v2:
        from needlebench.tasks.multi_reasoning_v2 import multi_reasoning_v2_rows

        return multi_reasoning_v2_rows(spec, settings, selected)
    from needlebench.tasks.multi_reasoning import multi_reasoning_rows

    return multi_reasoning_rows(spec, settings, selected, utf8_prompts)


def _counting_stars_rows(spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None) -> Iterator[dict]:
    spec.check_mode(options.compat)
    if options.question_position != "end":
        raise NeedlebenchError(
            f"question position {options.question_position!r} is not supported by {spec.name}; "
            "Counting-Stars asks after the context (allowed: end)"
        )
    settings = options.settings_for(spec)
    if options.compat == "counting-stars":
        from needlebench.compat import counting_stars as compat_counting_stars

        return compat_counting_stars.counting_stars_rows(spec, settings, lengths)
    from needlebench.tasks.counting_stars import counting_stars_rows

    return counting_stars_rows(spec, settings, lengths)
