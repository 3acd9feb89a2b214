"""The report: the verdict and its reason first, then every table and figure a reviewer needs.

``build(inputs, read, out_dir, title=...)`` writes ``index.html`` (self-contained: figures embedded
as base64 PNG), ``report.md`` (figures linked from ``figures/``) and ``figures/*.png``. Every number
is read from an artifact (or computed from artifact numbers in front of the reader: ranges, ratios,
break-even horizons). An input that is missing, or whose rows are all ``status = 'skipped'``, renders
as "skipped: <reason>" in its section, never as a crash or a made-up number.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape  # noqa: E402

from headroom.analysis import decision as hdecision  # noqa: E402
from headroom.analysis.policies import DEPLOYABLE, FUSION_ARMS, NATIVE_ARM, POLICIES  # noqa: E402
from headroom.measure import noise  # noqa: E402

TEMPLATES = Path(__file__).parent / "templates"
INPUTS = (
    "decision", "environment", "trace", "candidates", "correctness", "portfolio", "samples", "lifecycle",
    "graph_sweep", "calibration", "policy_eval", "factorial", "roofline",
)  # fmt: skip
NOT_GPU = "These timings are not GPU measurements (device: {device}), so the decision is no-decision."


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    name: str  # file stem under figures/
    title: str
    png: bytes

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Section:
    key: str
    title: str
    status: str = "ok"  # 'ok' | 'skipped'
    reason: str = ""
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def fmt(value) -> str:
    """A number as a reader wants it: 4 significant digits, thousands separated; text unchanged."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "n/a"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        v = float(value)
        if math.isinf(v):
            return "never" if v > 0 else "-inf"
        if v != 0 and abs(v) >= 1e5:
            return f"{v:,.0f}"
        return f"{v:.4g}"
    return str(value)


def table(title: str, df: pd.DataFrame, note: str = "") -> Table:
    return Table(
        title,
        [str(c) for c in df.columns],
        [[fmt(v) for v in row] for row in df.itertuples(index=False)],
        note,
    )


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # layout is constrained: one draw
    plt.close(fig)
    return buf.getvalue()


def _skipped(key: str, title: str, reason: str) -> Section:
    return Section(key, title, status="skipped", reason=reason)


def _all_skipped(df: pd.DataFrame | None) -> str | None:
    """The reason when a table has no usable rows (missing, empty, or every row skipped)."""
    if df is None:
        return None
    if df.empty:
        return "the artifact has no rows"
    if "status" in df.columns and (df["status"].astype(str) == "skipped").all():
        reasons = sorted({str(r) for r in df.get("reason", pd.Series(dtype=str)).dropna() if str(r)})
        return "; ".join(reasons) if reasons else "every row is skipped"
    return None


# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------


FIGURE_LABELS = {
    "gap_to_oracle": "global kernel's gap to the oracle (fusion arm free)",
    "policy_gain": "best deployable policy's net gain over phase-keyed (chosen on validation)",
    "fusion_speedup": "trace-weighted fusion speedup (global unfused / global fused)",
    "fusion_speedup_sweep": "fusion speedup of the graph sweep (two fixed shapes; diagnostic)",
    "gap_to_oracle_same_run": "same-run gap to the oracle (v1: oracle chosen on the data it is scored on)",
}
MADE_OF = {
    "made_of_phase_split": "phase split (one candidate per phase)",
    "made_of_fusion_within_phase": "fusion choice within phase",
    "made_of_tile_within_phase": "tile choice within phase and fusion",
    "made_of_noise": "noise (same-run minus cross-run gap)",
}


