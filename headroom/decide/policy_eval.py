"""policy_eval.parquet and factorial.parquet: every registry policy scored per run x mode x fusion
arm, from the one estimator the decision uses (``headroom.decide.engine``).

A *policy* maps an invocation's shape to a candidate (base config x fused); each is one object of the
registry (``headroom.decide.registry``), fitted on the first ``train_fraction`` of a run's
invocations (in trace order, never shuffled) and scored on the rest. T, a policy's test latency, is
the weighted sum of the ``median_us`` of the candidates it picks on the test invocations (weights: the
trace's ``weight``, 1 unless the sampler stratified). Arms: ``off`` (our unfused candidates), ``on``
(the fused ones; attention: RoPE in the attention kernel) and ``free`` (every candidate that passed
correctness, the natives included where they compete: ``measured.ModeData.natives_compete``).
``random`` is scored as its expectation (the mean over the arm's candidates), ``oracle`` as the
per-invocation best of the arm (it needs the future). A family
with a config table also gets ``config-table`` rows (``registry.policies_of``): the table's fixed
choices, nearest-M lookup, scored as the others are and never selected.

Same-run figures (one row per run; the oracle chosen on the data it is scored on, so its gap is biased
up by the winner's curse):

    gain_vs_global_pct = 100 * (T_global - T_policy) / T_global      (global fitted in the same arm)
    gap_to_oracle_pct  = 100 * (T_policy - T_oracle) / T_oracle
    net_gain_pct       = the gain after each policy's lifecycle costs per invocation (``costs.charge``,
                         as the decision charges them)

with ``ci_low``/``ci_high`` (``gap_ci_*``, ``net_ci_*``) the percentile interval over that run's test
invocations (the decision's invocation resamples). Cross-run figures, the same on every run's row of a
(mode, policy, fusion): ``gap_cv_pct``, ``gain_cv_pct``, ``net_gain_cv_pct`` and the net gain over
category-keyed in the free arm (``NET_GAIN_VS_CATEGORY_CV``), each with ``*_ci_low``/``*_ci_high``:
fitted on run a, scored on run b, pooled over ordered pairs, the two-way bootstrap's interval
(``headroom.decide.interval``).

Selection (never on test): ``VALIDATION_NET_GAIN_VS_CATEGORY`` is a deployable policy's net gain over
category-keyed (free arm) on the validation slice inside the run's train; ``selected`` marks the
policy x arm the decision takes for that run (the best net gain over the better of global and
category-keyed there: ``engine.validation``). The factorial chooses from the validation column.
(Category-keyed and these columns are named in headroom.core.names.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.core.names import CATEGORY_KEYED, NET_GAIN_VS_CATEGORY_CV, VALIDATION_NET_GAIN_VS_CATEGORY
from headroom.decide import engine, interval, measured
from headroom.decide.costs import LifecycleCosts, charge, lifecycle_costs
from headroom.decide.measured import (
    FUSION_ARMS,
    TIMING_COLUMNS,
    TRACE_COLUMNS,
    ModeData,
    Options,
    checked_modes,
    in_arm,
)
from headroom.decide.registry import DEPLOYABLE, POLICIES, bucket_label, keyed_of
from headroom.policies.shapes import Keying

__all__ = [
    "DEPLOYABLE",
    "FUSION_ARMS",
    "POLICIES",
    "TIMING_COLUMNS",
    "TRACE_COLUMNS",
    "LifecycleCosts",
    "Options",
    "bucket_of",
    "checked_modes",
    "evaluate",
    "factorial",
    "in_arm",
    "lifecycle_costs",
]
CROSS = {
    # column stem: (numerator's pick, the pick it is a gain over / a gap to), as % of the second
    "gap_cv": lambda p, arm: (f"{p}@{arm}", f"oracle@{arm}", "gap"),
    "gain_cv": lambda p, arm: (f"global@{arm}", f"{p}@{arm}", "gross"),
    "net_gain_cv": lambda p, arm: (f"global@{arm}", f"{p}@{arm}", "net"),
    NET_GAIN_VS_CATEGORY_CV: lambda p, arm: (f"{CATEGORY_KEYED}@free", f"{p}@{arm}", "net"),
}


def bucket_of(features: pd.DataFrame, keying: Keying | None = None) -> np.ndarray:
    """Bucket label per invocation: its category values and the power-of-two ceilings of its numeric
    features under the family's ``keying`` (None: the built-in family's)."""
    return np.array([bucket_label(s, keying) for s in features.to_dict("records")])


def evaluate(
    trace: pd.DataFrame,
    timings: pd.DataFrame,
    lifecycle: pd.DataFrame | None = None,
    *,
    train_fraction: float = 0.5,
    seed: int = 0,
    calibration: pd.DataFrame | None = None,
    intermediate_ratio: float | None = None,
    keying: Keying | None = None,
    **options,
) -> pd.DataFrame:
    """One row per run x mode x policy x fusion arm with the policy_eval columns and the fitted facts
    behind them (the module docstring defines them). trace: DESIGN.md trace columns, one row per
    invocation. timings: portfolio rows (several runs; optional ``mode``, ``std_us``, ``reps``).
    lifecycle: lifecycle.parquet or None (no costs). calibration and intermediate_ratio: eager
    timings carry the host time the GPU does not hide (``measured.checked_modes``). keying: the
    family's keys (None: the built-in family's). options: see ``Options``."""
    opts, costs, modes = checked_modes(
        trace, timings, lifecycle, train_fraction, options, calibration, intermediate_ratio, keying
    )
    rows = []
    for md in modes:
        rows += mode_rows(md, costs, opts, train_fraction, seed)
    out = pd.DataFrame(rows)
    if out.empty:
        raise ValueError("timings: no rows to evaluate")
    out["clusters"] = out["clusters"].astype("Int64")
    return out


def _picks(L: engine.Layout, b: engine.Batch, md: ModeData) -> dict:
    """{'<policy>@<arm>': (choice, charge) (1, R, n_test)} of every policy in every arm; random as
    (None, charge, its expected latency per run)."""
    ut = b.us[:, :, L.n_train :]
    category, plan, _ = engine._test_view(L, b)
    picks = {}
    for arm, cols in L.cols.items():
        for p in keyed_of(md.keying):
            picks[f"{p}@{arm}"] = engine.fit(L, b, "train", p, arm)
        oracle = cols[np.argmin(ut[..., cols], axis=-1)]
        picks[f"oracle@{arm}"] = (oracle, _charge(L, oracle, category, plan, "oracle"))
        picks[f"random@{arm}"] = (None, _random_charge(L, cols, category, plan), ut[..., cols].mean(-1))
    return picks


def _charge(L, choice, category, plan, policy, compile_us=None):
    dispatch = L.dispatch.get(policy, max(L.dispatch.values()))
    compile_us = L.compile_us if compile_us is None else compile_us
    return charge(choice, category[:, None], plan[:, None], dispatch, L.switch_us, compile_us)


def _random_charge(L, cols, category, plan) -> np.ndarray:
    """random's expected charge per invocation: its lookup, a switch on each within-category step
    with probability 1 - 1/C, the arm's mean plan build, every candidate of the arm compiled."""
    C = len(cols)
    same = np.concatenate([[False], category[0, 1:] == category[0, :-1]])
    per = L.dispatch["random"] + L.switch_us * (1 - 1 / C) * same + plan[0][:, cols].mean(-1)
    return (per + L.compile_us[cols].sum())[None, None]


