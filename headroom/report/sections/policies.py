"""Policy gains per fusion arm (same-run, per run) and the policy x fusion factorial."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from headroom.core.names import CONFIG_TABLE
from headroom.decide.policy_eval import FUSION_ARMS, POLICIES
from headroom.report.family import FamilyView
from headroom.report.model import (
    LABEL_PT,
    Figure,
    Section,
    figure,
    legend_outside,
    signed_interval,
    signed_range,
    skipped,
    table,
    unusable,
)


def section(pe: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> Section:
    title = "Policy gains per fusion arm" if fam is None else "Policy gains"
    if pe is None:
        return skipped("policies", title, why)
    s = Section("policies", title)
    s.text.append(
        "gain_vs_global_pct on the test invocations of each run; error bars are the bootstrap CI of "
        "that gain (resampled test invocations). net = after lifecycle costs. Ranges are min-max over runs."
    )
    if fam is not None:  # no fused candidate: every arm holds the same candidates; arm free is shown
        pe = pe[pe["fusion"].astype(str) == "free"] if (pe["fusion"].astype(str) == "free").any() else pe
        s.text.append(
            fam.not_applicable("they are attention's (RoPE in the kernel); arm free is shown", "Fusion arms")
        )
    rows = []
    for (mode, arm, policy), g in pe.groupby(["mode", "fusion", "policy"], sort=False):
        rows.append(
            {
                "mode": mode,
                "fusion": arm,
                "policy": policy,
                "gain vs global": signed_range(g["gain_vs_global_pct"], "%"),
                "CI of gain": signed_interval(g["ci_low"].min(), g["ci_high"].max()),
                "gap to oracle": signed_range(g["gap_to_oracle_pct"], "%"),
                "net gain": signed_range(g["net_gain_pct"], "%"),
            }
        )
    s.tables.append(table("Policies, min-max over runs", pd.DataFrame(rows)))
    s.figures.append(gains_figure(pe))
    return s


def gains_figure(pe: pd.DataFrame) -> Figure:
    """gain_vs_global_pct per policy with its bootstrap CI, one panel per mode x arm, one dot per run."""
    modes = sorted(pe["mode"].unique())
    arms = [a for a in FUSION_ARMS if a in set(pe["fusion"])]
    shown = [p for p in POLICIES if p != "random"]  # random's loss would squash the scale
    shown += [CONFIG_TABLE] if CONFIG_TABLE in set(pe["policy"]) else []  # a family's config table
    fig, axes = plt.subplots(
        layout="constrained",
        nrows=len(modes),
        ncols=len(arms),
        figsize=(4 * len(arms), 3.3 * len(modes)),
        sharey=True,
        squeeze=False,
    )
    for i, mode in enumerate(modes):
        for ax, arm in zip(axes[i], arms, strict=True):
            _panel(ax, pe[(pe["mode"] == mode) & (pe["fusion"] == arm)], shown)
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_xticks(
                range(len(shown)),
                shown if i == len(modes) - 1 else [],
                rotation=40,
                ha="right",
                fontsize=LABEL_PT,
            )
            ax.set_title(f"fusion {arm}, {mode}", fontsize=9)
        axes[i][0].set_ylabel("gain vs global (%)")
    low, high = axes[0][0].get_ylim()
    if high - low < 0.2:  # a flat surface: show +-0.1 percentage points, not float rounding
        mid = (high + low) / 2
        axes[0][0].set_ylim(mid - 0.1, mid + 0.1)
    legend_outside(fig, axes[0][-1])
    return figure(
        "policy_gains", "Policy gains vs global with bootstrap CIs (random omitted: see table)", fig
    )


FACTORIAL_TITLE = "Policy x fusion factorial"


def factorial_section(fac: pd.DataFrame | None, why: str) -> Section:
    title = FACTORIAL_TITLE
    if (gone := unusable("factorial", title, fac, why)) is not None:
        return gone
    skipped_rows = fac[fac["status"] != "ok"] if "status" in fac.columns else fac.iloc[0:0]
    fac = fac[fac["status"] == "ok"] if "status" in fac.columns else fac
    cols = [
        c
        for c in (
            "run",
            "mode",
            "policy",
            "policy_gain_pct",
            "fusion_gain_pct",
            "interaction_pct",
            "combined_gain_pct",
            "fusion_speedup",
        )
        if c in fac.columns
    ]
    s = Section(
        "factorial", title, tables=[table("2x2: {global, best deployable} x {unfused, fused}", fac[cols])]
    )
    s.text.append(
        "Gains are percentages of the global-unfused test latency; interaction = combined - policy - fusion, "
        "so fusion gain is never credited to dispatch."
    )
    for r in skipped_rows.itertuples(index=False):
        s.text.append(f"run {r.run}, {r.mode}: skipped: {r.reason}")
    return s


def _panel(ax, a: pd.DataFrame, shown: list[str]) -> None:
    runs = sorted(a["run"].unique())
    for k, run in enumerate(runs):
        r = a[a["run"] == run].set_index("policy").reindex(shown)
        x = np.arange(len(shown)) + (k - (len(runs) - 1) / 2) * 0.12
        err = np.vstack([r["gain_vs_global_pct"] - r["ci_low"], r["ci_high"] - r["gain_vs_global_pct"]])
        ax.errorbar(
            x,
            r["gain_vs_global_pct"],
            yerr=np.clip(err, 0, None),
            fmt="o",
            ms=4,
            capsize=2,
            label=f"run {run}",
        )
