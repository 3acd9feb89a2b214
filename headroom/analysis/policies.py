"""Dispatch policies scored on a chronological train/test split of the trace.

A *policy* maps an invocation's shape to a candidate (tile x fused). Each policy is fitted on the
first ``train_fraction`` of a run's invocations (in trace order, never shuffled) and scored on the
rest. T, a policy's test latency, is the summed ``median_us`` of the candidates it picks on the test
invocations. Every figure is computed per run, per mode (when timings carry ``mode``) and per fusion
arm: ``off`` (our unfused candidates only), ``on`` (fused only) and ``free`` (all of ours). When the
timings hold native candidates (``backend`` other than 'triton', e.g. torch SDPA), they enter only a
fourth arm, ``native``: ours and the native ones together, so the report can say whether a
materially different candidate set changes the headroom.

    gain_vs_global_pct = 100 * (T_global - T_policy) / T_global      (global fitted in the same arm)
    gap_to_oracle_pct  = 100 * (T_policy - T_oracle) / T_oracle
    net_gain_pct       = gain after each policy's lifecycle costs (see ``lifecycle_costs``), per
                         invocation: dispatch lookup + switching penalty x switch rate + compile time
                         of the candidates it uses amortized over ``deployment_invocations``. In
                         graph mode the lookup is paid once at capture, so replays pay none.

``ci_low``/``ci_high`` are the percentile bootstrap CI (level ``confidence``) of
``gain_vs_global_pct``, resampling test invocations with replacement (paired: one resample is applied
to every policy); ``gap_ci_*`` and ``net_ci_*`` are the same resamples applied to the other two
figures. The fitted policies are held fixed, so the CIs cover test-set sampling, not refitting.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd
from scipy.stats import norm
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from headroom.core.contracts import TRACE_COLUMNS

POLICIES = ("global", "exact-key", "bucketed", "clustered", "regret-aware", "random", "oracle")
# Policies a serving system could ship that adapt to shape; `random` is deployable but a baseline,
# `oracle` needs the future. "Best deployable policy" always means the best of these.
DEPLOYABLE = ("exact-key", "bucketed", "clustered", "regret-aware")
FUSION_ARMS = ("off", "on", "free")
NATIVE_ARM = "native"


def in_arm(arm: str, fused: bool, native: bool) -> bool:
    """Whether a candidate takes part in a fusion arm (native candidates only in ``native``)."""
    if arm == NATIVE_ARM:
        return True
    if native:
        return False
    return arm == "free" or fused == (arm == "on")


TIMING_COLUMNS = ("run", "invocation", "candidate", "fused", "median_us")
# Features the k-means of `clustered` sees, log2-scaled (phase enters as 0/1).
CLUSTER_FEATURES = ("batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim")


@dataclass(frozen=True)
class Options:
    """Tunables of ``evaluate``; the keys of config ``policies:`` besides train_fraction and seed."""

    clusters: int = 4  # k of `clustered`; capped by the number of distinct train shapes
    random_draws: int = 200  # seeded draws averaged by `random`
    bootstrap_resamples: int = 2000  # resamples of test invocations per (run, mode)
    confidence: float = 0.95  # two-sided CI level; `regret-aware` uses its one-sided z
    deployment_invocations: int = 1_000_000  # horizon over which compile time is amortized

    @classmethod
    def from_mapping(cls, options: Mapping) -> Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"options: unknown key(s) {unknown}; known: {sorted(known)}")
        opts = cls(**options)
        for name in ("clusters", "random_draws", "bootstrap_resamples", "deployment_invocations"):
            value = getattr(opts, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"options.{name} must be a positive integer, got {value!r}")
        if not 0.5 < float(opts.confidence) < 1.0:
            raise ValueError(f"options.confidence must be in (0.5, 1), got {opts.confidence!r}")
        return opts


# ----------------------------------------------------------------------------------------------
# Lifecycle costs. The one place that knows the lifecycle.parquet layouts we accept.
# ----------------------------------------------------------------------------------------------

_TIME_TO_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "µs": 1.0, "ns": 1e-3}
_SIZE_TO_BYTES = {"bytes": 1.0, "b": 1.0, "kib": 1024.0, "mib": 1024.0**2}


@dataclass(frozen=True)
class LifecycleCosts:
    """What owning a portfolio costs, in the units the policy figures need.

    compile_s: cold compile seconds per candidate; cache_bytes: on-disk cache per candidate;
    dispatch_us: per-lookup overhead per policy name; switch_us: penalty of running a different
    candidate than the previous invocation did (median over all switch rows), switch_us_by_mode:
    the same per mode when the rows carry one. Negative switch penalties (alternating faster than
    repeating: noise) are charged as 0, so noise never pays for an adaptive policy.
    """

    compile_s: dict[str, float] = field(default_factory=dict)
    cache_bytes: dict[str, float] = field(default_factory=dict)
    dispatch_us: dict[str, float] = field(default_factory=dict)
    switch_us: float = 0.0
    switch_us_by_mode: dict[str, float] = field(default_factory=dict)
    measured: bool = False

    def switch_for(self, mode: str) -> float:
        return self.switch_us_by_mode.get(mode, self.switch_us)

    def dispatch_for(self, policy: str) -> tuple[float, str]:
        """Dispatch µs for a policy and how it was obtained (unmeasured kinds take the dearest)."""
        if policy in self.dispatch_us:
            return self.dispatch_us[policy], "measured"
        if not self.dispatch_us:
            return 0.0, "not measured (0 charged)"
        if policy == "global":
            return 0.0, "not measured; global needs no lookup (0 charged)"
        dearest = max(self.dispatch_us.values())
        return dearest, "not measured; charged the dearest measured lookup"


def _unit_factor(unit: object, table: dict[str, float], what: str) -> float:
    key = str(unit).strip().lower() if unit is not None and not pd.isna(unit) else ""
    table = {k.lower(): v for k, v in table.items()}
    if key not in table:
        raise ValueError(
            f"lifecycle: unit {unit!r} of {what} rows not understood; use one of {sorted(table)}"
        )
    return table[key]


def lifecycle_costs(lifecycle: pd.DataFrame | None) -> LifecycleCosts:
    """Parse lifecycle.parquet into ``LifecycleCosts``. None means no costs (all zero).

    Accepted layouts (both may be mixed in one table):

    * long: columns ``kind`` in {compile, cache, dispatch, switch}, ``value``, ``unit`` and
      ``candidate`` (compile, cache) or ``policy`` (dispatch). Units: compile s|ms, cache bytes|KiB|MiB,
      dispatch and switch ns|us|ms|s. A missing ``unit`` means s, bytes, ns, us respectively.
    * wide: columns ``candidate``, ``compile_s``, ``cache_bytes``; optional per-row ``policy`` with
      ``dispatch_ns`` or ``dispatch_us``; optional ``switch_us`` (the median of non-null values is used).
    """
    if lifecycle is None:
        return LifecycleCosts()
    if not isinstance(lifecycle, pd.DataFrame):
        raise ValueError(f"lifecycle must be a pandas DataFrame or None, got {type(lifecycle).__name__}")
    compile_s: dict[str, float] = {}
    cache_bytes: dict[str, float] = {}
    dispatch_us: dict[str, float] = {}
    switches: list[tuple[str, float]] = []  # (mode or "", µs)
    df = lifecycle
    if "status" in df.columns:
        df = df[df["status"].isna() | (df["status"].astype(str) == "ok")]

    if "kind" in df.columns and "value" in df.columns:
        kinds = df["kind"].astype(str).str.lower()
        unknown = sorted(set(kinds) - {"compile", "cache", "dispatch", "switch"})
        if unknown:
            raise ValueError(
                f"lifecycle: unknown kind(s) {unknown}; expected compile, cache, dispatch, switch"
            )
        units = df["unit"] if "unit" in df.columns else pd.Series([None] * len(df), index=df.index)
        for kind, default_unit in (
            ("compile", "s"),
            ("cache", "bytes"),
            ("dispatch", "ns"),
            ("switch", "us"),
        ):
            rows = df[kinds == kind]
            for idx, row in rows.iterrows():
                unit = (
                    units.loc[idx]
                    if units.loc[idx] is not None and not pd.isna(units.loc[idx])
                    else default_unit
                )
                value = float(row["value"])
                if not math.isfinite(value):
                    continue
                if kind == "compile":
                    compile_s[str(row["candidate"])] = value * _unit_factor(unit, _TIME_TO_US, kind) / 1e6
                elif kind == "cache":
                    cache_bytes[str(row["candidate"])] = value * _unit_factor(unit, _SIZE_TO_BYTES, kind)
                elif kind == "dispatch":
                    if "policy" not in df.columns or pd.isna(row["policy"]):
                        raise ValueError("lifecycle: a dispatch row needs a `policy` naming the lookup kind")
                    dispatch_us[str(row["policy"])] = value * _unit_factor(unit, _TIME_TO_US, kind)
                else:
                    mode = row["mode"] if "mode" in df.columns and pd.notna(row["mode"]) else ""
                    switches.append((str(mode), value * _unit_factor(unit, _TIME_TO_US, kind)))
    else:
        if "candidate" in df.columns:
            for col, target in (("compile_s", compile_s), ("cache_bytes", cache_bytes)):
                if col in df.columns:
                    for cand, value in zip(df["candidate"], df[col], strict=True):
                        if pd.notna(cand) and pd.notna(value):
                            target[str(cand)] = float(value)
        for col, factor in (("dispatch_ns", 1e-3), ("dispatch_us", 1.0)):
            if col in df.columns:
                if "policy" not in df.columns:
                    raise ValueError(
                        f"lifecycle: column {col} needs a `policy` column naming the lookup kind"
                    )
                for pol, value in zip(df["policy"], df[col], strict=True):
                    if pd.notna(pol) and pd.notna(value):
                        dispatch_us[str(pol)] = float(value) * factor
        if "switch_us" in df.columns:
            modes = df["mode"] if "mode" in df.columns else pd.Series([""] * len(df), index=df.index)
            for mode, value in zip(modes, df["switch_us"], strict=True):
                if pd.notna(value):
                    switches.append((str(mode) if pd.notna(mode) else "", float(value)))
    switch_us = max(0.0, float(np.median([v for _, v in switches]))) if switches else 0.0
    by_mode = {
        mode: max(0.0, float(np.median([v for m, v in switches if m == mode])))
        for mode in {m for m, _ in switches if m}
    }
    return LifecycleCosts(compile_s, cache_bytes, dispatch_us, switch_us, by_mode, measured=True)


# ----------------------------------------------------------------------------------------------
# Fitting: each fit returns, for every test invocation, the chosen column of the arm's matrix.
# ----------------------------------------------------------------------------------------------


def _best_per_group(groups: np.ndarray, train_us: np.ndarray, fallback: int) -> dict:
    """Column with the least summed train latency per group; ties keep `fallback` (no switch)."""
    best = {}
    for g in pd.unique(groups):
        sums = train_us[groups == g].sum(axis=0)
        col = int(np.argmin(sums))
        best[g] = fallback if sums[fallback] <= sums[col] else col
    return best


def _apply(best: dict, groups: np.ndarray, fallback: int) -> np.ndarray:
    return np.array([best.get(g, fallback) for g in groups], dtype=np.int64)


def _pow2_ceil(values: pd.Series) -> np.ndarray:
    v = np.maximum(values.to_numpy(dtype=np.float64), 1.0)
    return (2 ** np.ceil(np.log2(v))).astype(np.int64)


def bucket_of(features: pd.DataFrame) -> np.ndarray:
    """Bucket label per invocation: phase and power-of-two ceilings of q_len, kv_len and batch."""
    return np.array(
        [
            f"{p}|q{q}|kv{k}|b{b}"
            for p, q, k, b in zip(
                features["phase"].astype(str),
                _pow2_ceil(features["q_len"]),
                _pow2_ceil(features["kv_len"]),
                _pow2_ceil(features["batch"]),
                strict=True,
            )
        ]
    )


def _cluster_matrix(features: pd.DataFrame) -> np.ndarray:
    cols = [np.log2(np.maximum(features[c].to_numpy(dtype=np.float64), 1.0)) for c in CLUSTER_FEATURES]
    cols.append((features["phase"].astype(str) == "prefill").to_numpy(dtype=np.float64))
    return np.column_stack(cols)


def _clusters(train_feat, test_feat, k, seed) -> tuple[np.ndarray, np.ndarray, int]:
    """k-means labels of train and test invocations on standardized log-scaled shape features."""
    x_train = _cluster_matrix(train_feat)
    x_test = _cluster_matrix(test_feat)
    mean = x_train.mean(axis=0)
    std = x_train.std(axis=0)
    std[std == 0] = 1.0  # a constant feature carries no distance
    x_train = (x_train - mean) / std
    x_test = (x_test - mean) / std
    # fit on the distinct shapes weighted by their train counts: same objective, far fewer points
    distinct, inverse, counts = np.unique(x_train, axis=0, return_inverse=True, return_counts=True)
    k = max(1, min(k, len(distinct)))
    # one thread: a handful of points, where OpenMP start-up costs 10x the fit itself
    with threadpool_limits(1):
        model = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(distinct, sample_weight=counts)
    return model.labels_[inverse.ravel()], model.predict(x_test), k


def _fit_regret_aware(keys_train, keys_test, train_us, train_sem2, fallback, z, cost_us) -> np.ndarray:
    """Deviate from global for a key only when the lower confidence bound of the per-invocation
    gain exceeds the cost of deviating (dispatch lookup + a switch, charged on every invocation).

    gain d_i = t_global,i - t_best,i over the key's train invocations; its standard error combines
    the timing noise of each median (std_us^2 / reps of both candidates) and the spread of d across
    the key's invocations (std(d)/sqrt(n), when n >= 2).
    """
    best = {}
    for key in pd.unique(keys_train):
        rows = keys_train == key
        sums = train_us[rows].sum(axis=0)
        col = int(np.argmin(sums))
        if col == fallback or sums[fallback] <= sums[col]:
            continue
        d = train_us[rows, fallback] - train_us[rows, col]
        n = len(d)
        se2 = (train_sem2[rows, fallback] + train_sem2[rows, col]).sum() / n**2
        if n >= 2:
            se2 += d.var(ddof=1) / n
        lcb = d.mean() - z * math.sqrt(se2)
        if lcb > cost_us:
            best[key] = col
    return _apply(best, keys_test, fallback)


# ----------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------


def _check_columns(df: pd.DataFrame, required, name: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {missing}; see DESIGN.md 'Required columns'")


def _group_seed(seed: int, *labels) -> np.random.Generator:
    key = zlib.crc32("|".join(map(str, labels)).encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), key]))


def _switches(choice: np.ndarray) -> int:
    return int(np.count_nonzero(choice[1:] != choice[:-1]))


def _percentiles(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(boot, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _complete_matrix(group: pd.DataFrame, label: str) -> tuple[pd.DataFrame, dict, list[str]]:
    """Invocation x candidate matrices; candidates not timed on every invocation are dropped."""
    dup = group.duplicated(["invocation", "candidate"])
    if dup.any():
        first = group.loc[dup, ["invocation", "candidate"]].iloc[0].tolist()
        raise ValueError(f"timings ({label}): duplicate (invocation, candidate) row {first}")
    med = group.pivot(index="invocation", columns="candidate", values="median_us").sort_index()
    complete = [c for c in med.columns if med[c].notna().all()]
    dropped = sorted(set(med.columns) - set(complete))
    med = med[complete]
    if med.empty or not complete:
        raise ValueError(f"timings ({label}): no candidate is timed on every invocation")
    if (med.to_numpy() <= 0).any():
        raise ValueError(f"timings ({label}): median_us must be positive")
    if {"std_us", "reps"} <= set(group.columns):
        std = group.pivot(index="invocation", columns="candidate", values="std_us").loc[med.index, complete]
        reps = group.pivot(index="invocation", columns="candidate", values="reps").loc[med.index, complete]
        sem2 = (std.fillna(0.0).to_numpy(dtype=np.float64) ** 2) / np.maximum(
            reps.fillna(1).to_numpy(np.float64), 1
        )
    else:
        sem2 = np.zeros(med.shape)
    first = group.drop_duplicates("candidate").set_index("candidate")
    fused = first["fused"].astype(bool).to_dict()
    backend = first["backend"] if "backend" in first.columns else pd.Series("triton", index=first.index)
    native = {c: str(b) != "triton" for c, b in backend.items()}
    return med, {"sem2": sem2, "fused": fused, "native": native}, dropped


def evaluate(
    trace: pd.DataFrame,
    timings: pd.DataFrame,
    lifecycle: pd.DataFrame | None = None,
    *,
    train_fraction: float = 0.5,
    seed: int = 0,
    **options,
) -> pd.DataFrame:
    """Score the seven policies per run (x mode) x fusion arm on a chronological split.

    trace: DESIGN.md trace columns, one row per invocation. timings: portfolio rows (several runs
    allowed; optional ``mode``, ``std_us``, ``reps``). lifecycle: lifecycle.parquet or None (no
    costs). options: see ``Options``. Returns one row per run x mode x policy x fusion arm with the
    policy_eval columns plus the fitted facts behind them (see module docstring for definitions).
    """
    opts = Options.from_mapping(options)
    if not isinstance(train_fraction, int | float) or not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction!r}")
    _check_columns(trace, TRACE_COLUMNS, "trace")
    _check_columns(timings, TIMING_COLUMNS, "timings")
    if trace["invocation"].duplicated().any():
        raise ValueError("trace: invocation must be unique (one row per invocation)")
    costs = lifecycle_costs(lifecycle)
    z = float(norm.ppf(opts.confidence))
    features = trace.set_index("invocation")
    timings = timings.copy()
    if "mode" not in timings.columns:
        timings["mode"] = "eager"
    unknown = sorted(set(timings["invocation"]) - set(features.index))
    if unknown:
        raise ValueError(f"timings: invocation(s) {unknown[:5]} are not in the trace")

    rows = []
    cluster_cache: dict = {}
    for (run, mode), group in timings.groupby(["run", "mode"], sort=True):
        label = f"run {run}, mode {mode}"
        med, extra, dropped = _complete_matrix(group, label)
        invocations = med.index.to_numpy()
        n = len(invocations)
        n_train = int(math.floor(n * float(train_fraction)))
        if n_train < 1 or n - n_train < 1:
            raise ValueError(
                f"timings ({label}): {n} invocation(s) cannot be split with train_fraction={train_fraction}"
            )
        feat = features.loc[invocations]
        train_feat, test_feat = feat.iloc[:n_train], feat.iloc[n_train:]
        keys_train = train_feat["shape_key"].astype(str).to_numpy()
        keys_test = test_feat["shape_key"].astype(str).to_numpy()
        buckets = bucket_of(feat)
        candidates = list(med.columns)
        all_us = med.to_numpy(dtype=np.float64)
        n_test = n - n_train
        ci_method = (
            f"percentile bootstrap of gain_vs_global_pct (gap_ci_*: gap_to_oracle_pct, net_ci_*: net_gain_pct) "
            f"over {n - n_train} test invocations, {opts.bootstrap_resamples} paired resamples"
        )
        rng = _group_seed(seed, run, mode)
        boot_idx = rng.integers(0, n_test, size=(opts.bootstrap_resamples, n_test))
        split = (tuple(invocations[:n_train]), tuple(invocations[n_train:]))
        if split not in cluster_cache:  # runs share the trace: fit once per split
            cluster_cache[split] = _clusters(train_feat, test_feat, opts.clusters, seed)
        labels_train, labels_test, k_used = cluster_cache[split]

        arms = FUSION_ARMS + ((NATIVE_ARM,) if any(extra["native"][c] for c in candidates) else ())
        for arm in arms:
            cols = [i for i, c in enumerate(candidates) if in_arm(arm, extra["fused"][c], extra["native"][c])]
            if not cols:
                continue
            names = [candidates[i] for i in cols]
            us = all_us[:, cols]
            sem2 = extra["sem2"][:, cols]
            train_us, test_us = us[:n_train], us[n_train:]
            g = int(np.argmin(train_us.sum(axis=0)))

            choices: dict[str, np.ndarray] = {}
            choices["global"] = np.full(n_test, g)
            choices["exact-key"] = _apply(_best_per_group(keys_train, train_us, g), keys_test, g)
            choices["bucketed"] = _apply(
                _best_per_group(buckets[:n_train], train_us, g), buckets[n_train:], g
            )
            choices["clustered"] = _apply(_best_per_group(labels_train, train_us, g), labels_test, g)
            switch_us = costs.switch_for(str(mode))
            regret_cost = (0.0 if mode == "graph" else costs.dispatch_for("regret-aware")[0]) + switch_us
            choices["regret-aware"] = _fit_regret_aware(
                keys_train, keys_test, train_us, sem2[:n_train], g, z, regret_cost
            )
            choices["oracle"] = np.argmin(test_us, axis=1)
            draws = _group_seed(seed, run, mode, arm, "random").integers(
                0, len(cols), size=(opts.random_draws, n_test)
            )

            latency = {p: test_us[np.arange(n_test), c] for p, c in choices.items()}
            latency["random"] = test_us[np.arange(n_test)[None, :], draws].mean(axis=0)
            switches = {p: float(_switches(c)) for p, c in choices.items()}
            switches["random"] = float(np.mean([_switches(d) for d in draws]))
            used = {p: sorted({names[i] for i in c}) for p, c in choices.items()}
            used["random"] = sorted(names)

            # per-invocation µs: `running` is paid on every call (lookup + switching at the test
            # rate), `cost` adds the compile time of the candidates used, amortized over deployment
            running, cost, basis, compile_s = {}, {}, {}, {}
            for policy in POLICIES:
                dispatch, basis[policy] = costs.dispatch_for(policy)
                if mode == "graph":
                    # Under CUDA Graph replay the lookup runs once, when the graph is captured for a
                    # shape; replays pay no dispatch. Switching between kernels is still paid.
                    dispatch, basis[policy] = 0.0, "captured into the graph"
                running[policy] = dispatch + switch_us * switches[policy] / n_test
                compile_s[policy] = sum(costs.compile_s.get(c, 0.0) for c in used[policy])
                cost[policy] = running[policy] + compile_s[policy] * 1e6 / opts.deployment_invocations

            boot_sum = {p: latency[p][boot_idx].sum(axis=1) for p in POLICIES}
            t = {p: float(latency[p].sum()) for p in POLICIES}
            net_global = t["global"] / n_test + cost["global"]
            boot_net_global = boot_sum["global"] / n_test + cost["global"]
            for policy in POLICIES:
                net = t[policy] / n_test + cost[policy]
                gain_boot = 100.0 * (boot_sum["global"] - boot_sum[policy]) / boot_sum["global"]
                gap_boot = 100.0 * (boot_sum[policy] - boot_sum["oracle"]) / boot_sum["oracle"]
                net_boot = (
                    100.0 * (boot_net_global - (boot_sum[policy] / n_test + cost[policy])) / boot_net_global
                )
                ci_low, ci_high = _percentiles(gain_boot, opts.confidence)
                gap_lo, gap_hi = _percentiles(gap_boot, opts.confidence)
                net_lo, net_hi = _percentiles(net_boot, opts.confidence)
                rows.append(
                    {
                        "run": run,
                        "mode": mode,
                        "policy": policy,
                        "fusion": arm,
                        "test_us": t[policy],
                        "gain_vs_global_pct": 100.0 * (t["global"] - t[policy]) / t["global"],
                        "gap_to_oracle_pct": 100.0 * (t[policy] - t["oracle"]) / t["oracle"],
                        "net_gain_pct": 100.0 * (net_global - net) / net_global,
                        "ci_low": ci_low,
                        "ci_high": ci_high,
                        "gap_ci_low": gap_lo,
                        "gap_ci_high": gap_hi,
                        "net_ci_low": net_lo,
                        "net_ci_high": net_hi,
                        "confidence": opts.confidence,
                        "ci_method": ci_method,
                        "deployable": policy in DEPLOYABLE or policy in ("global", "random"),
                        "train_invocations": n_train,
                        "test_invocations": n_test,
                        "arm_candidates": len(cols),
                        "global_candidate": names[g],
                        "candidates_used": ",".join(used[policy]),
                        "switches": switches[policy],
                        "clusters": k_used if policy == "clustered" else pd.NA,
                        "cost_per_invocation_us": cost[policy],
                        "running_cost_us": running[policy],
                        "deployment_invocations": opts.deployment_invocations,
                        "dispatch_basis": basis[policy],
                        "compile_s": compile_s[policy],
                        "cache_bytes": sum(costs.cache_bytes.get(c, 0.0) for c in used[policy]),
                        "dropped_candidates": ",".join(map(str, dropped)),
                    }
                )
    out = pd.DataFrame(rows)
    if out.empty:
        raise ValueError("timings: no rows to evaluate")
    out["clusters"] = out["clusters"].astype("Int64")
    return out


# ----------------------------------------------------------------------------------------------
# Policy x fusion factorial
# ----------------------------------------------------------------------------------------------


def factorial(policy_eval: pd.DataFrame) -> pd.DataFrame:
    """The 2x2 {global, best deployable policy} x {unfused, fused}, per run (and mode).

    The best deployable policy is the one of ``DEPLOYABLE`` with the largest mean
    ``gain_vs_global_pct`` over the off and on arms (chosen on test: an upper bound on policy gain).
    All gains are percentages of the global-unfused test latency A; with B = global fused,
    C = policy unfused, D = policy fused:
    policy_gain_pct = 100 (A-C)/A, fusion_gain_pct = 100 (A-B)/A, combined_gain_pct = 100 (A-D)/A,
    interaction_pct = combined - policy - fusion. fusion_speedup = A/B. A (run, mode) without both
    an unfused and a fused arm gets a row with status 'skipped' and the reason.
    """
    _check_columns(policy_eval, ("run", "policy", "fusion", "test_us", "gain_vs_global_pct"), "policy_eval")
    pe = policy_eval.copy()
    if "mode" not in pe.columns:
        pe["mode"] = "eager"
    rows = []
    for (run, mode), group in pe.groupby(["run", "mode"], sort=True):
        cell = group.set_index(["policy", "fusion"])
        arms = set(group["fusion"])
        if not {"off", "on"} <= arms:
            rows.append(
                {
                    "run": run,
                    "mode": mode,
                    "status": "skipped",
                    "reason": f"the factorial needs fusion arms 'off' and 'on'; only {sorted(arms)} have "
                    "admitted candidates",
                }
            )
            continue
        mean_gain = {
            p: cell.loc[[(p, "off"), (p, "on")], "gain_vs_global_pct"].mean()
            for p in DEPLOYABLE
            if (p, "off") in cell.index and (p, "on") in cell.index
        }
        if not mean_gain:
            raise ValueError(f"policy_eval (run {run}, mode {mode}): no deployable policy rows")
        best = max(mean_gain, key=lambda p: (mean_gain[p], -DEPLOYABLE.index(p)))
        a = float(cell.loc[("global", "off"), "test_us"])
        b = float(cell.loc[("global", "on"), "test_us"])
        c = float(cell.loc[(best, "off"), "test_us"])
        d = float(cell.loc[(best, "on"), "test_us"])
        policy_gain = 100.0 * (a - c) / a
        fusion_gain = 100.0 * (a - b) / a
        combined = 100.0 * (a - d) / a
        rows.append(
            {
                "run": run,
                "mode": mode,
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
        )
    return pd.DataFrame(rows)