def mode_rows(md: ModeData, costs: LifecycleCosts, opts: Options, train_fraction: float, seed: int) -> list:
    n = md.us.shape[1]
    n_train, _ = measured.split(n, train_fraction, opts.validation_fraction)
    if n_train < 1 or n - n_train < 1:
        raise ValueError(
            f"timings (mode {md.mode}): {n} invocation(s) cannot be split with train_fraction={train_fraction}"
        )
    L = engine.layout(md, opts, costs, train_fraction, seed, every=True)
    b = engine.Batch(md.us[None], md.sem2[None])
    R = len(md.runs)
    picks = _picks(L, b, md)
    for name, (ch, co, *rest) in list(picks.items()):
        if ch is None:
            picks[name] = (None, np.broadcast_to(co, (1, R, co.shape[-1])), *rest)
    cross = _cross(L, b, picks, md)
    order = [(p, a) for a in L.cols for p in L.deployable]
    val = engine.validation(L, b, order)
    rows = []
    for r in range(R):
        same = _same_run(L, b, picks, md, r)
        for arm in L.cols:
            for policy in L.policies:
                row = {"run": md.runs[r], "mode": md.mode, "policy": policy, "fusion": arm}
                row.update(same[(policy, arm)])
                row.update(_facts(L, md, picks, policy, arm, r, costs, opts))
                row[VALIDATION_NET_GAIN_VS_CATEGORY] = _validation_gain(val, order, policy, arm, r)
                row["selected"] = bool(order) and order[int(val["selected"][0, r])] == (policy, arm)
                row.update(cross[(policy, arm)])
                rows.append(row)
    return rows


def _validation_gain(val, order, policy, arm, r) -> float:
    if val["nets"] is None or (policy, arm) not in order:
        return np.nan
    keyed = val["base_nets"][0, r, engine.BASELINES.index(CATEGORY_KEYED)]
    return float(100.0 * (keyed - val["nets"][0, r, order.index((policy, arm))]) / keyed)


