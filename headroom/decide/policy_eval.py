"""Dispatch policies scored on a chronological train/test split of the trace.

A *policy* maps an invocation's shape to a candidate (tile x fused); each is one object of the
registry (``headroom.decide.registry``), fitted on the first ``train_fraction`` of a run's
invocations (in trace order, never shuffled) and scored on the rest. T, a policy's test latency, is
the summed ``median_us`` of the candidates it picks on the test invocations. Every figure is computed
per mode (when timings carry ``mode``) and per fusion arm: ``off`` (our unfused candidates only),
``on`` (fused only) and ``free`` (all of ours). When the timings hold native candidates (``backend``
other than 'triton', e.g. torch SDPA), they enter only a fourth arm, ``native``: ours and the native
ones together, so the report can say whether a materially different candidate set changes the headroom.

Same-run figures (one row per run; v1, kept to show the winner's curse):

    gain_vs_global_pct = 100 * (T_global - T_policy) / T_global      (global fitted in the same arm)
    gap_to_oracle_pct  = 100 * (T_policy - T_oracle) / T_oracle     (oracle: argmin of the test split)
    net_gain_pct       = gain after each policy's lifecycle costs, per invocation (``costs.charge``,
                         as the decision charges them): dispatch lookup + the switching penalty on
                         each change of candidate within a phase (beyond what the global kernel
                         pays) + each shape's own plan build per call (eager) + compile time of the
                         candidates it uses amortized over ``deployment_invocations``. In graph mode
                         the lookup is paid once at capture, so replays pay none.

``ci_low``/``ci_high`` are the percentile bootstrap CI (level ``confidence``) of
``gain_vs_global_pct`` over test invocations of that run (``gap_ci_*``, ``net_ci_*``: the same
resamples for the other two figures); they ignore run-to-run variance.

Cross-run figures (v2, the primary estimators; see ``headroom.decide.measured``), the same on every
run's row of a (mode, policy, fusion): ``gap_cv_pct``, ``gain_cv_pct``, ``net_gain_cv_pct`` and
``net_gain_vs_phase_cv_pct`` (net gain over phase-keyed in the free arm), each with ``*_ci_low`` and
``*_ci_high``: fitted on run a, scored on run b, pooled over ordered pairs, CI from a jackknife over
runs plus a test-invocation bootstrap with t on runs - 1 degrees of freedom. With one or two runs
they are NaN (no independent score, or no run variance to estimate).

Selection (never on test): ``validation_net_gain_vs_phase_pct`` is a deployable policy's net gain over
phase-keyed (free arm) on the validation slice inside the run's train (fitted on the part before it);
``selected`` marks the policy x arm the decision takes for that run. The factorial chooses from the
same column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headroom.decide import measured
from headroom.decide.costs import LifecycleCosts, lifecycle_costs
from headroom.decide.measured import (
    FUSION_ARMS,
    NATIVE_ARM,
    TIMING_COLUMNS,
    TRACE_COLUMNS,
    ModeData,
    Options,
    RunFits,
    in_arm,
)
from headroom.decide.registry import DEPLOYABLE, POLICIES, bucket_label

__all__ = [
    "DEPLOYABLE",
    "FUSION_ARMS",
    "NATIVE_ARM",
    "POLICIES",
    "TIMING_COLUMNS",
    "TRACE_COLUMNS",
    "LifecycleCosts",
    "Options",
    "bucket_of",
    "evaluate",
    "factorial",
    "fit_mode",
    "in_arm",
    "lifecycle_costs",
]


def bucket_of(features: pd.DataFrame) -> np.ndarray:
    """Bucket label per invocation: phase and power-of-two ceilings of q_len, kv_len and batch."""
    return np.array([bucket_label(s) for s in features.to_dict("records")])


def _check_columns(df: pd.DataFrame, required, name: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; see DESIGN.md 'Required columns'")


def _percentiles(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _check_inputs(trace, timings, train_fraction) -> None:
    if not isinstance(train_fraction, int | float) or not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction!r}")
    _check_columns(trace, TRACE_COLUMNS, "trace")
    _check_columns(timings, TIMING_COLUMNS, "timings")
    if trace["invocation"].duplicated().any():
        raise ValueError("trace: invocation must be unique (one row per invocation)")
    unknown = sorted(set(timings["invocation"]) - set(trace["invocation"]))
    if unknown:
        raise ValueError(f"timings: invocation(s) {unknown[:5]} are not in the trace")


def fit_mode(md: ModeData, costs: LifecycleCosts, opts: Options, train_fraction: float, seed: int):
    """(n_train, fits per run) of one mode: every policy fitted on each run's train."""
    n = md.us.shape[1]
    n_train, n_fit = measured.split(n, train_fraction, opts.validation_fraction)
    if n_train < 1 or n - n_train < 1:
        raise ValueError(
            f"timings (mode {md.mode}): {n} invocation(s) cannot be split with train_fraction={train_fraction}"
        )
    ctx = {"costs": costs, "opts": opts, "seed": seed}
    return n_train, [measured.fit_run(md, r, n_train, n_fit, ctx) for r in range(len(md.runs))]