def _decision_section(d: pd.DataFrame | None, why: str) -> Section:
    title = "Decision: verdict per mode and the figures it was decided on"
    if d is None:
        return _skipped("decision", title, why)
    if "figure" not in d.columns:
        return _skipped("decision", title, "decision.parquet predates decision v2 (no per-figure rows)")
    s = Section("decision", title)
    modes = d.drop_duplicates("mode")
    s.text += [f"{m.mode} mode: {m.mode_verdict} ({m.mode_reason})." for m in modes.itertuples()]
    s.text.append(
        "Every figure is cross-run: the global kernel, the policies and the oracle are chosen on one run "
        "and scored on another (all ordered pairs of runs); CIs combine a jackknife over runs with a "
        "bootstrap over test invocations; `continue` needs Holm's procedure to reject a figure's "
        "'at or below threshold'. Arms: off = unfused candidates, on = fused, free = both. "
        "Policies: global = one candidate; phase-keyed = one per phase; exact-key, bucketed (power-of-two "
        "shape buckets), clustered (k-means on shape), regret-aware (deviates only when the gain's lower "
        "bound beats its cost) are the deployable adaptive ones; random a floor; oracle the per-invocation best."
    )
    shown = d[d["decided"] | d["figure"].isin(FIGURE_LABELS)]
    rows = [
        {
            "mode": r.mode,
            "figure": FIGURE_LABELS.get(r.figure, r.figure),
            "estimate [CI]": hdecision.format_ci(r.estimate, r.ci_low, r.ci_high, r.unit),
            "threshold": f"{r.threshold:g}{r.unit}" if pd.notna(r.threshold) else "",
            "state": r.state,
            "p (one-sided)": f"{r.p_value:.3g}" if pd.notna(r.p_value) else "",
        }
        for r in shown.itertuples()
    ]
    s.tables.append(table("Decided figures (and, marked reported, beside them)", pd.DataFrame(rows)))
    made = d[d["figure"].isin(MADE_OF)]
    if not made.empty:
        s.figures.append(_made_of_figure(made))
        s.tables.append(_made_of_table(made))
    return s


def _made_of_figure(made: pd.DataFrame) -> Figure:
    modes = list(dict.fromkeys(made["mode"]))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(modes)), layout="constrained")
    for i, mode in enumerate(modes):
        left = 0.0
        for key, label in MADE_OF.items():
            v = made[(made["mode"] == mode) & (made["figure"] == key)]["estimate"]
            v = float(v.iloc[0]) if len(v) else 0.0
            ax.barh(i, v, left=left if v >= 0 else 0.0, label=label if i == 0 else None)
            left += max(v, 0.0)
    ax.set_yticks(range(len(modes)), modes)
    ax.set_xlabel("% of the oracle's test latency")
    ax.set_title("What the global-to-oracle gap is made of (cross-run; noise is the winner's curse)")
    ax.legend(fontsize=7, loc="lower right")
    return Figure("made_of", "What the headroom is made of", _png(fig))


def _made_of_table(made: pd.DataFrame) -> Table:
    rows = [
        {"mode": r.mode, "component": MADE_OF[r.figure],
         "% of oracle latency [CI]": hdecision.format_ci(r.estimate, r.ci_low, r.ci_high, "%")}
        for r in made.itertuples()
    ]  # fmt: skip
    return table("What the headroom is made of", pd.DataFrame(rows))


def _surface_section(portfolio: pd.DataFrame | None, why: str) -> Section:
    title = "Latency surface (candidates x shapes)"
    if portfolio is None:
        return _skipped("surface", title, why)
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
        s.figures.append(Figure(f"latency_surface_{mode}", f"Latency surface, {mode}", _png(fig)))
        s.tables.append(table(f"median_us per shape and candidate ({mode})", surface.reset_index()))
    return s


