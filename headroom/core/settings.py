"""A stage's config section merged onto its module's defaults, with the checks every stage shares:
no unknown keys, integer knobs within their bounds. Errors name the section and the key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def merge(name: str, defaults: Mapping[str, Any], section: Mapping[str, Any] | None) -> dict[str, Any]:
    """`section` over `defaults`; ValueError naming any key the stage does not know."""
    cfg = {**defaults, **(section or {})}
    unknown = sorted(set(cfg) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {unknown}; known: {sorted(defaults)}")
    return cfg


def require_ints(name: str, cfg: Mapping[str, Any], bounds: Iterable[tuple[str, int]]) -> None:
    """Each (key, low): cfg[key] must be an int (not a bool or float) >= low."""
    for key, low in bounds:
        if type(cfg[key]) is not int or cfg[key] < low:
            raise ValueError(f"{name}.{key} must be an int >= {low}, got {cfg[key]!r}")


def checked(
    name: str, section: Mapping[str, Any] | None, ints: Iterable[tuple[str, int]] = ()
) -> dict[str, Any]:
    """The stage `name`'s config `section` merged onto the default study's (`merge`), its integer
    knobs checked (`require_ints`)."""
    from headroom.core import defaults

    cfg = merge(name, defaults.section(name), section)
    require_ints(name, cfg, ints)
    return cfg
