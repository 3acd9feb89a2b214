"""The decision rule: stop, continue or no-decision, per mode and as one headline verdict.

Figures (``headroom.analysis.figures``; cross-run: chosen on one run, scored on another), decided per
mode with at least three runs:

* ``gap_to_oracle`` — the global kernel's gap to the per-invocation oracle (fusion arm free), against
  ``max_gap_to_oracle_pct``;
* ``policy_gain`` — the best deployable policy's net gain over ``phase-keyed`` (selected on a
  validation slice inside train), against ``max_policy_gain_pct``;
* ``fusion_speedup`` — graph mode only: the trace-weighted unfused/fused speedup of the global
  kernels on the study's trace, against ``max_graph_fusion_speedup``.

Each has an estimate, a CI at level ``confidence`` and a one-sided p-value of "figure <= threshold".

Rule (alpha = 1 - confidence):

1. Off the GPU (environment device not 'cuda'): ``no-decision`` everywhere.
2. ``continue`` can fire on any of the decided figures of any mode, so it is a multiple test: a figure
   *exceeds* when Holm's step-down procedure over all decided figures' p-values rejects its null at
   family-wise level alpha. A mode with an exceeding figure is ``continue``.
3. A figure *holds* when its CI lies wholly below its threshold. A mode is ``stop`` when every decided
   figure holds (stop needs no multiplicity control: it needs every figure, not any).
4. Otherwise the mode is ``no-decision``: a figure's CI straddles its threshold, and when the CI's
   half-width exceeds the threshold's distance from no effect the reason says the noise floor is wider
   than the threshold. A mode with one run (no independent score) or two runs (no run-to-run variance
   to estimate) is ``no-decision`` with that reason.
5. Headline: ``continue`` when any mode continues; ``stop`` when every mode stops; else ``no-decision``.
   When the gap exceeds but the policy figure does not, the reason says that a phase-keyed two-kernel
   rule captures the gap.

decision.parquet: one row per (mode, figure) with estimate, ci_low, ci_high, threshold, state
('exceeds', 'holds', 'inconclusive', 'no-interval', 'reported'), p-values, and on every row the mode's
verdict and the headline ``verdict`` and ``reason``. Rows with ``decided`` false are reported, not
decided on (per-phase fusion, the decomposition, same-run v1 figures, the graph sweep's fusion).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t

VERDICTS = ("stop", "continue", "no-decision")
THRESHOLD_OF = {
    "gap_to_oracle": "max_gap_to_oracle_pct",
    "gap_to_oracle_same_run": "max_gap_to_oracle_pct",
    "policy_gain": "max_policy_gain_pct",
    "fusion_speedup": "max_graph_fusion_speedup",
    "fusion_speedup_sweep": "max_graph_fusion_speedup",
}
NULL_OF = {"fusion_speedup": 1.0}  # the figure's value with no effect (0 for the % figures)
WORDS = {
    "gap_to_oracle": "the global kernel's gap to the oracle",
    "policy_gain": "the best deployable policy's net gain over phase-keyed",
    "fusion_speedup": "the trace-weighted graph-mode fusion speedup",
    "phase_split_gain": "phase-keyed's net gain over the global kernel",
}
EN_DASH = "\u2013"


def format_range(values, unit: str, digits: int = 3) -> str:
    """'0.149–0.670%' (min–max); 'n/a' when there are no finite values."""
    v = [float(x) for x in values if x is not None and pd.notna(x) and math.isfinite(float(x))]
    if not v:
        return "n/a"
    return f"{min(v):.{digits}f}{EN_DASH}{max(v):.{digits}f}{unit}"


def format_ci(estimate: float, lo: float, hi: float, unit: str) -> str:
    """'7.33% [2.99, 11.67]' — signed, readable, 'n/a' when missing."""
    if not np.isfinite(estimate):
        return "n/a"
    d = 3 if unit == "x" else 2
    ci = f" [{lo:+.{d}f}, {hi:+.{d}f}]" if np.isfinite(lo) and np.isfinite(hi) else " (no CI)"
    if unit == "x":
        ci = ci.replace("+", "")
    return f"{estimate:+.{d}f}{unit}{ci}" if unit == "%" else f"{estimate:.{d}f}{unit}{ci}"


def device_of(environment: pd.DataFrame | None) -> str:
    """'cuda', 'interpret' or 'unknown' (no environment, or no device column)."""
    if environment is None or environment.empty or "device" not in environment.columns:
        return "unknown"
    devices = sorted(set(environment["device"].astype(str)))
    return devices[0] if len(devices) == 1 else "mixed(" + ",".join(devices) + ")"


def fusion_speedups(graph_sweep: pd.DataFrame | None, confidence: float = 0.95) -> pd.DataFrame:
    """Unfused/fused speedup per (regime, mode, tile, shape_key[, run]) of the ok sweep rows."""
    cols = [
        "regime",
        "working_set_bytes",
        "mode",
        "tile",
        "shape_key",
        "speedup",
        "ci_low",
        "ci_high",
        "ci_basis",
    ]
    if graph_sweep is None or graph_sweep.empty:
        return pd.DataFrame(columns=cols)
    required = ("regime", "mode", "fused", "tile", "shape_key", "median_us", "status")
    missing = [c for c in required if c not in graph_sweep.columns]
    if missing:
        raise ValueError(f"graph_sweep: missing column(s) {missing}")
    ok = graph_sweep[graph_sweep["status"].astype(str) == "ok"]
    keys = [k for k in ("run", "regime", "mode", "tile", "shape_key") if k in ok.columns]
    z = float(norm.ppf(0.5 + confidence / 2.0))
    rows = []
    for key, group in ok.groupby(keys, sort=True):
        label = dict(zip(keys, key, strict=True))
        un = group[~group["fused"].astype(bool)]
        fu = group[group["fused"].astype(bool)]
        if un.empty or fu.empty:
            continue
        u, f = un.iloc[0], fu.iloc[0]
        s = float(u["median_us"]) / float(f["median_us"])
        if {"std_us", "reps"} <= set(group.columns) and pd.notna(u["std_us"]) and pd.notna(f["std_us"]):
            var = (float(u["std_us"]) / float(u["median_us"])) ** 2 / max(float(u["reps"]), 1.0)
            var += (float(f["std_us"]) / float(f["median_us"])) ** 2 / max(float(f["reps"]), 1.0)
            lo, hi, basis = s * math.exp(-z * math.sqrt(var)), s * math.exp(z * math.sqrt(var)), "std_us/reps"
        elif {"p10_us", "p90_us"} <= set(group.columns) and pd.notna(u["p10_us"]) and pd.notna(f["p90_us"]):
            lo = float(u["p10_us"]) / float(f["p90_us"])
            hi = float(u["p90_us"]) / float(f["p10_us"])
            basis = "p10/p90"
        else:
            lo = hi = s
            basis = "point (no dispersion recorded)"
        ws = u["working_set_bytes"] if "working_set_bytes" in group.columns else np.nan
        rows.append(
            {**label, "working_set_bytes": ws, "speedup": s, "ci_low": lo, "ci_high": hi, "ci_basis": basis}
        )
    out = pd.DataFrame(rows)
    return out if not out.empty else pd.DataFrame(columns=cols)


def _sweep_rows(graph_sweep, confidence) -> list[dict]:
    """The graph sweep's fusion speedup (two fixed shapes, working-set regimes): a diagnostic."""
    speed = fusion_speedups(graph_sweep, confidence)
    rows = []
    for mode, g in speed.groupby("mode", sort=True):
        rows.append(
            {
                "mode": mode,
                "figure": "fusion_speedup_sweep",
                "unit": "x",
                "estimate": float(g["speedup"].median()),
                "ci_low": float(g["ci_low"].min()),
                "ci_high": float(g["ci_high"].max()),
                "decided": False,
                "detail": f"graph sweep: median of {len(g)} (regime, shape) rows, range "
                f"{format_range(g['speedup'], 'x')}; interval: the rows' CIs' envelope",
            }
        )
    return rows