def _policy_section(pe: pd.DataFrame | None, why: str) -> Section:
    title = "Policy gains per fusion arm"
    if pe is None:
        return _skipped("policies", title, why)
    s = Section("policies", title)
    s.text.append(
        "gain_vs_global_pct on the test invocations of each run; error bars are the bootstrap CI of "
        "that gain (resampled test invocations). net = after lifecycle costs. Ranges are min-max over runs."
    )
    rows = []
    for (mode, arm, policy), g in pe.groupby(["mode", "fusion", "policy"], sort=False):
        rows.append(
            {
                "mode": mode,
                "fusion": arm,
                "policy": policy,
                "gain_vs_global_pct": hdecision.format_range(g["gain_vs_global_pct"], "%"),
                "CI of gain": f"[{fmt(g['ci_low'].min())}, {fmt(g['ci_high'].max())}]%",
                "gap_to_oracle_pct": hdecision.format_range(g["gap_to_oracle_pct"], "%"),
                "net_gain_pct": hdecision.format_range(g["net_gain_pct"], "%"),
            }
        )
    s.tables.append(table("Policies, min-max over runs", pd.DataFrame(rows)))
    modes = sorted(pe["mode"].unique())
    arms = [a for a in (*FUSION_ARMS, NATIVE_ARM) if a in set(pe["fusion"])]
    shown = [p for p in POLICIES if p != "random"]  # random's loss would squash the scale
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
            a = pe[(pe["mode"] == mode) & (pe["fusion"] == arm)]
            runs = sorted(a["run"].unique())
            for k, run in enumerate(runs):
                r = a[a["run"] == run].set_index("policy").reindex(shown)
                x = np.arange(len(shown)) + (k - (len(runs) - 1) / 2) * 0.12
                err = np.vstack(
                    [r["gain_vs_global_pct"] - r["ci_low"], r["ci_high"] - r["gain_vs_global_pct"]]
                )
                ax.errorbar(
                    x,
                    r["gain_vs_global_pct"],
                    yerr=np.clip(err, 0, None),
                    fmt="o",
                    ms=4,
                    capsize=2,
                    label=f"run {run}",
                )
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_xticks(
                range(len(shown)), shown if i == len(modes) - 1 else [], rotation=40, ha="right", fontsize=8
            )
            ax.set_title(f"fusion {arm}, {mode}", fontsize=9)
        axes[i][0].set_ylabel("gain vs global (%)")
    low, high = axes[0][0].get_ylim()
    if high - low < 0.2:  # a flat surface: show +-0.1 percentage points, not float rounding
        mid = (high + low) / 2
        axes[0][0].set_ylim(mid - 0.1, mid + 0.1)
    axes[0][-1].legend(fontsize=7)
    s.figures.append(
        Figure(
            "policy_gains", "Policy gains vs global with bootstrap CIs (random omitted: see table)", _png(fig)
        )
    )
    return s


def _factorial_section(fac: pd.DataFrame | None, why: str) -> Section:
    title = "Policy x fusion factorial"
    if fac is None:
        return _skipped("factorial", title, why)
    if reason := _all_skipped(fac):
        return _skipped("factorial", title, reason)
    skipped = fac[fac["status"] != "ok"] if "status" in fac.columns else fac.iloc[0:0]
    fac = fac[fac["status"] == "ok"] if "status" in fac.columns else fac
    cols = [c for c in ("run", "mode", "policy", "policy_gain_pct", "fusion_gain_pct", "interaction_pct",
                        "combined_gain_pct", "fusion_speedup") if c in fac.columns]  # fmt: skip
    s = Section(
        "factorial", title, tables=[table("2x2: {global, best deployable} x {unfused, fused}", fac[cols])]
    )
    s.text.append(
        "Gains are percentages of the global-unfused test latency; interaction = combined - policy - fusion, "
        "so fusion gain is never credited to dispatch."
    )
    for r in skipped.itertuples(index=False):
        s.text.append(f"run {r.run}, {r.mode}: skipped: {r.reason}")
    return s


def _fusion_regime_section(gs: pd.DataFrame | None, why: str) -> Section:
    title = "Fusion speedup, eager vs CUDA Graph, per working-set regime"
    if gs is None:
        return _skipped("fusion", title, why)
    if reason := _all_skipped(gs):
        return _skipped("fusion", title, reason)
    sp = hdecision.fusion_speedups(gs)
    if sp.empty:
        return _skipped("fusion", title, "no regime has both a fused and an unfused ok row")
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
        ax.errorbar(g["working_set_bytes"].astype(float), g["speedup"],
                    yerr=np.clip(np.vstack([g["speedup"] - g["ci_low"], g["ci_high"] - g["speedup"]]), 0, None),
                    marker="o" if mode == "graph" else "s", ls="-" if mode == "graph" else "--", capsize=2,
                    label=f"{shape} {mode}")  # fmt: skip
    if "l2_bytes" in gs.columns and gs["l2_bytes"].notna().any():
        ax.axvline(float(gs["l2_bytes"].dropna().iloc[0]), color="grey", ls=":", label="L2 size")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("working set (bytes)")
    ax.set_ylabel("fusion speedup (x)")
    ax.legend(fontsize=7)
    s.figures.append(Figure("fusion_speedup_regimes", "Fusion speedup per regime", _png(fig)))
    return s


