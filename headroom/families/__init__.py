"""headroom's public family contract (docs/families.md): a kernel family is candidates, how a
serving step becomes calls, inputs, a float64 reference and costs. Outside code is written against
these names; they change only by adding."""

from headroom.families.adapters import from_callables, from_triton_autotune
from headroom.families.contract import Candidate, Family, FamilyError, Feature, Step
from headroom.families.tables import (
    CONFIG_KEYS,
    ConfigTable,
    config_id,
    from_config_table,
    write_config_table,
)

__all__ = [
    "CONFIG_KEYS",
    "Candidate",
    "ConfigTable",
    "Family",
    "FamilyError",
    "Feature",
    "Step",
    "config_id",
    "from_callables",
    "from_config_table",
    "from_triton_autotune",
    "load",
    "write_config_table",
]


def __getattr__(name: str):
    # `load` reads the spec's form from the core's contracts (pyarrow): imported when first asked for,
    # so a server that loads a dispatch table (attention's keys live in this package) stays light
    if name == "load":
        from headroom.families.loading import load

        return load
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
