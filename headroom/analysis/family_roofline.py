"""The roofline of a family other than attention: from what the family says each shape costs
(``Family.cost``: ``{"flops": ..., "bytes": ...}``, recorded per invocation in the family's trace as
``cost_flops`` and ``cost_bytes``), not from a model of its tiles.

Per (candidate, shape, mode): compute = flops / the calibrated matmul rate, memory = bytes / the
bandwidth of where they live (L2 when the timed working set fits it and the timing was not cold,
else HBM), one launch at the mode's calibrated launch cost; predicted_us = max(compute, memory) +
launch. The same constants, rows and skip rules as attention's model (``roofline``): a constant not
calibrated leaves the row's prediction NaN with status 'skipped' and the reason. A family's
candidates share a shape's cost (the same answer, computed differently), so their rows differ only
in what was measured: ``measured_over_predicted`` is how far each candidate is from the roofline.
"""

from __future__ import annotations

import pandas as pd

from headroom.analysis.roofline import (
    CONSTANTS,
    MODES,
    _competing_working_sets,
    _missing_reason,
    _prediction,
    calibrated_constants,
    measured_latency,
)

COST_COLUMNS = ("cost_flops", "cost_bytes")


def _traffic(
    flops: float, nbytes: float, competing: float | None, l2_bytes: float | None, cold: bool
) -> dict:
    ws = nbytes if competing is None or pd.isna(competing) else float(competing)
    in_l2 = l2_bytes is not None and not cold and ws <= l2_bytes
    return {
        "flops": flops,
        "executed_flops": flops,
        "compulsory_bytes": nbytes,
        "working_set_bytes": nbytes,
        "competing_bytes": ws,
        "hbm_bytes": 0.0 if in_l2 else nbytes,
        "l2_traffic_bytes": nbytes if in_l2 else 0.0,
        "residency": "l2" if in_l2 else "hbm",
        "launches": 1,
    }


def predict(trace: pd.DataFrame, candidates: pd.DataFrame, calibration: pd.DataFrame | None, *,
            l2_bytes: float | None, timings: pd.DataFrame | None = None, cold: bool = False) -> pd.DataFrame:  # fmt: skip
    """One row per (candidate, shape_key, mode) with the cost terms, prediction and measurement."""
    missing = [c for c in ("shape_key", *COST_COLUMNS) if c not in trace.columns]
    if missing:
        raise ValueError(f"trace: missing column(s) {missing} (a family trace records Family.cost per call)")
    if "candidate" not in candidates.columns:
        raise ValueError("candidates: missing column(s) ['candidate']")
    l2_bytes = float(l2_bytes) if l2_bytes is not None and float(l2_bytes) > 0 else None
    consts, reasons = calibrated_constants(calibration, l2_bytes)
    uncalibrated = _missing_reason([c for c in CONSTANTS if c not in consts], reasons)
    competing = _competing_working_sets(timings)
    rows = []
    for shape in trace.drop_duplicates("shape_key").sort_values("shape_key").itertuples(index=False):
        for cand in candidates["candidate"].astype(str):
            for mode in MODES:
                t = _traffic(float(shape.cost_flops), float(shape.cost_bytes),
                             competing.get((str(shape.shape_key), mode)), l2_bytes, cold)  # fmt: skip
                rows.append(
                    {
                        "candidate": cand,
                        "shape_key": str(shape.shape_key),
                        "mode": mode,
                        **t,
                        "l2_bytes": l2_bytes if l2_bytes is not None else float("nan"),
                        **_prediction(t, mode, consts, uncalibrated),
                    }
                )
    out = pd.DataFrame(rows).merge(
        measured_latency(timings), on=["candidate", "shape_key", "mode"], how="left"
    )
    out["measured_over_predicted"] = out["measured_us"] / out["predicted_us"]
    return out
