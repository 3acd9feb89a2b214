"""Timing noise per run and the stability of each shape's winner across runs."""

from __future__ import annotations

import pandas as pd

from headroom.measure import noise
from headroom.report.model import Section, fmt, skipped, table


def section(portfolio: pd.DataFrame | None, samples: pd.DataFrame | None, why: str) -> Section:
    title = "Noise and winner stability"
    if portfolio is None:
        return skipped("noise", title, why)
    p = portfolio if "mode" in portfolio.columns else portfolio.assign(mode="eager")
    s = Section("noise", title)
    s.tables.append(table("Winner stability across runs", noise.stability_summary(p)))
    if samples is not None and not samples.empty:
        s.tables.append(table("Timing noise per run (from samples)", noise.run_summary(p, samples)))
    else:
        rel = p.assign(rel_std_pct=100.0 * p["std_us"] / p["median_us"]).groupby(
            ["run", "mode"], as_index=False
        )
        s.tables.append(
            table(
                "Timing noise per run (std_us / median_us; samples not read)",
                rel["rel_std_pct"]
                .agg(["median", "max"])
                .rename(columns={"median": "rel_std_median_pct", "max": "rel_std_max_pct"}),
            )
        )
    sampler = noise.sampler_summary(p)
    if sampler is not None:
        s.tables.append(table("Samples per cell, noise reached and why cells stopped", sampler))
    else:
        s.text.append("Sampler columns absent: these runs were recorded before the adaptive sampler.")
    spread = noise.median_spread(p)
    s.text.append(
        f"Run-to-run spread of medians: median {fmt(spread['spread_pct'].median())}%, "
        f"max {fmt(spread['spread_pct'].max())}% over {fmt(len(spread))} (mode, invocation, candidate)."
    )
    return s