def _roofline_section(rf: pd.DataFrame | None, why: str) -> Section:
    title = "Roofline: predicted vs measured"
    if rf is None:
        return _skipped("roofline", title, why)
    if reason := _all_skipped(rf):
        return _skipped("roofline", title, reason)
    ok = rf[rf["status"] == "ok"]
    s = Section("roofline", title)
    both = ok.dropna(subset=["measured_us"])
    if both.empty:
        s.text.append("No candidate has both a prediction and a measurement in the same mode.")
    else:
        fig, ax = plt.subplots(layout="constrained", figsize=(5, 4.2))
        for (mode, fused), g in both.groupby(["mode", "fused"], sort=True):
            ax.scatter(
                g["predicted_us"], g["measured_us"], s=12, label=f"{mode}, {'fused' if fused else 'unfused'}"
            )
        lo = float(min(both["predicted_us"].min(), both["measured_us"].min()))
        hi = float(max(both["predicted_us"].max(), both["measured_us"].max()))
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("predicted (us)")
        ax.set_ylabel("measured (us)")
        ax.legend(fontsize=7)
        s.figures.append(
            Figure("roofline_predicted_vs_measured", "Roofline predicted vs measured", _png(fig))
        )
        summary = both.groupby(["mode", "phase", "residency", "fused"], as_index=False).agg(
            rows=("measured_us", "size"),
            measured_over_predicted_median=("measured_over_predicted", "median"),
            measured_over_predicted_min=("measured_over_predicted", "min"),
            measured_over_predicted_max=("measured_over_predicted", "max"),
        )
        s.tables.append(table("measured / predicted", summary))
    split = (
        ok[ok["fused"]]
        .groupby(["mode", "phase"], as_index=False)
        .agg(
            traffic_saved_us=("traffic_saved_us", "median"),
            launches_saved_us=("launches_saved_us", "median"),
            launch_share_pct=("launch_share_pct", "median"),
            fusion_saving_pred_us=("fusion_saving_pred_us", "median"),
            fusion_saving_measured_us=("fusion_saving_measured_us", "median"),
        )
    )
    s.tables.append(
        table(
            "Fusion saving split (medians over tiles and shapes)",
            split,
            "traffic = difference of max(compute, memory); launches = launches saved x launch overhead of the mode",
        )
    )
    if (rf["status"] != "ok").any():
        s.text.append(
            "Rows without a prediction: " + "; ".join(sorted(set(rf.loc[rf["status"] != "ok", "reason"])))
        )
    return s