def checked_modes(trace, timings, lifecycle, train_fraction: float, options: dict):
    """Check the inputs; (opts, the lifecycle's costs, each mode's ModeData)."""
    opts = Options.from_mapping(options)
    _check_inputs(trace, timings, train_fraction)
    return opts, lifecycle_costs(lifecycle), measured.mode_data(trace, timings)


def fitted_modes(trace, timings, lifecycle, train_fraction: float, seed: int, options: dict):
    """Check the inputs, then per mode of the timings: (opts, its ModeData, n_train, each run's fits),
    with ``options`` read into ``Options`` and the lifecycle's costs charged."""
    opts, costs, modes = checked_modes(trace, timings, lifecycle, train_fraction, options)
    for md in modes:
        n_train, fits = fit_mode(md, costs, opts, train_fraction, seed)
        yield opts, md, n_train, fits


def evaluate(
    trace: pd.DataFrame,
    timings: pd.DataFrame,
    lifecycle: pd.DataFrame | None = None,
    *,
    train_fraction: float = 0.5,
    seed: int = 0,
    **options,
) -> pd.DataFrame:
    """Score every policy per run x mode x fusion arm, same-run and cross-run.

    trace: DESIGN.md trace columns, one row per invocation. timings: portfolio rows (several runs
    allowed; optional ``mode``, ``std_us``, ``reps``). lifecycle: lifecycle.parquet or None (no
    costs). options: see ``Options``. Returns one row per run x mode x policy x fusion arm with the
    policy_eval columns plus the fitted facts behind them (see module docstring for definitions).
    """
    rows = []
    for opts, md, n_train, fits in fitted_modes(trace, timings, lifecycle, train_fraction, seed, options):
        cross = _cross_columns(md, fits, n_train, opts, seed)
        for r in range(len(md.runs)):
            rows += _same_run_rows(md, fits[r], r, n_train, opts, seed, cross)
    out = pd.DataFrame(rows)
    if out.empty:
        raise ValueError("timings: no rows to evaluate")
    out["clusters"] = out["clusters"].astype("Int64")
    return out


def _same_run_rows(md: ModeData, rf: RunFits, r: int, n_train: int, opts, seed, cross) -> list[dict]:
    us = md.us[r][n_train:]
    n_test = us.shape[0]
    boot = measured.group_seed(seed, md.runs[r], md.mode).integers(
        0, n_test, size=(opts.bootstrap_resamples, n_test)
    )
    method = (
        "percentile bootstrap of gain_vs_global_pct (gap_ci_*: gap_to_oracle_pct, net_ci_*: net_gain_pct) "
        f"over {n_test} test invocations, {opts.bootstrap_resamples} paired resamples"
    )
    rows = []
    for arm, arm_fits in rf.test.items():
        lat = {p: measured.latency(us, f) for p, f in arm_fits.items()}
        boot_sum = {p: v[boot].sum(axis=1) for p, v in lat.items()}
        t = {p: float(v.sum()) for p, v in lat.items()}
        g, o = arm_fits["global"], "oracle"

        def net(total, policy, arm_fits=arm_fits):
            return total / n_test + arm_fits[policy].cost_us

        for policy, fit in arm_fits.items():
            gain = 100.0 * (boot_sum["global"] - boot_sum[policy]) / boot_sum["global"]
            gap = 100.0 * (boot_sum[policy] - boot_sum[o]) / boot_sum[o]
            net_boot = 100.0 * (net(boot_sum["global"], "global") - net(boot_sum[policy], policy))
            net_boot = net_boot / net(boot_sum["global"], "global")
            row = {
                "run": md.runs[r],
                "mode": md.mode,
                "policy": policy,
                "fusion": arm,
                "test_us": t[policy],
                "gain_vs_global_pct": 100.0 * (t["global"] - t[policy]) / t["global"],
                "gap_to_oracle_pct": 100.0 * (t[policy] - t[o]) / t[o],
                "net_gain_pct": 100.0
                * (net(t["global"], "global") - net(t[policy], policy))
                / net(t["global"], "global"),
            }
            row.update(zip(("ci_low", "ci_high"), _percentiles(gain, opts.confidence), strict=True))
            row.update(zip(("gap_ci_low", "gap_ci_high"), _percentiles(gap, opts.confidence), strict=True))
            row.update(
                zip(("net_ci_low", "net_ci_high"), _percentiles(net_boot, opts.confidence), strict=True)
            )
            row.update(_facts(md, fit, g, arm, n_train, n_test, opts, method))
            row["validation_net_gain_vs_phase_pct"] = rf.validation.get((policy, arm), np.nan)
            row["selected"] = (policy, arm) == rf.selected
            row.update(cross[(policy, arm)])
            rows.append(row)
    return rows


