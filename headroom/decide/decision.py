"""decision.parquet: the rule (``headroom.decide.rule``, ``RULE_VERSION``) applied to the study's
figures (``headroom.decide.figures``), per mode and per part of the deployment profile, and the
headline verdict.

One row per (mode, figure) with estimate, ci_low, ci_high (the two-way bootstrap's percentile
interval), threshold, state ('exceeds', 'holds', 'straddles', 'noise-floor', 'no-interval' for a
decided figure; 'reported' for every other row), p_value (the bootstrap's one-sided p-value of "at
or below its threshold"), family, decided, and on every row: the mode's verdict, reason and reason
code (``mode_verdict``, ``mode_reason``, ``mode_reason_code``), the headline ``verdict``, ``reason``
and ``reason_code``, ``rule_version``. Kernel recommendation rows carry ``kernel`` and
``runs_agree``; ``policy_gain`` rows the policy x arm the runs selected most (``selected_policy``,
``selected_fusion``: what the recommendation refits on a ``continue``).

Families: each mode is decided alone, and so is each part of the deployment profile (config
``decision.deployment``: step kind -> mode; its parts ``<mode>@<step kind>``, family ``profile``; a
kernel family captured by a feature has the fixed parts ``graph@captured`` and ``eager@uncaptured``,
``figures.deployment_profile``). The
headline is the profile's (``rule.headline``): continue when a decided part continues, stop when
every decided part stops, the parts that a precondition leaves undecided named; without a profile (a
mode it names was not timed), the timed modes combine the same way. With two parts, each continuing
at one-sided level (1 - confidence) / 2, the headline continues on a flat surface at most at level 1
- confidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import ndtri  # the normal quantile (scipy.stats.norm.ppf is ndtri)

from headroom.core import defaults
from headroom.core.format import signed_range
from headroom.core.names import (
    BASE_CONFIG,
    CATEGORY_SPLIT_GAIN,
    MADE_OF_BASE_WITHIN_CATEGORY,
    MADE_OF_FUSION_WITHIN_CATEGORY,
)
from headroom.decide import rule
from headroom.decide.figures import deployment_profile, profile_words
from headroom.decide.words import NO_PART_DECIDED, VERDICT_WORD, Words
from headroom.decide.words import of as words_of
from headroom.policies.shapes import Keying

VERDICTS = rule.VERDICTS
THRESHOLD_OF = rule.THRESHOLD_OF
NULL_OF = rule.NULL_OF


def z_of(confidence: float) -> float:
    return float(ndtri(0.5 + confidence / 2.0))


def device_of(environment: pd.DataFrame | None) -> str:
    """'cuda', 'interpret' or 'unknown' (no environment, or no device column)."""
    if environment is None or environment.empty or "device" not in environment.columns:
        return "unknown"
    devices = sorted(set(environment["device"].astype(str)))
    return devices[0] if len(devices) == 1 else "mixed(" + ",".join(devices) + ")"


def fusion_speedups(graph_sweep: pd.DataFrame | None, confidence: float | None = None) -> pd.DataFrame:
    """Unfused/fused speedup per (regime, mode, base config, shape_key[, run]) of the ok sweep rows
    (the sweep times one base config fused and unfused: ``BASE_CONFIG``), with intervals at
    ``confidence`` (left out: the default study's ``policies.confidence``)."""
    confidence = defaults.value("policies", "confidence") if confidence is None else confidence
    cols = [
        "regime",
        "working_set_bytes",
        "mode",
        BASE_CONFIG,
        "shape_key",
        "speedup",
        "ci_low",
        "ci_high",
        "ci_basis",
    ]
    if graph_sweep is None or graph_sweep.empty:
        return pd.DataFrame(columns=cols)
    required = ("regime", "mode", "fused", BASE_CONFIG, "shape_key", "median_us", "status")
    missing = [c for c in required if c not in graph_sweep.columns]
    if missing:
        raise ValueError(f"graph_sweep: missing column(s) {missing}")
    ok = graph_sweep[graph_sweep["status"].astype(str) == "ok"]
    keys = [k for k in ("run", "regime", "mode", BASE_CONFIG, "shape_key") if k in ok.columns]
    z = float(ndtri(0.5 + confidence / 2.0))
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
                f"{signed_range(g['speedup'], 'x')}; interval: the rows' CIs' envelope",
            }
        )
    return rows


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


