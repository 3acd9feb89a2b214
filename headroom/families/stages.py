"""What a stage script asks of its study's family (config `family:`; None: the built-in attention
family): the family loaded for the stage's device, and the keys the policies read, from what the
trace artifact records of it (so the analysis of a recorded family study needs no import of the
family's code)."""

from __future__ import annotations

from typing import Any

from headroom.families.loading import Loaded, load
from headroom.policies.shapes import Keying


def loaded(stage: Any) -> Loaded | None:
    """The study's family loaded for the stage's device (TRITON_INTERPRET set first off CUDA), or
    None for attention; FamilyError names a family that does not import or breaks its contract."""
    spec = (stage.params.get("family") or {}).get("spec")
    return None if spec is None else load(spec, device=stage.device)


def keying(stage: Any, artifact: str = "trace") -> Keying:
    """The keys of the study's family, from the provenance `family` record of an input artifact."""
    return Keying.of_record(stage.read_provenance(artifact).get("extra", {}).get("family"))


def cost_columns(family: Any, trace) -> Any:
    """``trace`` with ``cost_flops`` and ``cost_bytes``: what ``family.cost`` says each call's shape
    costs (once per distinct shape), checked."""
    import json

    from headroom.families.contract import call, check_cost

    costs = {}
    for key, shape in trace.drop_duplicates("shape_key")[["shape_key", "shape"]].itertuples(index=False):
        s = json.loads(shape)
        costs[key] = check_cost(family, s, call(family, "cost", s))
    out = trace.copy()
    out["cost_flops"] = out["shape_key"].map(lambda k: costs[k]["flops"])
    out["cost_bytes"] = out["shape_key"].map(lambda k: costs[k]["bytes"])
    return out
