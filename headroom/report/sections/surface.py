"""The latency surface: every candidate on every shape, relative to the shape's fastest.

The heatmaps are per candidate family (a family's cell: its fastest candidate on that shape), split
so that none holds more than ``MAX_HEATMAP_CELLS`` cells; every candidate's own median stays in the
table, with its noise (median over runs of the cell's rel_std_pct) and sample count (median over
runs of reps) beside it.
"""

from __future__ import annotations

import pandas as pd

from headroom.report.family import FamilyView
from headroom.report.model import MAX_HEATMAP_CELLS, Section, heatmaps, number_format, pct, skipped, table
from headroom.report.ship import family


def short_keys(keys) -> dict[str, str]:
    """Shape keys without the fields every key shares (heads, head_dim, dtype): 'decode b8 q1 kvmax1040'."""
    parts = {k: str(k).split("|") for k in keys}
    n = min((len(v) for v in parts.values()), default=0)
    common = {i for i in range(n) if len({v[i] for v in parts.values()}) == 1 and i > 0}
    return {k: " ".join(f for i, f in enumerate(v) if i not in common) for k, v in parts.items()}


def section(portfolio: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> Section:
    title = "Latency surface (candidates x shapes)"
    if portfolio is None:
        return skipped("surface", title, why)
    p = portfolio if "mode" in portfolio.columns else portfolio.assign(mode="eager")
    backend = p["backend"] if "backend" in p.columns else pd.Series([None] * len(p), index=p.index)
    if fam is None:
        p = p.assign(family=[family(c, b) for c, b in zip(p["candidate"], backend, strict=True)])
    else:  # a kernel family's candidates are one family: each is its own column
        p = p.assign(family=p["candidate"].astype(str))
    if "rel_std_pct" not in p.columns and "std_us" in p.columns:  # portfolios of before the column
        p = p.assign(rel_std_pct=100.0 * p["std_us"] / p["median_us"])
    s = Section("surface", title)
    s.text.append(
        "Median over runs and invocations of each candidate's median_us per shape. The heatmaps show, per "
        "candidate family, its fastest candidate on each shape relative to the shape's fastest candidate "
        f"(1.00 = fastest; at most {MAX_HEATMAP_CELLS} cells a heatmap). The table beside gives every "
        "candidate's median with its noise (± median rel_std_pct over runs) and samples per cell (n)."
    )
    if fam is not None:
        s.text.append(f"Family {fam.name}'s candidates are one family: its heatmaps show each candidate.")
    for mode, grp in p.groupby("mode", sort=True):
        surface = grp.groupby(["shape_key", "candidate"])["median_us"].median().unstack("candidate")
        fams = grp.drop_duplicates("candidate").set_index("candidate")["family"]
        best = surface.T.groupby(fams.reindex(surface.columns)).min().T
        rel = best.div(surface.min(axis=1), axis=0)
        rel.index = rel.index.map(short_keys(rel.index))
        labels = rel.map(lambda v: f"{v:.2f}")
        s.figures += heatmaps(
            f"latency_surface_{mode}",
            f"latency / fastest candidate of the shape, per family ({mode})",
            rel,
            labels,
            "relative latency",
        )
        s.tables.append(
            table(
                f"median (µs) per shape and candidate, ± noise, n samples ({mode})",
                _cells(grp, surface),
                collapsed=len(surface) > 30,
            )
        )
    return s


def _cells(grp: pd.DataFrame, surface: pd.DataFrame) -> pd.DataFrame:
    """'646.2 ±1.2% n=280' per (shape, candidate): the median, its noise and its samples."""
    write = number_format(surface.to_numpy().ravel().tolist())
    noise = (
        grp.groupby(["shape_key", "candidate"])["rel_std_pct"].median().unstack("candidate")
        if "rel_std_pct" in grp.columns
        else None
    )
    reps = (
        grp.groupby(["shape_key", "candidate"])["reps"].median().unstack("candidate")
        if "reps" in grp
        else None
    )
    out = pd.DataFrame(index=surface.index, columns=surface.columns, dtype=object)
    for key in surface.index:
        for cand in surface.columns:
            cell = write(surface.loc[key, cand])
            if noise is not None and pd.notna(noise.loc[key, cand]):
                cell += f" ±{pct(noise.loc[key, cand], 1, signed=False)}"
            if reps is not None and pd.notna(reps.loc[key, cand]):
                cell += f" n={int(reps.loc[key, cand])}"
            out.loc[key, cand] = cell
    return out.reset_index()