def holm(pvalues: np.ndarray, alpha: float) -> np.ndarray:
    """Which nulls Holm's step-down procedure rejects at family-wise level ``alpha``."""
    p = np.asarray(pvalues, dtype=float)
    reject = np.zeros(len(p), dtype=bool)
    order = np.argsort(p)
    m = len(p)
    for k, i in enumerate(order):
        if not p[i] <= alpha / (m - k):
            break
        reject[i] = True
    return reject


def _p_above(row, threshold) -> float:
    if not (np.isfinite(row["se"]) and np.isfinite(row["df"]) and row["df"] >= 1):
        return float("nan")
    se = max(float(row["se"]), 1e-12)
    return float(student_t.sf((row["estimate"] - threshold) / se, row["df"]))


def _states(fig: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """p-values against thresholds, Holm over every decided figure, and each figure's state."""
    fig = fig.copy()
    fig["p_value"] = [_p_above(r, r["threshold"]) if r["decided"] else np.nan for _, r in fig.iterrows()]
    tested = fig["decided"] & fig["p_value"].notna()
    fig["exceeds"] = False
    fig.loc[tested, "exceeds"] = holm(fig.loc[tested, "p_value"].to_numpy(), alpha)
    state = np.where(~fig["decided"], "reported", "inconclusive").astype(object)
    state[(fig["decided"] & ~fig["ci_high"].notna()).to_numpy()] = "no-interval"
    state[(fig["decided"] & (fig["ci_high"] < fig["threshold"])).to_numpy()] = "holds"
    state[fig["exceeds"].to_numpy()] = "exceeds"
    fig["state"] = state
    return fig


def _mode_verdict(rows: pd.DataFrame, device: str) -> tuple[str, str]:
    decided = rows[rows["decided"]]
    runs = int(rows["runs"].max()) if rows["runs"].notna().any() else 0
    if device != "cuda":
        return "no-decision", f"the timings are not GPU measurements (device: {device})"
    if runs < 2:
        return "no-decision", "one run: nothing scores the choices independently; record at least 3 runs"
    if runs < 3:
        return "no-decision", "two runs: run-to-run variance cannot be estimated; record at least 3 runs"
    if decided.empty:
        return "no-decision", "no figure could be measured"
    if (decided["state"] == "exceeds").any():
        names = decided.loc[decided["state"] == "exceeds", "figure"]
        return "continue", " and ".join(
            _describe(decided, n) for n in names
        ) + " exceeds its threshold (Holm)"
    if (decided["state"] == "holds").all():
        return "stop", "every decided figure's CI lies below its threshold"
    open_ = decided[decided["state"] != "holds"]
    parts = []
    for _, r in open_.iterrows():
        half = (r["ci_high"] - r["ci_low"]) / 2.0
        floor = r["threshold"] - NULL_OF.get(r["figure"], 0.0)
        why = "its CI straddles the threshold"
        if np.isfinite(half) and half > abs(floor):
            why = f"the noise floor (CI half-width {half:.3g}{r['unit']}) is wider than the threshold"
        parts.append(f"{_describe(decided, r['figure'])}: {why}")
    return "no-decision", "; ".join(parts)


def _describe(rows: pd.DataFrame, figure: str) -> str:
    r = rows[rows["figure"] == figure].iloc[0]
    thr = f", threshold {r['threshold']:g}{r['unit']}" if np.isfinite(r.get("threshold", np.nan)) else ""
    return (
        f"{WORDS.get(figure, figure)} {format_ci(r['estimate'], r['ci_low'], r['ci_high'], r['unit'])}{thr}"
    )


def _phase_note(rows: pd.DataFrame) -> str:
    """When the gap exceeds but adaptivity beyond the phase split does not: say who captures it."""
    state = dict(zip(rows["figure"], rows["state"], strict=False))
    if state.get("gap_to_oracle") != "exceeds" or state.get("policy_gain") == "exceeds":
        return ""
    return (
        f" A phase-keyed two-kernel rule (one candidate per phase) captures it: "
        f"{_describe(rows, 'phase_split_gain')}; beyond the phase split, {_describe(rows, 'policy_gain')}."
    )


def decide(
    figures: pd.DataFrame,
    graph_sweep: pd.DataFrame | None,
    environment: pd.DataFrame | None,
    *,
    max_gap_to_oracle_pct: float = 1.0,
    max_policy_gain_pct: float = 1.0,
    max_graph_fusion_speedup: float = 1.10,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """decision.parquet from the study's figures (``figures.study_figures``), sweep and environment."""
    thresholds = {
        "max_gap_to_oracle_pct": max_gap_to_oracle_pct,
        "max_policy_gain_pct": max_policy_gain_pct,
        "max_graph_fusion_speedup": max_graph_fusion_speedup,
    }
    for name, value in thresholds.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"decision.{name} must be a finite number, got {value!r}")
    need = ("mode", "figure", "estimate", "ci_low", "ci_high", "se", "df", "runs", "decided")
    missing = [c for c in need if c not in figures.columns]
    if missing:
        raise ValueError(f"figures: missing column(s) {missing}")
    fig = pd.concat([figures, pd.DataFrame(_sweep_rows(graph_sweep, confidence))], ignore_index=True)
    fig["runs"] = fig.groupby("mode")["runs"].transform("max")
    fig["decided"] = fig["decided"].fillna(False).astype(bool)
    fig["threshold"] = [
        float(thresholds[THRESHOLD_OF[f]]) if f in THRESHOLD_OF else np.nan for f in fig["figure"]
    ]
    fig = _states(fig, 1.0 - confidence)
    device = device_of(environment)
    # a mode is decided on the portfolio's figures; a mode only the sweep measured is reported
    measured = set(figures["mode"])
    verdicts = {m: _mode_verdict(rows, device) for m, rows in fig.groupby("mode", sort=True) if m in measured}
    fig["mode_verdict"] = fig["mode"].map(lambda m: verdicts.get(m, ("reported",))[0])
    fig["mode_reason"] = fig["mode"].map(lambda m: verdicts.get(m, ("", "not timed by the portfolio"))[1])
    verdict, reason = _headline(fig, verdicts, device)
    fig["verdict"], fig["reason"] = verdict, reason
    fig["device"], fig["confidence"] = device, float(confidence)
    front = ["mode", "figure", "estimate", "ci_low", "ci_high", "threshold", "state", "verdict", "reason"]
    return fig[front + [c for c in fig.columns if c not in front]].drop(columns=["exceeds"])


def _headline(fig: pd.DataFrame, verdicts: dict, device: str) -> tuple[str, str]:
    if device != "cuda":
        return (
            "no-decision",
            f"The timings are not GPU measurements (device: {device}), so no decision is drawn.",
        )
    per_mode = "; ".join(f"{m}: {v} ({r})" for m, (v, r) in verdicts.items())
    if not verdicts:
        return "no-decision", "No decision: no figure could be measured."
    if any(v == "continue" for v, _ in verdicts.values()):
        note = ""
        for m, (v, _) in verdicts.items():
            if v == "continue" and (n := _phase_note(fig[fig["mode"] == m])):
                note += f" In {m} mode:{n}"
        return "continue", f"Continue. {per_mode}.{note}"
    if all(v == "stop" for v, _ in verdicts.values()):
        return "stop", f"Stop. {per_mode}."
    return "no-decision", f"No decision. {per_mode}."


def z_of(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2.0))


