"""The latency surface: every candidate on every shape, relative to the shape's fastest."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from headroom.report.model import Figure, Section, png, skipped, table


def section(portfolio: pd.DataFrame | None, why: str) -> Section:
    title = "Latency surface (candidates x shapes)"
    if portfolio is None:
        return skipped("surface", title, why)
    p = portfolio if "mode" in portfolio.columns else portfolio.assign(mode="eager")
    s = Section("surface", title)
    s.text.append(
        "Median over runs and invocations of each candidate's median_us per shape; the heatmap shows "
        "each cell relative to the fastest candidate of its shape (1.00 = fastest)."
    )
    for mode, grp in p.groupby("mode", sort=True):
        surface = grp.groupby(["shape_key", "candidate"])["median_us"].median().unstack("candidate")
        rel = surface.div(surface.min(axis=1), axis=0)
        fig, ax = plt.subplots(
            layout="constrained", figsize=(max(5, 0.9 * rel.shape[1] + 2), max(3, 0.28 * rel.shape[0] + 1.5))
        )
        im = ax.imshow(rel.to_numpy(), aspect="auto", cmap="viridis_r")
        ax.set_xticks(range(rel.shape[1]), rel.columns, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(rel.shape[0]), rel.index, fontsize=7)
        ax.set_title(f"latency / fastest candidate of the shape ({mode})")
        fig.colorbar(im, ax=ax, label="relative latency")
        if rel.size <= 400:
            for (i, j), v in np.ndenumerate(rel.to_numpy()):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if v > rel.to_numpy().mean() else "black",
                )
        s.figures.append(Figure(f"latency_surface_{mode}", f"Latency surface, {mode}", png(fig)))
        s.tables.append(table(f"median_us per shape and candidate ({mode})", surface.reset_index()))
    return s