def _latency(L, b, pick, r):
    """(test latency per invocation on run r, charge per invocation) of a pick."""
    ch, co = pick[:2]
    ut = b.us[0, r, L.n_train :]
    lat = pick[2][0, r] if ch is None else ut[np.arange(len(ut)), ch[0, r]]
    return lat, co[0, min(r, co.shape[1] - 1)]


def _same_run(L, b, picks, md, r) -> dict:
    """{(policy, arm): the same-run figures of run r with their percentile intervals}."""
    w = L.weight[L.n_train :]
    boot = L.boot * w  # (B, n): each resample's weights
    out = {}
    for arm in L.cols:
        lat = {p: _latency(L, b, picks[f"{p}@{arm}"], r) for p in L.policies}
        T = {p: float((v * w).sum()) for p, (v, _) in lat.items()}
        TB = {p: boot @ v for p, (v, _) in lat.items()}
        NET = {p: float(((v + c) * w).sum() / w.sum()) for p, (v, c) in lat.items()}
        NB = {p: (boot @ (v + c)) / boot.sum(axis=1) for p, (v, c) in lat.items()}
        for p in L.policies:
            gain = 100.0 * (TB["global"] - TB[p]) / TB["global"]
            gap = 100.0 * (TB[p] - TB["oracle"]) / TB["oracle"]
            net = 100.0 * (NB["global"] - NB[p]) / NB["global"]
            row = {
                "test_us": T[p],
                "gain_vs_global_pct": 100.0 * (T["global"] - T[p]) / T["global"],
                "gap_to_oracle_pct": 100.0 * (T[p] - T["oracle"]) / T["oracle"],
                "net_gain_pct": 100.0 * (NET["global"] - NET[p]) / NET["global"],
            }
            for stem, x in (("ci", gain), ("gap_ci", gap), ("net_ci", net)):
                lo, hi = interval.percentile(x[None], L.confidence)
                row[f"{stem}_low"], row[f"{stem}_high"] = float(lo[0]), float(hi[0])
            out[(p, arm)] = row
    return out


def _facts(L, md, picks, policy, arm, r, costs, opts) -> dict:
    """The fitted facts behind a row: what it used, what it costs, how the CI was made."""
    cols = L.cols[arm]
    ch, co = picks[f"{policy}@{arm}"][:2]
    category = L.category[L.n_train :]
    same = category[1:] == category[:-1]
    if ch is None:  # random: every candidate of the arm, an expected switch count
        used = [md.names[c] for c in cols]
        switches = float(same.sum() * (1 - 1 / len(cols)))
    else:
        seq = ch[0, r]
        used = sorted({md.names[c] for c in np.unique(seq)})
        switches = float(np.count_nonzero((seq[1:] != seq[:-1]) & same))
    w = L.weight[L.n_train :]
    compile_us = np.array([costs.compile_s.get(c, 0.0) for c in md.names]) * 1e6 / opts.deployment_invocations
    per = co[0, min(r, co.shape[1] - 1)]
    running = per - sum(compile_us[md.names.index(c)] for c in used)
    _, basis = costs.dispatch_for(policy)
    if md.mode == "graph":  # the lookup runs once, when the graph is captured for a shape
        basis = "captured into the graph"
    method = (
        "percentile bootstrap over the run's test invocations (gap_ci_*: gap_to_oracle_pct, net_ci_*: "
        f"net_gain_pct), {L.boot.shape[0]} resamples within step kinds; cross-run *_cv: two-way bootstrap "
        "over runs and test invocations"
    )
    global_choice = picks[f"global@{arm}"][0][0, r, 0]
    return {
        "confidence": opts.confidence,
        "ci_method": method,
        "deployable": policy != "oracle",
        "train_invocations": L.n_train,
        "test_invocations": L.n - L.n_train,
        "arm_candidates": len(cols),
        "global_candidate": md.names[int(global_choice)],
        "candidates_used": ",".join(used),
        "switches": switches,
        "clusters": L.keys[("train", "clustered")].k if policy == "clustered" else pd.NA,
        "cost_per_invocation_us": float((per * w).sum() / w.sum()),
        "running_cost_us": float((running * w).sum() / w.sum()),
        "deployment_invocations": opts.deployment_invocations,
        "dispatch_basis": basis,
        "compile_s": sum(costs.compile_s.get(c, 0.0) for c in used),
        "cache_bytes": sum(costs.cache_bytes.get(c, 0.0) for c in used),
        "dropped_candidates": ",".join(map(str, md.dropped)),
    }


