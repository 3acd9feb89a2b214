"""A kernel family's study artifacts (docs/families.md): the trace its calls form over the serving
engine's steps, and its candidates table.

    steps = step_table.build(study["trace"], study["partition"])     # the steps.parquet artifact
    trace, facts = family_trace(loaded.family, steps, study["trace"])  # trace.parquet
    cands = candidates_table(loaded.family)                            # candidates.parquet

The trace is `expand(family, steps)` sampled by the attention trace's own sampler
(headroom.trace.invocations.sample: `trace.invocations`, `trace.sampler`, stratified by the step's kind
with `trace.stratified.min_per_kind`), its invocations renumbered 0.. in chronological order. The
built-in attention family keeps its own trace and candidates builders; `tagged` adds the `family`
column its artifacts carry. Readers of an artifact without the column take it as attention's
(headroom.core.contracts.family_of).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import contracts
from headroom.families.contract import call, check_candidates
from headroom.families.expand import COLUMNS, expand, steps_of
from headroom.trace import invocations

#: The built-in family's name: the `family` of attention's trace and candidates.
ATTENTION = contracts.ATTENTION
#: The framework's columns of a family's trace, in order; the family's features follow.
TRACE_COLUMNS = (*COLUMNS, invocations.WEIGHT)
#: The columns of a family's candidates table.
CANDIDATE_COLUMNS = ("candidate", "family", "params")
#: What a family trace's shape_key holds (its provenance says so, as the attention trace's does).
SHAPE_KEY_FORMAT = (
    "feature=value|... (the family's features in declared order, then its other shape keys sorted)"
)


def family_trace(
    family: Any, steps: pd.DataFrame, trace_cfg: dict[str, Any]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A family's trace and the facts its provenance records: every call `family.shapes(step)` gives
    over the steps table (headroom.trace.step_table COLUMNS, as built or as read from steps.parquet),
    sampled by the trace's sampler (`trace_cfg` is the study's `trace:` section). Columns
    TRACE_COLUMNS, then one per feature. `weight`: how many of the window's calls each sampled one
    stands for (stratified: its step kind's calls over those sampled; stride and head: all calls over
    those sampled). A family that breaks its contract raises FamilyError naming it and the method;
    bad trace settings raise ValueError naming the key."""
    cfg = invocations.settings(trace_cfg)
    calls = expand(family, steps_of(steps))
    kinds = calls["step_kind"].to_numpy() if cfg["sampler"] == "stratified" else None
    chosen, weight = invocations.sample(len(calls), cfg, kinds)
    if weight is None:
        weight = np.full(len(chosen), len(calls) / max(len(chosen), 1))
    df = calls.iloc[chosen].reset_index(drop=True)
    df["invocation"] = np.arange(len(df), dtype=np.int64)
    df.insert(len(COLUMNS), invocations.WEIGHT, np.asarray(weight, dtype=np.float64))
    by_kind = calls["step_kind"].value_counts().sort_index()
    facts = {
        "settings": {k: cfg[k] for k in ("invocations", "sampler", "stratified")},
        "steps": len(steps),
        "window_invocations": len(calls),
        "window_by_kind": {str(k): int(v) for k, v in by_kind.items()},
        "window_shapes": int(calls["shape_key"].nunique()),
        "shape_key_format": SHAPE_KEY_FORMAT,
    }
    return df, facts


def candidates_table(family: Any) -> pd.DataFrame:
    """The family's candidates.parquet: one row per `family.candidates()` entry, in its order: the
    id, the family's name and the params as JSON (sorted keys). FamilyError names a family whose
    candidates() raises or returns anything but distinct Candidates."""
    found = check_candidates(family, call(family, "candidates"))
    return pd.DataFrame(
        {
            "candidate": [c.id for c in found],
            "family": family.name,
            "params": [json.dumps(dict(c.params), sort_keys=True) for c in found],
        },
        columns=list(CANDIDATE_COLUMNS),
    )


def tagged(df: pd.DataFrame, family: str) -> pd.DataFrame:
    """`df` with a last column `family` naming the family its rows belong to (every other column as it
    was): what the built-in attention family's trace and candidates get before they are written."""
    out = df.copy()
    out["family"] = family
    return out


def attention_identity() -> dict[str, Any]:
    """What attention's artifacts record of their family (provenance `family`), as a family's record
    its name, version and source hash (headroom.families.loading.Loaded.identity)."""
    return {"name": ATTENTION}