def _lifecycle_section(lc: pd.DataFrame | None, pe: pd.DataFrame | None, why: str) -> Section:
    title = "Lifecycle ledger"
    if lc is None:
        return _skipped("lifecycle", title, why)
    if reason := _all_skipped(lc):
        return _skipped("lifecycle", title, reason)
    s = Section("lifecycle", title)
    lc_ok = lc[lc["status"].astype(str) == "ok"] if "status" in lc.columns else lc
    if "kind" in lc_ok.columns:
        for kind, label in (("compile", "cold compile per candidate"), ("cache", "cache per candidate"),
                            ("dispatch", "dispatch lookup per policy"), ("switch", "switching penalty")):  # fmt: skip
            rows = lc_ok[lc_ok["kind"] == kind]
            if rows.empty:
                s.text.append(f"{label}: skipped: no ok rows")
                continue
            cols = [
                c
                for c in ("candidate", "candidate_b", "policy", "mode", "invocation", "value", "unit")
                if c in rows.columns
            ]
            cols = [
                c
                for c in cols
                if rows[c].astype(str).str.len().gt(0).any() and not (rows[c].astype(str) == "-1").all()
            ]
            s.tables.append(table(label, rows[cols]))
    else:
        s.tables.append(table("lifecycle rows", lc_ok))
    if pe is not None and "running_cost_us" in pe.columns:
        rows = []
        free = pe[(pe["fusion"] == "free") & pe["policy"].isin(DEPLOYABLE)]
        glob = pe[(pe["fusion"] == "free") & (pe["policy"] == "global")].set_index(["run", "mode"])
        for r in free.itertuples(index=False):
            g = glob.loc[(r.run, r.mode)]
            gain_us = (g["test_us"] - r.test_us) / r.test_invocations
            margin_us = gain_us - (r.running_cost_us - g["running_cost_us"])
            once_us = (r.compile_s - g["compile_s"]) * 1e6
            if margin_us <= 0:
                horizon = math.inf
            else:
                horizon = max(once_us, 0.0) / margin_us
            rows.append({"run": r.run, "mode": r.mode, "policy": r.policy, "gain_us_per_invocation": gain_us,
                         "extra_running_us_per_invocation": r.running_cost_us - g["running_cost_us"],
                         "extra_compile_s": r.compile_s - g["compile_s"], "break_even_invocations": horizon})  # fmt: skip
        if rows:
            s.tables.append(table("Break-even horizon (fusion arm free)", pd.DataFrame(rows),
                                  "invocations after which the one-time extra compile is paid back by the per-invocation "
                                  "margin (gain minus extra lookup and switching); 'never' when the margin is not positive"))  # fmt: skip
    return s


def _noise_section(portfolio: pd.DataFrame | None, samples: pd.DataFrame | None, why: str) -> Section:
    title = "Noise and winner stability"
    if portfolio is None:
        return _skipped("noise", title, why)
    p = portfolio if "mode" in portfolio.columns else portfolio.assign(mode="eager")
    s = Section("noise", title)
    s.tables.append(table("Winner stability across runs", noise.stability_summary(p)))
    if samples is not None and not samples.empty:
        s.tables.append(table("Timing noise per run (from samples)", noise.run_summary(p, samples)))
    else:
        rel = p.assign(rel_std_pct=100.0 * p["std_us"] / p["median_us"]).groupby(
            ["run", "mode"], as_index=False
        )
        s.tables.append(table("Timing noise per run (std_us / median_us; samples not read)",
                              rel["rel_std_pct"].agg(["median", "max"]).rename(columns={"median": "rel_std_median_pct", "max": "rel_std_max_pct"})))  # fmt: skip
    spread = noise.median_spread(p)
    s.text.append(
        f"Run-to-run spread of medians: median {fmt(spread['spread_pct'].median())}%, "
        f"max {fmt(spread['spread_pct'].max())}% over {fmt(len(spread))} (mode, invocation, candidate)."
    )
    return s


def _correctness_section(c: pd.DataFrame | None, why: str) -> Section:
    title = "Correctness"
    if c is None:
        return _skipped("correctness", title, why)
    if reason := _all_skipped(c):
        return _skipped("correctness", title, reason)
    per = c.groupby("candidate", as_index=False).agg(
        cases=("shape_key", "size"),
        failed=("passed", lambda x: int((~x.astype(bool)).sum())),
        max_rel_err=("rel_err", "max"),
        max_abs_err=("max_abs_err", "max"),
        nan_count=("nan_count", "sum"),
        unwritten_count=("unwritten_count", "sum"),
    )
    excluded = per.loc[per["failed"] > 0, "candidate"].tolist()
    s = Section("correctness", title, tables=[table("Every candidate against the float64 reference", per)])
    s.text.append(
        "Excluded candidates (failed at least one case): "
        + (", ".join(map(str, excluded)) if excluded else "none")
        + "."
    )
    return s


def _environment_section(env: pd.DataFrame | None, why: str) -> Section:
    title = "Environment"
    if env is None or env.empty:
        return _skipped("environment", title, why if env is None else "the artifact has no rows")
    row = env.iloc[0]
    kv = pd.DataFrame({"key": [str(k) for k in row.index], "value": [fmt(v) for v in row.to_numpy()]})
    return Section("environment", title, tables=[table("Machine the measurements were made on", kv)])