@dataclass(frozen=True)
class Thresholds:
    """The decision section's numbers (config ``decision:``; README "How the decision is made")."""

    max_gap_to_oracle_pct: float
    max_policy_gain_pct: float
    max_graph_fusion_speedup: float
    min_test_invocations: int

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> Thresholds:
        """The default study's numbers with those ``given`` over them; an unknown name is refused."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise TypeError(f"decide() got unknown threshold(s) {unknown}; known: {names}")
        base = defaults.section("decision")
        out = cls(**{n: given.get(n, base[n]) for n in names})
        for name, value in out.as_dict().items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"decision.{name} must be a finite number, got {value!r}")
        return out

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check(figures: pd.DataFrame, deployment, keying: Keying | None = None) -> dict:
    need = ("mode", "figure", "estimate", "ci_low", "ci_high", "runs", "decided")
    missing = [c for c in need if c not in figures.columns]
    if missing:
        raise ValueError(f"figures: missing column(s) {missing}")
    deployment = deployment_profile(deployment, keying)
    bad = {k: v for k, v in deployment.items() if v not in ("graph", "eager")}
    if bad:
        raise ValueError(f"decision.deployment: modes must be 'graph' or 'eager', got {bad}")
    return deployment


def figure_row(rows: pd.DataFrame, name: str) -> dict:
    """{'estimate', 'ci_low', 'ci_high', ...} of the rows' figure ``name`` ({} when they have none)."""
    hit = rows[rows["figure"] == name]
    return hit.iloc[0].to_dict() if len(hit) else {}


def pure_category_split(rows: pd.DataFrame, gap_threshold: float) -> bool:
    """One candidate per category beats the global one net of costs (its interval above 0) and the
    gap left within the categories is below the gap threshold: the headroom is a category split, one
    candidate per category takes it (attention: a kernel for prefill and one for decode)."""
    split = figure_row(rows, CATEGORY_SPLIT_GAIN)
    within = [
        figure_row(rows, f).get("estimate", np.nan)
        for f in (MADE_OF_FUSION_WITHIN_CATEGORY, MADE_OF_BASE_WITHIN_CATEGORY)
    ]
    low = split.get("ci_low", np.nan)
    return bool(np.isfinite(low) and low > 0 and np.isfinite(within).all() and sum(within) < gap_threshold)


def _unit(rows: pd.DataFrame, device: str, thr: dict, words: Words) -> tuple[str, str, str, dict]:
    """(verdict, reason code, reason, figure -> state) of one decided unit (a mode or a part)."""
    decided = rows[rows["decided"]]
    test = int(rows["test_invocations"].min()) if "test_invocations" in rows else 10**9
    host = bool(rows.get("host_included", pd.Series([False])).fillna(False).astype(bool).any())
    runs = int(rows["runs"].max()) if rows["runs"].notna().any() else 0
    code = rule.precondition(device, runs, test, int(thr["min_test_invocations"]), host)
    if code:
        return "no-decision", code, words.reason(code, n=test, minimum=int(thr["min_test_invocations"])), {}
    if set(decided["figure"]) != set(rule.DECIDED):
        return "no-decision", "no-interval", "the decided figures could not be measured", {}
    by = decided.set_index("figure")
    figs = {f"{f}_lo": by.loc[[f], "ci_low"].to_numpy(float) for f in rule.DECIDED}
    figs.update({f"{f}_hi": by.loc[[f], "ci_high"].to_numpy(float) for f in rule.DECIDED})
    figs["gap_to_oracle_bound_hi"] = by.loc[["gap_to_oracle"], "hold_high"].to_numpy(float)
    gap_threshold = float(thr["max_gap_to_oracle_pct"])
    split = pure_category_split(rows, gap_threshold)
    out = rule.family(figs, {f: float(thr[rule.THRESHOLD_OF[f]]) for f in rule.DECIDED}, split)
    state = {f: str(out[f"{f}_state"][0]) for f in rule.DECIDED}
    verdict, code = str(out["verdict"][0]), str(out["reason_code"][0])
    return verdict, code, _unit_reason(by, state, code, words), state


def _sentence(code: str, state: dict, words: Words) -> str:
    """The reason code's sentence, naming the open figure (the policy figure's if it is open)."""
    open_figure = "policy_gain" if state.get("policy_gain") not in ("holds", "exceeds") else "gap_to_oracle"
    return words.reason(code, figure=open_figure)


def _unit_reason(by: pd.DataFrame, state: dict, code: str, words: Words) -> str:
    """The unit's reason: the sentence of its code, then the decided figures as measured."""
    said = _sentence(code, state, words)
    figures = "; ".join(
        f"{words.describe(by.loc[f].to_dict() | {'figure': f})}: {state[f]}" for f in rule.DECIDED
    )
    return f"{said} ({figures})"


def _states(fig: pd.DataFrame, units: dict) -> pd.DataFrame:
    """Each row's state, and each unit's verdict, reason code and reason on its rows."""
    fig = fig.copy()
    fig["state"] = "reported"
    for unit, (v, code, why, state) in units.items():
        rows = fig["mode"] == unit
        if code in rule.PRECONDITIONS:
            fig.loc[rows, "decided"] = False
        for f, s in state.items():
            fig.loc[rows & (fig["figure"] == f), "state"] = s
        fig.loc[rows, ["mode_verdict", "mode_reason_code", "mode_reason"]] = (v, code, why)
    return fig


