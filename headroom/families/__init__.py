"""headroom's public family contract (docs/families.md): a kernel family is candidates, how a
serving step becomes calls, inputs, a float64 reference and costs. Outside code is written against
these names; they change only by adding."""

from headroom.families.adapters import from_callables, from_triton_autotune
from headroom.families.contract import Candidate, Family, FamilyError, Feature, Step
from headroom.families.loading import load

__all__ = [
    "Candidate",
    "Family",
    "FamilyError",
    "Feature",
    "Step",
    "from_callables",
    "from_triton_autotune",
    "load",
]