def _benchmarks_section(benchmarks: Mapping[str, pd.DataFrame] | None) -> Section:
    title = "Stage wall times"
    if not benchmarks:
        return _skipped(
            "benchmarks", title, "no Snakemake benchmark files were found under results/benchmarks/"
        )
    rows = []
    for name, df in sorted(benchmarks.items()):
        if "s" in df.columns and len(df):
            rows.append({"stage": name, "wall_s": float(df["s"].iloc[0]),
                         "max_rss_mb": float(df["max_rss"].iloc[0]) if "max_rss" in df.columns and df["max_rss"].iloc[0] != "-" else np.nan})  # fmt: skip
    if not rows:
        return _skipped("benchmarks", title, "benchmark files have no 's' column")
    return Section("benchmarks", title, tables=[table("Snakemake benchmark: files", pd.DataFrame(rows))])


# ----------------------------------------------------------------------------------------------
# Assembly
# ----------------------------------------------------------------------------------------------


def build(
    inputs: Mapping[str, pd.DataFrame | None],
    read: Sequence[tuple[str, str]],
    out_dir: str | Path,
    *,
    title: str = "headroom report",
    benchmarks: Mapping[str, pd.DataFrame] | None = None,
    missing: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Write index.html, report.md and figures/*.png under out_dir; return their paths.

    inputs: artifact name (see ``INPUTS``) -> DataFrame, or None/absent when not available;
    read: (path, blake3) of every artifact read, listed in the report; benchmarks: stage name ->
    Snakemake benchmark table; missing: artifact name -> why it is absent (shown as "skipped: ...").
    """
    unknown = sorted(set(inputs) - set(INPUTS))
    if unknown:
        raise ValueError(f"inputs: unknown artifact name(s) {unknown}; known: {list(INPUTS)}")
    missing = dict(missing or {})

    def get(name):
        return inputs.get(name)

    def why(name):
        return missing.get(name, f"{name} artifact not provided")

    d = get("decision")
    device = hdecision.device_of(get("environment"))
    if d is not None and "device" in d.columns:
        device = str(d["device"].iloc[0])
    verdict = str(d["verdict"].iloc[0]) if d is not None else "no-decision"
    reason = str(d["reason"].iloc[0]) if d is not None else f"skipped: {why('decision')}"
    banner = NOT_GPU.format(device=device) if device != "cuda" else ""

    sections = [
        _decision_section(d, why("decision")),
        _surface_section(get("portfolio"), why("portfolio")),
        _policy_section(get("policy_eval"), why("policy_eval")),
        _factorial_section(get("factorial"), why("factorial")),
        _fusion_regime_section(get("graph_sweep"), why("graph_sweep")),
        _roofline_section(get("roofline"), why("roofline")),
        _lifecycle_section(get("lifecycle"), get("policy_eval"), why("lifecycle")),
        _noise_section(get("portfolio"), get("samples"), why("portfolio")),
        _correctness_section(get("correctness"), why("correctness")),
        _environment_section(get("environment"), why("environment")),
        _benchmarks_section(benchmarks),
    ]
    artifacts_read = [{"path": str(p), "blake3": str(h)} for p, h in sorted(read)]

    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for old in (out / "figures").glob("*.png"):
        old.unlink()
    paths = {}
    for section in sections:
        for fig in section.figures:
            path = out / "figures" / f"{fig.name}.png"
            path.write_bytes(fig.png)
            paths[f"figures/{fig.name}.png"] = path
    context = {"title": title, "banner": banner, "verdict": verdict, "reason": reason, "device": device,
               "sections": sections, "artifacts": artifacts_read}  # fmt: skip
    html_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                           undefined=StrictUndefined, keep_trailing_newline=True)  # fmt: skip
    md_env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=False, undefined=StrictUndefined,
                         keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)  # fmt: skip
    md_env.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
    html = html_env.get_template("report.html.j2").render(**context)
    md = md_env.get_template("report.md.j2").render(**context)
    for name, text in (("index.html", html), ("report.md", md)):
        path = out / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        paths[name] = path
    return paths
