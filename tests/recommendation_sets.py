"""Recommendations built from the hand-made analysis sets (tests/analysis_sets.py), with known answers.

``recommend(latency, seq, modes)`` runs the decision and the recommendation on a surface and writes
dispatch.json where a test asks; ``write_study`` writes the artifacts `headroom recommend` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from headroom.analysis import decision, figures, recommendation
from headroom.core import artifacts
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 300, "random_draws": 20}
META = {"study": "hand", "decision_blake3": "d" * 64, "kernel_source_blake3": "k" * 64}


def recommend(latency, seq: str, modes=("graph",), out: Path | None = None, deployment=None):
    """(trace, decision, recommendation table, dispatch content); with ``out``, dispatch.json there."""
    tr = S.trace(seq)
    tm = S.timings(tr, latency, modes=modes)
    figs = figures.study_figures(tr, tm, deployment=deployment, **FAST)
    d = decision.decide(figs, None, S.environment(), deployment=deployment)
    table, content = recommendation.build(
        d,
        tr,
        tm,
        None,
        S.candidates(),
        S.calibration(),
        S.environment(),
        meta=META,
        policies={"train_fraction": 0.5, **FAST},
        deployment=deployment,
        intermediate_ratio=3.5,
    )
    if out is not None:
        out.write_text(json.dumps(content, allow_nan=False))
    return tr, d, table, content


def write_study(folder: Path, d, table, content) -> Path:
    """decision.parquet, recommendation.parquet and dispatch.json (+ sidecars) of one study folder."""
    prov = {"rule": "x", "params": {}, "inputs": {}, "wildcards": {"study": folder.name}}
    artifacts.write(d, folder / "decision.parquet", kind="decision", provenance=prov)
    digest = artifacts.write_file(folder / "dispatch.json", json.dumps(content).encode())
    table = table.assign(dispatch_blake3=digest)
    artifacts.write(table, folder / "recommendation.parquet", kind="recommendation", provenance=prov)
    return folder
