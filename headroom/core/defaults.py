"""The default study, `config/config.yaml`: the one place a default value lives.

A stage merges its config section onto `section(name)`, so a library call that leaves a key out
gets the documented default study's value, never a second copy of it kept in code (a test checks
that no module holds a default of its own, and that the schema's defaults equal this file).
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = PROJECT_ROOT / "config" / "config.yaml"


@functools.cache
def _study() -> dict[str, Any]:
    try:
        with open(DEFAULT_CONFIG) as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{DEFAULT_CONFIG}: the default study is not here; the pipeline stages run from a checkout "
            f"of the headroom repository (an installed wheel only reads results)"
        ) from None


def study() -> dict[str, Any]:
    """The default study (a fresh copy, smoke overlay included as its `smoke` key)."""
    return copy.deepcopy(_study())


def section(name: str) -> dict[str, Any]:
    """The default study's `name` section (a fresh copy)."""
    return copy.deepcopy(_study()[name])


def value(name: str, key: str) -> Any:
    """One default, e.g. value('partition', 'rope_base')."""
    return copy.deepcopy(_study()[name][key])


def _schema() -> dict[str, Any]:
    with open(Path(__file__).with_name("schema.yaml")) as fh:  # the schema, package data (config.py)
        return yaml.safe_load(fh)


def _schema_defs() -> dict[str, Any]:
    return _schema()["$defs"]


def bound(name: str) -> int:
    """The schema's upper bound `$defs.<name>.maximum` (e.g. 'tokens'), for code that checks the same
    quantity outside a config (a request log's token counts). Here, not in config.py, so that readers
    of request logs need neither torch nor the config machinery."""
    return _schema_defs()[name]["maximum"]


def bound_reason(name: str) -> str:
    return _schema_defs()[name]["description"]


def int_minimums(name: str) -> tuple[tuple[str, int], ...]:
    """(key, minimum) of every integer key of the schema's section `name` (following `$ref` into
    `$defs`), the bounds a stage's `settings` checks with `settings.require_ints`: the schema states
    them once."""
    schema = _schema()
    out = []
    for key, prop in schema["properties"][name]["properties"].items():
        if "$ref" in prop:
            prop = {**schema["$defs"][prop["$ref"].rsplit("/", 1)[-1]], **prop}
        if prop.get("type") == "integer":
            out.append((key, prop["minimum"]))
    return tuple(out)
