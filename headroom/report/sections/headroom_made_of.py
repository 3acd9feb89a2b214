"""What the global-to-oracle gap is made of: phase split, fusion and tile choice, noise."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from headroom.report.family import FamilyView
from headroom.report.model import Figure, Section, Table, estimate_ci, figure, legend_outside, table

MADE_OF = {
    "made_of_phase_split": "phase split (one candidate per phase)",
    "made_of_fusion_within_phase": "fusion choice within phase",
    "made_of_tile_within_phase": "tile choice within phase and fusion",
    "made_of_noise": "noise (same-run minus cross-run gap)",
}


def family_made_of(fam: FamilyView) -> dict[str, str]:
    """A family's components: its category split and its candidate choice within it (no fusion)."""
    cats = fam.categories()
    return {
        "made_of_phase_split": f"category split (one candidate per {cats})"
        if cats
        else "category split (none: no category feature declared)",
        "made_of_tile_within_phase": "candidate choice within category" if cats else "candidate choice",
        "made_of_noise": MADE_OF["made_of_noise"],
    }


def made_of_figure(made: pd.DataFrame, components: dict[str, str] = MADE_OF) -> Figure:
    modes = list(dict.fromkeys(made["mode"]))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(modes)), layout="constrained")
    for i, mode in enumerate(modes):
        left = 0.0
        for k, (key, label) in enumerate(components.items()):  # one colour per component, every row
            v = made[(made["mode"] == mode) & (made["figure"] == key)]["estimate"]
            v = float(v.iloc[0]) if len(v) else 0.0
            colour = f"C{k}"
            ax.barh(i, v, left=left if v >= 0 else 0.0, color=colour, label=label if i == 0 else None)
            left += max(v, 0.0)
    ax.set_yticks(range(len(modes)), modes)
    ax.set_xlabel("% of the oracle's test latency")
    ax.set_title("What the gap to the oracle is made of\n(cross-run; noise: the same-run winner's curse)")
    legend_outside(fig, ax)
    return figure("made_of", "What the headroom is made of", fig)


def table_of(made: pd.DataFrame, components: dict[str, str] = MADE_OF) -> Table:
    rows = [
        {
            "mode": r.mode,
            "component": components[r.figure],
            "% of oracle latency [CI]": estimate_ci(r.estimate, r.ci_low, r.ci_high, "%"),
        }
        for r in made.itertuples()
    ]
    return table("What the headroom is made of", pd.DataFrame(rows))


def section(d: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> Section:
    """The "made of" figure and its table, right after the answer (a family's: its category split and
    candidate choice; fusion does not apply)."""
    title = "What the headroom is made of"
    if d is None or "figure" not in d.columns:
        reason = why if d is None else "decision.parquet predates decision v2 (no per-figure rows)"
        return Section("made_of", title, status="skipped", reason=reason)
    made = d[d["figure"].isin(MADE_OF)]
    if made.empty:
        return Section("made_of", title, status="skipped", reason="the decision has no made_of_* rows")
    if fam is None:
        return Section("made_of", title, tables=[table_of(made)], figures=[made_of_figure(made)])
    parts = family_made_of(fam)
    made = made[made["figure"].isin(parts)]
    s = Section("made_of", title, tables=[table_of(made, parts)], figures=[made_of_figure(made, parts)])
    s.text.append(fam.not_applicable("none of its candidates is fused", "Fusion choice"))
    return s
