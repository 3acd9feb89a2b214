"""Fusion speedup per working-set regime, eager vs CUDA Graph (the graph sweep)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter

from headroom.decide import decision as hdecision
from headroom.report.model import Section, figure, legend_outside, nbytes, skipped, table, unusable

TITLE = "Fusion speedup, eager vs CUDA Graph, per working-set regime"


def section(gs: pd.DataFrame | None, why: str) -> Section:
    title = TITLE
    if (gone := unusable("fusion", title, gs, why)) is not None:
        return gone
    sp = hdecision.fusion_speedups(gs)
    if sp.empty:
        return skipped("fusion", title, "no regime has both a fused and an unfused ok row")
    extra = gs.drop_duplicates("regime").set_index("regime")
    if "residency" in extra.columns:
        sp["residency"] = sp["regime"].map(extra["residency"])
    s = Section("fusion", title)
    cols = [
        c
        for c in (
            "regime",
            "residency",
            "working_set_bytes",
            "shape_key",
            "mode",
            "speedup",
            "ci_low",
            "ci_high",
        )
        if c in sp.columns
    ]
    s.tables.append(table("unfused median / fused median (same tile, shape, regime, mode)", sp[cols]))
    fig, ax = plt.subplots(layout="constrained", figsize=(6, 3.8))
    for (shape, mode), g in sp.groupby(["shape_key", "mode"], sort=True):
        g = g.sort_values("working_set_bytes")
        ax.errorbar(
            g["working_set_bytes"].astype(float),
            g["speedup"],
            yerr=np.clip(np.vstack([g["speedup"] - g["ci_low"], g["ci_high"] - g["speedup"]]), 0, None),
            marker="o" if mode == "graph" else "s",
            ls="-" if mode == "graph" else "--",
            capsize=2,
            label=f"{shape} {mode}",
        )
    if "l2_bytes" in gs.columns and gs["l2_bytes"].notna().any():
        ax.axvline(float(gs["l2_bytes"].dropna().iloc[0]), color="grey", ls=":", label="L2 size")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: nbytes(v)))  # MiB, not raw bytes
    ax.set_xlabel("working set (log scale)")
    ax.set_ylabel("fusion speedup (×)")
    legend_outside(fig, ax)
    s.figures.append(figure("fusion_speedup_regimes", "Fusion speedup per regime", fig))
    return s