def _facts(md, fit, g, arm, n_train, n_test, opts, method) -> dict:
    """The fitted facts behind a row: what it used, what it costs, how the CI was made."""
    return {
        "confidence": opts.confidence,
        "ci_method": method,
        "deployable": fit.policy != "oracle",
        "train_invocations": n_train,
        "test_invocations": n_test,
        "arm_candidates": len(md.arm_cols(arm)),
        "global_candidate": md.names[int(g.choice[0])],
        "candidates_used": ",".join(fit.used),
        "switches": fit.switches,
        "clusters": fit.fitted.k if fit.policy == "clustered" else pd.NA,
        "cost_per_invocation_us": fit.cost_us,
        "running_cost_us": fit.running_us,
        "deployment_invocations": opts.deployment_invocations,
        "dispatch_basis": fit.basis,
        "compile_s": fit.compile_s,
        "cache_bytes": fit.cache_bytes,
        "dropped_candidates": ",".join(map(str, md.dropped)),
    }


CROSS_FIGURES = {
    # column stem: (figure function, the two fits it reads: (policy, arm) -> name in the figure)
    "gap_cv": lambda p: (measured.gap_pct(p), {p: None, "oracle": None}),
    "gain_cv": lambda p: (measured.gain_pct(p), {p: None, "global": None}),
    "net_gain_cv": lambda p: (measured.gain_pct(p, net=True), {p: None, "global": None}),
    "net_gain_vs_phase_cv": lambda p: (
        measured.gain_pct(p, "phase@free", net=True),
        {p: None, "phase@free": None},
    ),
}


def _cross_columns(md: ModeData, fits: list[RunFits], n_train: int, opts, seed) -> dict:
    """{(policy, arm): cross-run columns}, pooled over ordered pairs of runs."""
    n_test = md.us.shape[1] - n_train
    boot = measured.boot_indices(n_test, opts.bootstrap_resamples, measured.group_seed(seed, md.mode, "cv"))
    out = {}
    for arm in md.arms():
        for policy in POLICIES:
            cols = {}
            for stem, make in CROSS_FIGURES.items():
                figure, names = make(policy)

                def pick(name, arm=arm):
                    return lambda rf: (
                        rf.test["free"]["phase-keyed"] if name == "phase@free" else rf.test[arm][name],
                        None,
                    )

                pairs = measured.pair_vectors(md, fits, {name: pick(name) for name in names}, n_train)
                e = measured.pooled(pairs, figure, boot, opts.confidence) if pairs else None
                cols[f"{stem}_pct"] = e.estimate if e else np.nan
                cols[f"{stem}_ci_low"] = e.ci_low if e else np.nan
                cols[f"{stem}_ci_high"] = e.ci_high if e else np.nan
            out[(policy, arm)] = cols
    return out


# ----------------------------------------------------------------------------------------------
# Policy x fusion factorial
# ----------------------------------------------------------------------------------------------


FACTORIAL_SELECTION = "validation_net_gain_vs_phase_pct"


def factorial(policy_eval: pd.DataFrame) -> pd.DataFrame:
    """The 2x2 {global, best deployable policy} x {unfused, fused}, per run (and mode).

    The best deployable policy is chosen as the decision chooses, never on the test split it is scored
    on: the one of ``DEPLOYABLE`` with the largest mean ``validation_net_gain_vs_phase_pct`` over the
    off and on arms (its net gain on the validation slice inside train; ties, or a train too short to
    hold a validation slice, keep the first of ``DEPLOYABLE``). All gains are percentages of the
    global-unfused test latency A; with B = global fused, C = policy unfused, D = policy fused:
    policy_gain_pct = 100 (A-C)/A, fusion_gain_pct = 100 (A-B)/A, combined_gain_pct = 100 (A-D)/A,
    interaction_pct = combined - policy - fusion. fusion_speedup = A/B. A (run, mode) without both
    an unfused and a fused arm gets a row with status 'skipped' and the reason.
    """
    _check_columns(
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
            rows.append({"run": run, "mode": mode, "status": "skipped", "reason": reason})
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
