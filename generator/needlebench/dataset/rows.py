"""One entry point for the rows of any config: dispatch by family and compatibility mode."""

from __future__ import annotations

from collections.abc import Iterator

from needlebench import __version__
from needlebench.dataset.options import BuildOptions
from needlebench.errors import NeedlebenchError
from needlebench.tasks.grid import ConfigSpec


def iter_rows(spec: ConfigSpec, options: BuildOptions, lengths: tuple[int, ...] | None = None) -> Iterator[dict]:
    """Rows of `spec` (only the given context lengths when `lengths` is set), in a stable order."""
    if lengths is not None and spec.family == "atc":
        raise ValueError("ATC configs have no context lengths to select")
    if spec.family == "counting_stars":
        if options.compat == "opencompass":
            raise NeedlebenchError(
                f"compat mode opencompass does not apply to {spec.name}; use --compat counting-stars"
            )
        from needlebench.tasks.counting_stars import counting_stars_rows

        return counting_stars_rows(spec, options, lengths)
    if options.compat == "counting-stars":
        raise NeedlebenchError(f"compat mode counting-stars does not apply to {spec.name}; use --compat opencompass")
    if spec.family == "atc":
        from needlebench.tasks.atc import iter_atc_rows

        return iter_atc_rows(
            spec, release_seed=options.release_seed, version=__version__, names_path=options.names_file(), compat=options.compat
        )
    selected = spec.select_lengths(lengths)
    if options.compat == "opencompass":
        from needlebench.compat import opencompass as compat_opencompass

        return compat_opencompass.rows(spec, options, selected)
    from needlebench.tasks import haystack as haystack_tasks

    generators = {
        "single": haystack_tasks.single_rows,
        "multi_retrieval": haystack_tasks.multi_retrieval_rows,
        "multi_reasoning": haystack_tasks.multi_reasoning_rows,
    }
    return generators[spec.family](spec, options, selected)
