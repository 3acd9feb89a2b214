"""The decision rule: stop, continue or no-decision, from three figures and their CIs.

Figures (each one value and CI per run x mode, or per graph_sweep row for fusion):

* ``gap_to_oracle``: the global candidate's gap to the per-invocation oracle, fusion arm ``free``
  (CI: ``gap_ci_low``/``gap_ci_high`` of policy_eval).
* ``policy_gain``: the best deployable adaptive policy's ``net_gain_pct`` over the three fusion
  arms (CI: ``net_ci_low``/``net_ci_high``).
* ``graph_fusion_speedup``: unfused / fused ``median_us`` of the same tile and shape under CUDA Graph
  replay, per working-set regime (CI: delta method on log speedup from ``std_us``/``reps`` when the
  sweep records them, else [p10_U/p90_F, p90_U/p10_F] from ``p10_us``/``p90_us``, else the point).

Rule, thresholds from config ``decision:``: a figure *holds* when below its threshold.
``no-decision`` when the timings are not GPU measurements; else ``continue`` when any figure
exceeds its threshold with its CI clear above it; else ``no-decision`` when any figure is missing
or its CI straddles the threshold; else ``stop`` (every figure holds, every CI clear below).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy.stats import norm

from headroom.analysis.policies import DEPLOYABLE, FUSION_ARMS

VERDICTS = ("stop", "continue", "no-decision")
DEFAULT_THRESHOLDS = {
    "max_gap_to_oracle_pct": 1.0,
    "max_policy_gain_pct": 1.0,
    "max_graph_fusion_speedup": 1.10,
}
EN_DASH = "\u2013"


def format_range(values, unit: str, digits: int = 3) -> str:
    """'0.149–0.670%' (min–max); 'n/a' when there are no finite values."""
    v = [float(x) for x in values if x is not None and pd.notna(x) and math.isfinite(float(x))]
    if not v:
        return "n/a"
    return f"{min(v):.{digits}f}{EN_DASH}{max(v):.{digits}f}{unit}"


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


def _figures(policy_eval: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    need = ("run", "policy", "fusion", "gap_to_oracle_pct", "net_gain_pct")
    missing = [c for c in need if c not in policy_eval.columns]
    if missing:
        raise ValueError(f"policy_eval: missing column(s) {missing}")
    pe = policy_eval.copy()
    if "mode" not in pe.columns:
        pe["mode"] = "eager"
    lo_gap, hi_gap = (
        ("gap_ci_low", "gap_ci_high") if "gap_ci_low" in pe.columns else ("gap_to_oracle_pct",) * 2
    )
    lo_net, hi_net = ("net_ci_low", "net_ci_high") if "net_ci_low" in pe.columns else ("ci_low", "ci_high")
    gap = pe[(pe["policy"] == "global") & (pe["fusion"] == "free")]
    gap = gap.assign(value=gap["gap_to_oracle_pct"], lo=gap[lo_gap], hi=gap[hi_gap], label="global")
    # the decision is about our portfolio; the `native` arm (torch backends beside ours) is reported,
    # not decided on
    deploy = pe[pe["policy"].isin(DEPLOYABLE) & pe["fusion"].isin(FUSION_ARMS)]
    best = (
        deploy.loc[deploy.groupby(["run", "mode"])["net_gain_pct"].idxmax()] if not deploy.empty else deploy
    )
    best = best.assign(
        value=best["net_gain_pct"],
        lo=best[lo_net],
        hi=best[hi_net],
        label=best["policy"] + " (" + best["fusion"] + ")",
    )
    return gap, best


def _state(values: pd.DataFrame, threshold: float) -> str:
    """'exceeded' (some value >= threshold with CI clear above), 'straddles', 'holds' or 'missing'."""
    if values.empty:
        return "missing"
    if ((values["value"] >= threshold) & (values["lo"] > threshold)).any():
        return "exceeded"
    if ((values["lo"] <= threshold) & (values["hi"] >= threshold)).any() or (
        values["value"] >= threshold
    ).any():
        return "straddles"
    return "holds"


def decide(
    policy_eval: pd.DataFrame,
    graph_sweep: pd.DataFrame | None,
    environment: pd.DataFrame | None,
    *,
    max_gap_to_oracle_pct: float = 1.0,
    max_policy_gain_pct: float = 1.0,
    max_graph_fusion_speedup: float = 1.10,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One-row DataFrame: verdict, reason, and each figure's range, CI and threshold."""
    for name, value in (
        ("max_gap_to_oracle_pct", max_gap_to_oracle_pct),
        ("max_policy_gain_pct", max_policy_gain_pct),
        ("max_graph_fusion_speedup", max_graph_fusion_speedup),
    ):
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"decision.{name} must be a finite number, got {value!r}")
    gap, best = _figures(policy_eval)
    speed = fusion_speedups(graph_sweep, confidence)
    graph = speed[speed["mode"] == "graph"].rename(
        columns={"speedup": "value", "ci_low": "lo", "ci_high": "hi"}
    )
    eager = speed[speed["mode"] == "eager"]
    device = device_of(environment)

    figures = {
        "gap_to_oracle": (gap, float(max_gap_to_oracle_pct), "%", "the global kernel's gap to the oracle"),
        "policy_gain": (best, float(max_policy_gain_pct), "%", "the best deployable net policy gain"),
        "graph_fusion_speedup": (
            graph,
            float(max_graph_fusion_speedup),
            "x",
            "the graph-mode fusion speedup",
        ),
    }
    states = {name: _state(values, thr) for name, (values, thr, _, _) in figures.items()}
    row: dict = {"device": device, "runs": int(policy_eval["run"].nunique()), "confidence": confidence}
    for name, (values, _thr, unit, _) in figures.items():
        row[f"{name}_min"] = float(values["value"].min()) if not values.empty else np.nan
        row[f"{name}_max"] = float(values["value"].max()) if not values.empty else np.nan
        row[f"{name}_range"] = format_range(values["value"], unit)
        row[f"{name}_ci_low"] = float(values["lo"].min()) if not values.empty else np.nan
        row[f"{name}_ci_high"] = float(values["hi"].max()) if not values.empty else np.nan
        row[f"{name}_ci"] = (
            f"[{row[f'{name}_ci_low']:.3f}, {row[f'{name}_ci_high']:.3f}]{unit}"
            if not values.empty
            else "n/a"
        )
        row[f"{name}_state"] = states[name]
    row["best_policy"] = ", ".join(sorted(set(best["label"]))) if not best.empty else ""
    row["eager_fusion_speedup_range"] = format_range(eager["speedup"], "x")
    row["max_gap_to_oracle_pct"] = float(max_gap_to_oracle_pct)
    row["max_policy_gain_pct"] = float(max_policy_gain_pct)
    row["max_graph_fusion_speedup"] = float(max_graph_fusion_speedup)

    def describe(name: str) -> str:
        values, thr, unit, words = figures[name]
        return f"{words} {row[f'{name}_range']} (CI {row[f'{name}_ci']}, threshold {thr:g}{unit})"

    if device != "cuda":
        verdict = "no-decision"
        reason = (
            f"The timings are not GPU measurements (device: {device}), so no decision is drawn from them."
        )
    elif exceeded := [n for n, s in states.items() if s == "exceeded"]:
        verdict = "continue"
        reason = (
            "Continue: "
            + " and ".join(describe(n) for n in exceeded)
            + " exceeds its threshold with the CI clear of it."
        )
    elif missing := [n for n, s in states.items() if s == "missing"]:
        verdict = "no-decision"
        reason = "No decision: " + " and ".join(figures[n][3] for n in missing) + " could not be measured."
    elif straddling := [n for n, s in states.items() if s == "straddles"]:
        verdict = "no-decision"
        reason = (
            "No decision: "
            + " and ".join(describe(n) for n in straddling)
            + " has a CI that straddles its threshold."
        )
    else:
        verdict = "stop"
        reason = (
            "Stop: "
            + ", ".join(describe(n) for n in figures)
            + " all stay below their thresholds with CIs clear of them."
        )
    return pd.DataFrame([{"verdict": verdict, "reason": reason, **row}])