def with_detectable_effects(table: pd.DataFrame, mde: dict[str, dict]) -> pd.DataFrame:
    """Append one reported row per mode: the smallest net gain over phase-keyed the rule detects with
    the simulation's power on this study's own trace and noise (headroom.analysis.simulate
    .minimum_detectable_effect): what a `stop` here can rule out. When no planted effect reached
    that power, the figure is `policy_gain_mde_above` and its estimate the largest effect tried."""
    rows = []
    for mode, m in mde.items():
        base = table[table["mode"] == mode]
        if base.empty:
            continue
        finite = bool(np.isfinite(m["mde_pct"]))
        row = base.iloc[0].to_dict()
        row.update(
            figure="policy_gain_mde" if finite else "policy_gain_mde_above",
            estimate=float(m["mde_pct"] if finite else m["mde_at_least_pct"]),
            ci_low=math.nan,
            ci_high=math.nan,
            threshold=float(m["threshold_pct"]),
            state="reported",
            unit="%",
            se=math.nan,
            df=math.nan,
            decided=False,
            p_value=math.nan,
            detail=f"{m['power']:.0%} power over {m['seeds']} simulated seeds, {m['runs']} runs, "
            f"{m['invocations']} invocations",
        )
        rows.append(row)
    return pd.concat([table, pd.DataFrame(rows)], ignore_index=True) if rows else table
