"""Attention's terms in the job plan (`headroom plan`, headroom.measure.cost, whose model is fitted
on the recorded attention studies): which of a trace's shapes the correctness gate checks against
the chunked float64 reference, and an attention study's trace, candidates and input bytes, built as
its trace and candidates stages build them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd


def long_shapes(trace: pd.DataFrame) -> int:
    """Distinct shapes whose float64 reference runs chunked (headroom.families.attention.correctness.
    reference): ragged decodes and those past PLAIN_REFERENCE_MAX_ELEMENTS."""
    from headroom.families.attention.correctness import PLAIN_REFERENCE_MAX_ELEMENTS

    t = trace.drop_duplicates("shape_key")
    plain = t["batch"] * t["heads_q"] * t["kv_len"] * (t["q_len"] + 2 * t["head_dim"])
    ragged = t["kv_lens"].notna() if "kv_lens" in t else False
    return int(((plain > PLAIN_REFERENCE_MAX_ELEMENTS) | ragged).sum())


def study(study: dict[str, Any], root: Path) -> tuple[pd.DataFrame, list[str], float, str]:
    """A resolved attention study's trace (built from ``root``), its candidates' ids (every one it
    builds, before correctness drops any), the mean megabytes of one input set and the trace's
    clipping note."""
    from headroom.families.attention import candidates, inputs
    from headroom.trace import invocations

    trace, provenance = invocations.build(study["trace"], study["partition"], base_dir=root)
    built = candidates.build(
        study["tiles"], study["rope"], study.get("native_candidates") or (), study["generation"]
    )
    megabytes = float(np.mean([inputs.set_bytes(r) for r in trace.itertuples(index=False)])) / 1e6
    return trace, list(built["candidate"]), megabytes, invocations.clip_note(provenance)
