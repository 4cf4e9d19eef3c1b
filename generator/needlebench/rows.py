"""One entry point for the rows of any config: dispatch by family and compatibility mode."""

from __future__ import annotations

from collections.abc import Iterator

from . import __version__
from .errors import NeedlebenchError
from .grid import ConfigSpec
from .options import BuildOptions


def iter_rows(
    spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None = None, *, utf8_prompts: bool = False
) -> Iterator[dict]:
    """Rows of `spec` (only the given context lengths when `lengths` is set), in a stable order.

    With `utf8_prompts` the haystack tasks may give each prompt as its UTF-8 bytes (joined from byte spans of
    the corpus, for the Parquet writer); other values and families are unchanged."""
    if lengths is not None and spec.family == "atc":
        raise ValueError("ATC configs have no context lengths to select")
    if spec.family == "counting_stars":
        if options.compat == "opencompass":
            raise NeedlebenchError(
                f"compat mode opencompass does not apply to {spec.name}; use --compat counting-stars"
            )
        from .counting_stars import counting_stars_rows

        return counting_stars_rows(spec, options, lengths)
    if options.compat == "counting-stars":
        raise NeedlebenchError(f"compat mode counting-stars does not apply to {spec.name}; use --compat opencompass")
    if spec.family == "atc":
        from .atc import iter_atc_rows

        return iter_atc_rows(
            spec, release_seed=options.release_seed, version=__version__, names_path=options.names_file(), compat=options.compat
        )
    selected = spec.select_lengths(lengths)
    if options.compat == "opencompass":
        from . import compat_opencompass

        return compat_opencompass.rows(spec, options, selected)
    from . import haystack_tasks

    generators = {
        "single": haystack_tasks.single_rows,
        "multi_retrieval": haystack_tasks.multi_retrieval_rows,
        "multi_reasoning": haystack_tasks.multi_reasoning_rows,
    }
    return generators[spec.family](spec, options, selected, utf8_prompts)