def _cross(L, b, picks, md) -> dict:
    """{(policy, arm): cross-run columns}, from the engine's pair scoring and interval."""
    figure_specs = {}
    for arm in L.cols:
        for policy in L.policies:
            for stem, make in CROSS.items():
                a, c, kind = make(policy, arm)
                if kind == "gap":
                    fn = engine._pct(lambda G, N, a=a: G[a], lambda G, N, c=c: G[c], lambda G, N, c=c: G[c])
                else:
                    key = "G" if kind == "gross" else "N"

                    def get(k, key=key):
                        return (lambda G, N: G[k]) if key == "G" else (lambda G, N: N[k])

                    fn = engine._pct(get(a), get(c), get(a))
                figure_specs[f"{stem}|{policy}|{arm}"] = (fn, None)
    if len(md.runs) < 2:  # no pair of runs: no cross-run figure
        nan = {f"{stem}{x}": np.nan for stem in CROSS for x in ("_pct", "_ci_low", "_ci_high")}
        return {(p, a): dict(nan) for a in L.cols for p in L.policies}
    f = engine.score(L, b, picks, figure_specs)
    out = {}
    for name in figure_specs:
        stem, policy, arm = name.split("|")
        cols = out.setdefault((policy, arm), {})
        cols[f"{stem}_pct"] = float(f[name][0])
        cols[f"{stem}_ci_low"] = float(f[name + "_lo"][0])
        cols[f"{stem}_ci_high"] = float(f[name + "_hi"][0])
    return out


# ----------------------------------------------------------------------------------------------
# Policy x fusion factorial
# ----------------------------------------------------------------------------------------------


FACTORIAL_SELECTION = VALIDATION_NET_GAIN_VS_CATEGORY


def factorial(policy_eval: pd.DataFrame) -> pd.DataFrame:
    """The 2x2 {global, best deployable policy} x {unfused, fused}, per run (and mode).

    The best deployable policy is chosen as the decision chooses, never on the test split it is scored
    on: the one of ``DEPLOYABLE`` with the largest mean ``FACTORIAL_SELECTION`` over the
    off and on arms (its net gain on the validation slice inside train; ties, or a train too short to
    hold a validation slice, keep the first of ``DEPLOYABLE``). All gains are percentages of the
    global-unfused test latency A; with B = global fused, C = policy unfused, D = policy fused:
    policy_gain_pct = 100 (A-C)/A, fusion_gain_pct = 100 (A-B)/A, combined_gain_pct = 100 (A-D)/A,
    interaction_pct = combined - policy - fusion. fusion_speedup = A/B. A (run, mode) without both
    an unfused and a fused arm gets a row with status 'skipped' and the reason.
    """
    measured.check_columns(
        policy_eval,
        ("run", "policy", "fusion", "test_us", "gain_vs_global_pct", FACTORIAL_SELECTION),
        "policy_eval",
    )
    pe = policy_eval if "mode" in policy_eval.columns else policy_eval.assign(mode="eager")
    rows = []
    for (run, mode), group in pe.groupby(["run", "mode"], sort=True):
        arms = set(group["fusion"])
        if not {"off", "on"} <= arms:
            reason = f"the factorial needs fusion arms 'off' and 'on'; only {sorted(arms)} have admitted candidates"
            rows.append({"run": run, "mode": mode, "policy": "", "status": "skipped", "reason": reason})
            continue
        cell = group.set_index(["policy", "fusion"])
        rows.append({"run": run, "mode": mode, **_factorial_cell(cell, _factorial_policy(cell, run, mode))})
    return pd.DataFrame(rows)


def _factorial_policy(cell: pd.DataFrame, run, mode) -> str:
    """The deployable policy with the best mean validation figure over the off and on arms."""
    score = {
        p: np.nan_to_num(cell.loc[[(p, "off"), (p, "on")], FACTORIAL_SELECTION].mean(), nan=0.0)
        for p in DEPLOYABLE
        if (p, "off") in cell.index and (p, "on") in cell.index
    }
    if not score:
        raise ValueError(f"policy_eval (run {run}, mode {mode}): no deployable policy rows")
    return max(score, key=lambda p: (score[p], -DEPLOYABLE.index(p)))


def _factorial_cell(cell: pd.DataFrame, best: str) -> dict:
    a = float(cell.loc[("global", "off"), "test_us"])
    b = float(cell.loc[("global", "on"), "test_us"])
    c = float(cell.loc[(best, "off"), "test_us"])
    d = float(cell.loc[(best, "on"), "test_us"])
    policy_gain, fusion_gain, combined = (100.0 * (a - x) / a for x in (c, b, d))
    return {
        "policy": best,
        "global_unfused_us": a,
        "global_fused_us": b,
        "policy_unfused_us": c,
        "policy_fused_us": d,
        "policy_gain_pct": policy_gain,
        "fusion_gain_pct": fusion_gain,
        "combined_gain_pct": combined,
        "interaction_pct": combined - policy_gain - fusion_gain,
        "policy_gain_fused_pct": 100.0 * (b - d) / b,
        "fusion_speedup": a / b,
        "status": "ok",
        "reason": "",
    }
