"""Reference constructions (``--compat MODE``), byte for byte from the same inputs.

:data:`GENERATORS` maps ``(family key, mode, edition)`` to the generator of each family's rows in that mode, built
from each compat module's own table (the family keys come from the family objects). :func:`generator` is the one
lookup the build makes: the mode's generator, or the family's default one when no mode is given.
"""

from __future__ import annotations

from needlebench.compat import counting_stars, opencompass, opencompass_atc, opencompass_v2
from needlebench.tasks.families.base import ConfigSpec, RowGenerator, family_of

GENERATORS: dict[tuple[str, str, str], RowGenerator] = {
    **opencompass.GENERATORS,
    **opencompass_v2.GENERATORS,
    **opencompass_atc.GENERATORS,
    **counting_stars.GENERATORS,
}


def generator(spec: ConfigSpec, mode: str | None) -> RowGenerator:
    """The generator of `spec`'s rows in compat mode `mode` (None: the family's default generator); the mode
    must apply to `spec` (:meth:`ConfigSpec.check_mode`)."""
    if mode is None:
        return family_of(spec).generator(spec)
    return GENERATORS[(spec.family, mode, spec.edition)]
