"""The decision rule (v3.3, ``engine.RULE_VERSION``): stop, continue or no-decision, per mode and for
the deployment profile (the headline).

Figures (``headroom.decide.figures``, computed by ``headroom.decide.engine``; cross-run: chosen on
one run, scored on another), decided with at least three runs:

* ``gap_to_oracle`` — the global kernel's gap to the per-invocation oracle (fusion arm free), against
  ``max_gap_to_oracle_pct``;
* ``policy_gain`` — the best deployable policy's net gain over the better of global and phase-keyed
  (both chosen on a validation slice inside train), against ``max_policy_gain_pct``.

The fusion and native comparisons answer another question — which one kernel to ship — and are the
kernel recommendation rows (``kernel_vs_*``, reported first in the report, never decided on; shown
against ``max_graph_fusion_speedup`` for reference).

Families. Each mode's two figures are one Holm family (its ``mode_verdict``). The deployment profile
(config ``decision.deployment``: step type -> mode) has its parts ``<mode>@<step type>``; their decided
figures are the headline's family and its ``verdict``. Without profile parts (a mode the profile names
was not timed), the headline combines the modes: continue when any continues, stop when every one stops.

Rule within a family (alpha = 1 - confidence; ``engine.rule``):

1. Off the GPU (environment device not 'cuda'): ``no-decision`` everywhere.
2. A figure *exceeds* when Holm's step-down procedure over the family's t p-values of "figure <=
   threshold" (the Welch SE and df: ``se``, ``df``) rejects its null at family-wise level alpha; a
   family with an exceeding figure is ``continue``.
3. A figure *holds* when its CI lies wholly below its threshold — for the gap, the CI of
   ``gap_to_oracle_bound``, which is biased up (``engine.HOLD_BY``); ``stop`` when every decided figure
   holds (an intersection-union test: no multiplicity correction, since every figure must reject).
   The decided figures' and the bound's CI (``ci_low``/``ci_high``, ``hold_high``) is bootstrap-t
   (``engine.CANDIDATES_FOR``; decision v3 held on the Welch t interval), whose run part for the gap
   and its bound is, from four runs on, the pair mean's variance from its two variance components
   on their Satterthwaite df (``engine.RULE_INTERVAL``, decision v3.3; v3.2 took the unbiased
   variance, clipped at 0); every other row's CI is the Welch t interval.
4. Otherwise ``no-decision``, and the reason names the cause per open figure: Holm's correction (it
   would exceed alone), a noise floor wider than the threshold (the CI's half-width exceeds the
   threshold's distance from no effect: `stop` is out of reach at this study's length), or a CI that
   straddles the threshold. With one or two runs: ``no-decision`` with that reason.

Reasons: two plain sentences (the verdict, and what would change it or why it holds), then details.

decision.parquet: one row per (mode, figure) with estimate, ci_low, ci_high, threshold, state
('exceeds', 'holds', 'inconclusive', 'no-interval', 'reported'), p-values, family, and on every row the
mode's verdict, the headline ``verdict`` and ``reason`` and ``rule_version``. Kernel recommendation
rows carry ``kernel`` and ``runs_agree``; ``policy_gain`` rows the policy x arm the runs selected most
(``selected_policy``, ``selected_fusion``: what the recommendation refits on a ``continue``). Rows
with ``decided`` false are reported, not decided on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import norm

from headroom.core import defaults
from headroom.decide import engine
from headroom.decide.figures import PROFILE, deployment_profile

VERDICTS = ("stop", "continue", "no-decision")
THRESHOLD_OF = {
    "gap_to_oracle": "max_gap_to_oracle_pct",
    "gap_to_oracle_same_run": "max_gap_to_oracle_pct",
    "policy_gain": "max_policy_gain_pct",
    "kernel_vs_best_unfused": "max_graph_fusion_speedup",
    "fusion_speedup": "max_graph_fusion_speedup",
    "fusion_speedup_sweep": "max_graph_fusion_speedup",
}
NULL_OF = {"fusion_speedup": 1.0}  # the figure's value with no effect (0 for the % figures)
WORDS = {
    "gap_to_oracle": "the global kernel's gap to the oracle",
    "policy_gain": "the best deployable policy's net gain over the better of global and phase-keyed",
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


def fusion_speedups(graph_sweep: pd.DataFrame | None, confidence: float | None = None) -> pd.DataFrame:
    """Unfused/fused speedup per (regime, mode, tile, shape_key[, run]) of the ok sweep rows, with
    intervals at ``confidence`` (left out: the default study's ``policies.confidence``)."""
    confidence = defaults.value("policies", "confidence") if confidence is None else confidence
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
    return engine.holm(np.asarray(pvalues, float), alpha)


def z_of(confidence: float) -> float:
    return float(norm.ppf(0.5 + confidence / 2.0))


def with_detectable_effects(table: pd.DataFrame, power: dict[str, dict]) -> pd.DataFrame:
    """Append one reported row per mode: the power statement of the policy figure, simulated on this
    study's own trace, noise and costs with effects planted between shape classes the deployable
    policies can learn (``simulate.detectable_effect``): what a `stop` here can rule out. The row is
    ``policy_gain_mde`` (its estimate the minimum detectable effect at 80% power) when some effect
    reaches that power, else ``policy_gain_no_mde`` (its estimate the largest effect tried; the detail
    says "no effect up to X% reaches 80% power (largest power seen P)"): never a bound called an MDE."""
    rows = []
    for mode, m in power.items():
        base = table[table["mode"] == mode]
        if base.empty:
            continue
        finite = bool(np.isfinite(m["mde_pct"]))
        row = base.iloc[0].to_dict()
        row.update(
            figure="policy_gain_mde" if finite else "policy_gain_no_mde",
            estimate=float(m["mde_pct"] if finite else m["up_to_pct"]),
            ci_low=math.nan,
            ci_high=math.nan,
            threshold=float(m["threshold_pct"]),
            state="reported",
            unit="%",
            se=math.nan,
            df=math.nan,
            decided=False,
            p_value=math.nan,
            detail=f"{m['text']}; {m['seeds']} simulated seeds, {m['runs']} runs, {m['invocations']} invocations",
        )
        rows.append(row)
    return pd.concat([table, pd.DataFrame(rows)], ignore_index=True) if rows else table


# ----------------------------------------------------------------------------------------------
# States, verdicts and reasons
# ----------------------------------------------------------------------------------------------


def _states(fig: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """p-values, Holm within each family (``engine.rule``) and each figure's state."""
    fig = fig.copy()
    fig["p_value"], fig["exceeds"] = np.nan, False
    for _, idx in fig[fig["decided"]].groupby("family").groups.items():
        rows = fig.loc[idx]
        out = engine.rule([_family_entry(r, r["threshold"]) for _, r in rows.iterrows()], alpha)
        fig.loc[idx, "p_value"] = out["p_value"][0]
        fig.loc[idx, "exceeds"] = out["exceeds"][0]
    state = np.where(~fig["decided"], "reported", "inconclusive").astype(object)
    state[(fig["decided"] & ~fig["ci_high"].notna()).to_numpy()] = "no-interval"
    high = np.array([_hold_high(r) for _, r in fig.iterrows()], dtype=float)
    state[(fig["decided"].to_numpy() & (high < fig["threshold"].to_numpy()))] = "holds"
    state[fig["exceeds"].to_numpy(bool)] = "exceeds"
    fig["state"] = state
    return fig


def _switch_verdicts(fig: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Each ``policy_gain_switch_<k>x`` row's detail gains its mode's verdict with the policy figure
    at that switch penalty (the mode's Holm family: the gap as decided, this policy figure)."""
    fig = fig.copy()
    for i in fig.index[fig["figure"].astype(str).str.startswith("policy_gain_switch_")]:
        r = fig.loc[i]
        rows = fig[(fig["family"] == r["family"]) & fig["decided"]]
        gap = rows[rows["figure"] == "gap_to_oracle"]
        if gap.empty or r["runs"] < 3:
            continue
        family = [
            _family_entry(gap.iloc[0], gap.iloc[0]["threshold"]),
            _family_entry(r, rows["threshold"].max()),
        ]
        verdict = engine.rule(family, alpha)["verdict"][0]
        fig.loc[i, "detail"] = f"{r['detail']}; the mode's verdict at it: {verdict}"
    return fig


def _family_entry(r, threshold: float) -> dict:
    return {
        "estimate": np.array([r["estimate"]]),
        "se": np.array([r["se"]]),
        "df": np.array([r["df"]]),
        "ci_high": np.array([_hold_high(r)]),
        "threshold": float(threshold),
    }


def _hold_high(r) -> float:
    """The upper CI end a decided figure needs below its threshold to hold: its bound's for a figure
    of ``engine.HOLD_BY`` (NaN, the bound without an upper end, never holds), else its own."""
    if r["figure"] in engine.HOLD_BY:
        return float(r.get("hold_high", np.nan))
    return float(r["ci_high"])


def _out_of_reach(r) -> bool:
    """The CI's half-width exceeds the threshold's distance from no effect: even a figure of exactly
    no effect would not hold, so `stop` is out of reach at this study's length."""
    half = (r["ci_high"] - r["ci_low"]) / 2.0
    return bool(np.isfinite(half) and half > abs(r["threshold"] - NULL_OF.get(r["figure"], 0.0)))


def _cause(r, alpha: float, m: int) -> str:
    """Why an open decided figure neither exceeds nor holds."""
    if np.isfinite(r["p_value"]) and r["p_value"] <= alpha:
        return (
            f"it would exceed alone (p = {r['p_value']:.3g}) but not after Holm's correction over {m} figures"
        )
    if _out_of_reach(r):
        half = (r["ci_high"] - r["ci_low"]) / 2.0
        return f"the noise floor (CI half-width {half:.3g}{r['unit']}) is wider than the threshold"
    return "its CI straddles the threshold"


def _family_verdict(rows: pd.DataFrame, device: str, alpha: float) -> tuple[str, str]:
    """(verdict, reason) of one family's rows (a mode, or the profile's parts)."""
    decided = rows[rows["decided"]]
    runs = int(rows["runs"].min()) if rows["runs"].notna().any() else 0
    if device != "cuda":
        return "no-decision", f"the timings are not GPU measurements (device: {device})"
    if runs < 2:
        return "no-decision", "one run: nothing scores the choices independently; record at least 3 runs"
    if runs < 3:
        return "no-decision", "two runs: run-to-run variance cannot be estimated; record at least 3 runs"
    if decided.empty:
        return "no-decision", "no figure could be measured"
    if (decided["state"] == "exceeds").any():
        names = decided[decided["state"] == "exceeds"]
        said = " and ".join(_describe(r) for _, r in names.iterrows())
        return "continue", f"{said}: it exceeds the threshold (Holm over {len(decided)} figures)"
    if (decided["state"] == "holds").all():
        return "stop", "every decided figure's CI lies below its threshold"
    open_ = decided[decided["state"] != "holds"]
    parts = [f"{_describe(r)}: {_cause(r, alpha, len(decided))}" for _, r in open_.iterrows()]
    return "no-decision", "; ".join(parts)


def _describe(r) -> str:
    where = f" ({r['mode']})" if r["family"] == PROFILE else ""
    thr = f", threshold {r['threshold']:g}{r['unit']}" if np.isfinite(r.get("threshold", np.nan)) else ""
    ci = format_ci(r["estimate"], r["ci_low"], r["ci_high"], r["unit"])
    return f"{WORDS.get(r['figure'], r['figure'])}{where} {ci}{thr}"


def _phase_note(rows: pd.DataFrame) -> str:
    """When the gap exceeds but the policy figure does not: does the phase split capture it? Said by
    the sign of phase-keyed's net gain over the global kernel (its CI above 0: it does)."""
    state = dict(zip(rows["figure"], rows["state"], strict=False))
    if state.get("gap_to_oracle") != "exceeds" or state.get("policy_gain") == "exceeds":
        return ""
    split = rows[rows["figure"] == "phase_split_gain"]
    if split.empty:
        return ""
    r = split.iloc[0]
    if np.isfinite(r["ci_low"]) and r["ci_low"] > 0:
        return f" A phase-keyed two-kernel rule (one candidate per phase) captures it: {_describe(r)}."
    if np.isfinite(r["ci_high"]) and r["ci_high"] < 0:
        return f" The phase split does not capture it (it loses to the global kernel: {_describe(r)})."
    return f" Whether the phase split captures it is open: {_describe(r)}."


@dataclass(frozen=True)
class Thresholds:
    """The decision section's thresholds (config ``decision:``; README "How the decision is made")."""

    max_gap_to_oracle_pct: float
    max_policy_gain_pct: float
    max_graph_fusion_speedup: float

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> Thresholds:
        """The default study's thresholds with those ``given`` over them; an unknown name is refused."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"decide() got unknown threshold(s) {unknown}; known: {names}")
        base = defaults.section("decision")
        return cls(**{n: given.get(n, base[n]) for n in names})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check(thresholds: dict, figures: pd.DataFrame, deployment) -> dict:
    for name, value in thresholds.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"decision.{name} must be a finite number, got {value!r}")
    need = ("mode", "figure", "estimate", "ci_low", "ci_high", "se", "df", "runs", "decided")
    missing = [c for c in need if c not in figures.columns]
    if missing:
        raise ValueError(f"figures: missing column(s) {missing}")
    deployment = deployment_profile(deployment)
    bad = {k: v for k, v in deployment.items() if v not in ("graph", "eager")}
    if bad:
        raise ValueError(f"decision.deployment: modes must be 'graph' or 'eager', got {bad}")
    return deployment


def decide(
    figures: pd.DataFrame,
    graph_sweep: pd.DataFrame | None,
    environment: pd.DataFrame | None,
    *,
    confidence: float | None = None,
    deployment: dict | None = None,
    **given: float,
) -> pd.DataFrame:
    """decision.parquet from the study's figures (``figures.study_figures``), sweep and environment.

    given: any of the decision thresholds (``Thresholds``); those left out, and a confidence left
    out, are the default study's (config ``decision:`` and ``policies.confidence``)."""
    thresholds = Thresholds.of(given).as_dict()
    confidence = defaults.value("policies", "confidence") if confidence is None else confidence
    deployment = _check(thresholds, figures, deployment)
    fig = pd.concat([figures, pd.DataFrame(_sweep_rows(graph_sweep, confidence))], ignore_index=True)
    fig["family"] = fig["family"].fillna(fig["mode"]) if "family" in fig else fig["mode"]
    fig["runs"] = fig.groupby("mode")["runs"].transform("max")
    fig["decided"] = fig["decided"].fillna(False).astype(bool)
    fig["threshold"] = [
        float(thresholds[THRESHOLD_OF[f]]) if f in THRESHOLD_OF else np.nan for f in fig["figure"]
    ]
    alpha = 1.0 - confidence
    fig = _states(fig, alpha)
    device = device_of(environment)
    measured = set(figures["family"] if "family" in figures else figures["mode"])
    verdicts = {
        fam: _family_verdict(rows, device, alpha)
        for fam, rows in fig.groupby("family", sort=True)
        if fam in measured
    }
    fig["mode_verdict"] = fig["family"].map(lambda m: verdicts.get(m, ("reported",))[0])
    fig["mode_reason"] = fig["family"].map(lambda m: verdicts.get(m, ("", "not timed by the portfolio"))[1])
    fig = _switch_verdicts(fig, alpha)
    verdict, reason = _headline(fig, verdicts, device, deployment)
    fig["verdict"], fig["reason"] = verdict, reason
    fig["device"], fig["confidence"] = device, float(confidence)
    fig["rule_version"] = engine.RULE_VERSION
    front = ["mode", "figure", "estimate", "ci_low", "ci_high", "threshold", "state", "verdict", "reason"]
    return fig[front + [c for c in fig.columns if c not in front]].drop(columns=["exceeds"])


WORD = {"stop": "Stop", "continue": "Continue", "no-decision": "No decision"}


def _unreachable(fig: pd.DataFrame) -> str:
    """'eager mode cannot reach `stop` at this study's length (...)' for the modes whose decided
    figures' noise floor is wider than their thresholds; '' when every mode can."""
    said = []
    for mode, rows in fig[fig["decided"] & (fig["family"] != PROFILE)].groupby("mode", sort=True):
        wide = [r for _, r in rows.iterrows() if _out_of_reach(r)]
        if wide:
            half = max((r["ci_high"] - r["ci_low"]) / 2.0 for r in wide)
            n = rows["invocations"].max() if "invocations" in rows else np.nan
            length = f"{int(n)} invocations" if np.isfinite(n) else "this study's length"
            said.append(f"{mode} mode cannot reach `stop` at {length} (CI half-width up to ±{half:.3g} pp)")
    return "; ".join(said)


def _headline(fig: pd.DataFrame, verdicts: dict, device: str, deployment: dict) -> tuple[str, str]:
    if device != "cuda":
        return (
            "no-decision",
            f"The timings are not GPU measurements (device: {device}), so no decision is drawn.",
        )
    if not verdicts:
        return "no-decision", "No decision: no figure could be measured."
    modes = {f: v for f, v in verdicts.items() if f != PROFILE}
    if PROFILE in verdicts:
        verdict, why = verdicts[PROFILE]
        scope = ", ".join(f"{step} steps in {mode} mode" for step, mode in deployment.items())
        scope = f" for the deployment profile ({scope})"
    else:
        vs = [v for v, _ in modes.values()]
        verdict = (
            "continue" if "continue" in vs else "stop" if all(v == "stop" for v in vs) else "no-decision"
        )
        why = "; ".join(r for v, r in modes.values() if v == verdict)
        missing = " and ".join(sorted(set(deployment.values()) - set(modes)))
        scope = f" over the timed modes (the deployment profile needs {missing} mode timed too)"
    unreach = _unreachable(fig)
    first = f"{WORD[verdict]}{scope}" + (f"; {unreach}" if unreach else "") + "."
    note = ""
    for m, (v, _) in modes.items():
        if v == "continue" and (n := _phase_note(fig[fig["family"] == m])):
            note += f" In {m} mode:{n}"
    per_mode = "; ".join(f"{m}: {v} ({r})" for m, (v, r) in modes.items())
    return verdict, f"{first} {why[0].upper() + why[1:]}. Per mode: {per_mode}.{note}"