def _switch_verdicts(fig: pd.DataFrame, thr: dict) -> pd.DataFrame:
    """Each ``policy_gain_switch_<k>x`` row's detail gains its mode's verdict with the policy figure
    at that switch penalty (the gap as decided)."""
    fig = fig.copy()
    for i in fig.index[fig["figure"].astype(str).str.startswith("policy_gain_switch_")]:
        r = fig.loc[i]
        gap = fig[(fig["mode"] == r["mode"]) & (fig["figure"] == "gap_to_oracle") & fig["decided"]]
        if gap.empty:
            continue
        g = gap.iloc[0]
        figs = {
            "gap_to_oracle_lo": np.array([g["ci_low"]]),
            "gap_to_oracle_hi": np.array([g["ci_high"]]),
            "gap_to_oracle_bound_hi": np.array([g["hold_high"]]),
            "policy_gain_lo": np.array([r["ci_low"]]),
            "policy_gain_hi": np.array([r["ci_high"]]),
        }
        out = rule.family(figs, {f: float(thr[rule.THRESHOLD_OF[f]]) for f in rule.DECIDED})
        fig.loc[i, "detail"] = f"{r['detail']}; the mode's verdict at it: {out['verdict'][0]}"
    return fig


def decide(
    figures: pd.DataFrame,
    graph_sweep: pd.DataFrame | None,
    environment: pd.DataFrame | None,
    *,
    confidence: float | None = None,
    deployment: dict | None = None,
    keying: Keying | None = None,
    **given: float,
) -> pd.DataFrame:
    """decision.parquet from the study's figures (``figures.study_figures``), sweep and environment.

    given: any of the decision's numbers (``Thresholds``); those left out, and a confidence left out,
    are the default study's (config ``decision:`` and ``policies.confidence``). keying: the family's
    keys, whose words the reasons say (``headroom.decide.words.of``; None: the built-in family's),
    and whose ``captured_by`` fixes the deployment profile (``figures.deployment_profile``)."""
    words = words_of(keying)
    thr = Thresholds.of(given).as_dict()
    confidence = defaults.value("policies", "confidence") if confidence is None else confidence
    deployment = _check(figures, deployment, keying)
    fig = pd.concat([figures, pd.DataFrame(_sweep_rows(graph_sweep, confidence))], ignore_index=True)
    fig["family"] = fig["family"].fillna(fig["mode"]) if "family" in fig else fig["mode"]
    fig["decided"] = fig["decided"].fillna(False).astype(bool)
    fig["threshold"] = [float(thr[THRESHOLD_OF[f]]) if f in THRESHOLD_OF else np.nan for f in fig["figure"]]
    device = device_of(environment)
    measured = [m for m in dict.fromkeys(figures["mode"]) if (fig["mode"] == m).any()]
    units = {m: _unit(fig[fig["mode"] == m], device, thr, words) for m in measured}
    fig = _states(fig, units)
    fig["mode_verdict"] = fig["mode_verdict"].fillna("reported")
    fig["mode_reason_code"] = fig["mode_reason_code"].fillna("")
    fig["mode_reason"] = fig["mode_reason"].fillna("not timed by the portfolio")
    fig = _switch_verdicts(fig, thr)
    verdict, code, reason = _headline(fig, units, device, deployment, words, keying)
    fig["verdict"], fig["reason_code"], fig["reason"] = verdict, code, reason
    fig["device"], fig["confidence"] = device, float(confidence)
    fig["min_test_invocations"] = int(thr["min_test_invocations"])
    fig["rule_version"] = rule.RULE_VERSION
    front = ["mode", "figure", "estimate", "ci_low", "ci_high", "threshold", "state", "verdict", "reason"]
    return fig[front + [c for c in fig.columns if c not in front]]


def _headline(
    fig: pd.DataFrame, units: dict, device: str, deployment: dict, words: Words, keying: Keying | None = None
) -> tuple[str, str, str]:
    if device != "cuda":
        return (
            "no-decision",
            "not-gpu",
            f"No decision: the timings are not GPU measurements (device: {device}).",
        )
    parts = {u: vw for u, vw in units.items() if "@" in u}
    if parts:
        scope = f"for the deployment profile ({profile_words(keying, deployment)})"
    else:
        parts = {u: vw for u, vw in units.items() if "@" not in u}
        missing = " and ".join(sorted(set(deployment.values()) - set(parts)))
        scope = f"over the timed modes (the deployment profile needs {missing} mode timed too)"
    if not parts:
        return "no-decision", "no-interval", "No decision: no figure could be measured."
    verdict, code, left_out = rule.headline({u: (v, c) for u, (v, c, _, _) in parts.items()})
    open_ = [(c, st) for u, (v, c, _, st) in parts.items() if v == "no-decision" and u not in left_out]
    if verdict == "no-decision" and open_:
        said = _sentence(*open_[0], words)
    elif verdict == "no-decision" and left_out:  # each part's own numbers are in its sentence below
        said = NO_PART_DECIDED
    else:
        said = words.reason(code)
    first = f"{VERDICT_WORD[verdict]} {scope}: {said}"
    if left_out:
        first += "; not decided: " + ", ".join(f"{u} ({parts[u][1]})" for u in left_out)
    first += "."
    per = " ".join(f"{u}: {v}, {why}." for u, (v, _, why, _) in parts.items())
    return verdict, code, f"{first} Per part: {per}"
