"""Our kernels against each native backend, per phase and mode, and absolute latency against kv_len
and batch per phase (one line per candidate family).

Computed here from the portfolio's columns (median_us per run, invocation and candidate) and the
trace's (phase, batch, kv_len per invocation): trace-weighted = the mean over the phase's
invocations of each invocation's median, per run; the table gives the median over runs and the
run-to-run range. "Ours" is our best kernel as the answer states it in that mode (the kernel it
ships, unless that is a native); where none is stated, the Triton candidate with the lowest
trace-weighted latency (said so in the table).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from headroom.report.model import (
    LABEL_PT,
    PLAIN,
    Section,
    figure,
    legend_outside,
    log_axis,
    signed_range,
    skipped,
    table,
)
from headroom.report.ship import Ship, family

TITLE = "Our kernels against each native backend, per phase and mode"
LATENCY_TITLE = "Latency against kv_len and batch, per phase (one line per candidate family)"


def prepared(portfolio: pd.DataFrame, trace: pd.DataFrame | None) -> pd.DataFrame:
    """The portfolio with mode (eager when absent), family, and phase, batch and kv_len from the trace
    (by invocation) where the portfolio lacks them."""
    p = portfolio if "mode" in portfolio.columns else portfolio.assign(mode="eager")
    backend = p["backend"] if "backend" in p.columns else pd.Series([None] * len(p), index=p.index)
    p = p.assign(family=[family(c, b) for c, b in zip(p["candidate"], backend, strict=True)])
    if trace is not None and "invocation" in trace.columns:
        extra = [c for c in ("phase", "batch", "kv_len") if c in trace.columns and c not in p.columns]
        if extra:
            p = p.merge(
                trace[["invocation", *extra]].drop_duplicates("invocation"), on="invocation", how="left"
            )
    return p


def weighted(p: pd.DataFrame) -> pd.DataFrame:
    """(mode, phase, run, candidate, family) -> mean over invocations of median_us."""
    keys = ["mode", "phase", "run", "candidate", "family"]
    return p.groupby(keys, as_index=False).agg(
        us=("median_us", "mean"), invocations=("invocation", "nunique")
    )


def ours_of(w: pd.DataFrame, mode: str, ships: list[Ship]) -> tuple[str, str]:
    """(candidate, how it was chosen) for a mode."""
    for x in ships:
        ours = x.our_kernel or x.kernel
        if x.scope == mode and x.ship == "kernel" and ours in set(w["candidate"]):
            return (
                ours,
                "our best kernel; the shipped one is native" if x.native_shipped else "the shipped kernel",
            )
    tri = w[(w["mode"] == mode) & w["family"].str.startswith("triton")]
    best = tri.groupby("candidate")["us"].mean().idxmin()
    return str(best), "fastest Triton candidate over the trace (no shipped kernel stated for this mode)"


def section(
    portfolio: pd.DataFrame | None, trace: pd.DataFrame | None, ships: list[Ship], why: str
) -> Section:
    if portfolio is None or portfolio.empty:
        return skipped("natives", TITLE, why if portfolio is None else "the portfolio has no rows")
    p = prepared(portfolio, trace)
    if "phase" not in p.columns:
        return skipped("natives", TITLE, "neither the portfolio nor the trace gives each invocation's phase")
    w = weighted(p)
    natives = sorted(c for c in w["candidate"].unique() if not family(c).startswith("triton"))
    if not natives:
        return skipped("natives", TITLE, "no native backend was timed in this study")
    rows = []
    for mode in sorted(w["mode"].unique()):
        ours, how = ours_of(w, mode, ships)
        for phase in sorted(w.loc[w["mode"] == mode, "phase"].unique()):
            rows += _rows(w[(w["mode"] == mode) & (w["phase"] == phase)], mode, phase, ours, how, natives)
    df = pd.DataFrame(rows)
    s = Section("natives", TITLE)
    s.text.append(
        "Trace-weighted latency per invocation (computed here from the portfolio's median_us: the mean "
        "over the phase's invocations, per run; median over runs, range min-max over runs). "
        "native / ours > 1: ours is faster."
    )
    s.tables.append(table("Ours against each native backend", df.drop(columns=["ratio"])))
    s.figures.append(_ratio_figure(df))
    return s


def _rows(g: pd.DataFrame, mode, phase, ours, how, natives) -> list[dict]:
    mine = g[g["candidate"] == ours].set_index("run")["us"]
    out = []
    for cand in [ours, *natives]:
        other = g[g["candidate"] == cand].set_index("run")["us"]
        if other.empty or mine.empty:
            continue
        ratio = (other / mine).dropna()
        out.append(
            {
                "mode": mode,
                "phase": phase,
                "candidate": cand if cand != ours else f"{cand} (ours: {how})",
                "invocations": int(g["invocations"].max()),
                "latency_us": float(other.median()),
                "latency range over runs": signed_range(other, " µs", 1),
                "native / ours": float(ratio.median()) if cand != ours else np.nan,
                "native / ours, range": signed_range(ratio, "×", 3) if cand != ours else "",
                "ratio": ratio.tolist() if cand != ours else [],
            }
        )
    return out


def _ratio_figure(df: pd.DataFrame):
    nat = df[df["ratio"].map(len) > 0]
    groups = list(dict.fromkeys(zip(nat["mode"], nat["phase"], strict=True)))
    cands = list(dict.fromkeys(nat["candidate"]))
    fig, ax = plt.subplots(layout="constrained", figsize=(7, 3.6))
    width = 0.8 / max(1, len(cands))
    for k, cand in enumerate(cands):
        sub = nat[nat["candidate"] == cand].set_index(["mode", "phase"])
        x = [i + (k - (len(cands) - 1) / 2) * width for i, g in enumerate(groups) if g in sub.index]
        r = [sub.loc[g] for g in groups if g in sub.index]
        med = np.array([float(v["native / ours"]) for v in r])
        lo = med - np.array([min(v["ratio"]) for v in r])
        hi = np.array([max(v["ratio"]) for v in r]) - med
        ax.bar(x, med, width, yerr=np.clip(np.vstack([lo, hi]), 0, None), capsize=2, label=cand)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(groups)), [f"{m}\n{p}" for m, p in groups], fontsize=LABEL_PT)
    ax.set_ylabel("native latency / ours (×)")
    ax.set_title("Native backend latency over ours (error bars: min-max over runs)", fontsize=LABEL_PT + 1)
    legend_outside(fig, ax)
    return figure("natives_vs_ours", "Native backends over ours, per phase and mode", fig)


def latency_section(portfolio: pd.DataFrame | None, trace: pd.DataFrame | None, why: str) -> Section:
    if portfolio is None or trace is None or portfolio.empty:
        return skipped("latency", LATENCY_TITLE, why if portfolio is None else "the trace was not read")
    missing = {"phase", "batch", "kv_len", "invocation"} - set(trace.columns)
    if missing:
        return skipped("latency", LATENCY_TITLE, f"the trace lacks {sorted(missing)}")
    p = prepared(portfolio.drop(columns=[c for c in ("batch", "kv_len") if c in portfolio.columns]), trace)
    w = weighted(p)
    s = Section("latency", LATENCY_TITLE)
    s.text.append(
        "Each family's line is its fastest candidate over the trace (lowest trace-weighted latency in the "
        "mode); a point is the median over runs and over the invocations with that kv_len (or batch)."
    )
    for mode in sorted(p["mode"].unique()):
        best = w[w["mode"] == mode].groupby(["family", "candidate"])["us"].mean().reset_index()
        best = best.loc[best.groupby("family")["us"].idxmin()]
        s.figures.append(
            _latency_figure(p[(p["mode"] == mode) & p["candidate"].isin(best["candidate"])], mode)
        )
    return s


def _latency_figure(p: pd.DataFrame, mode: str):
    phases = sorted(p["phase"].unique())
    fig, axes = plt.subplots(
        len(phases), 2, layout="constrained", figsize=(9, 2.9 * len(phases)), squeeze=False
    )
    for i, phase in enumerate(phases):
        for ax, x in zip(axes[i], ("kv_len", "batch"), strict=True):
            g = p[p["phase"] == phase]
            for (fam, cand), h in g.groupby(["family", "candidate"], sort=True):
                m = h.groupby(x)["median_us"].median().sort_index()
                ax.plot(m.index, m.to_numpy(), marker="o", ms=3, label=f"{fam}: {cand}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_formatter(PLAIN)  # powers of two, written plainly
            ax.xaxis.set_minor_formatter(NullFormatter())
            log_axis(ax.yaxis)
            ax.set_xlabel(x, fontsize=LABEL_PT)
            ax.set_ylabel("median latency (µs)", fontsize=LABEL_PT)
            ax.set_title(f"{phase}, {mode}", fontsize=LABEL_PT + 1)
            ax.tick_params(labelsize=LABEL_PT)
    legend_outside(fig, axes[0][0])
    return figure(f"latency_{mode}", f"Latency against kv_len and batch, {mode}", fig)
