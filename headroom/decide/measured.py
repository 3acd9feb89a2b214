"""Fitting every policy per run and scoring it on another run: the estimators the decision stands on.

A study's mode holds R runs of the same trace: ``us[r, i, c]`` is run r's median µs of candidate c on
invocation i. The first ``train_fraction`` of the invocations (trace order) train, the rest test.

* **Same-run** figures (v1): fit on run a's train, let the oracle choose on run a's test and score on
  run a's test. The oracle is the argmin of the very numbers it is scored on, so the gap to it is
  biased upward by the noise (winner's curse).
* **Cross-run** figures (v2, primary): for every ordered pair (a, b) of distinct runs, fit the global
  kernel and every policy on run a's train, let the oracle choose on run a's test, and score all of
  them on run b's test. Choices never see the numbers that score them.
* **Selection** of the best deployable policy x fusion arm happens on a chronological validation slice
  inside run a's train (fit on its first part, validate on the rest), never on test.

Uncertainty (``Estimate``): the pooled figure is the mean over the R(R-1) ordered pairs. Its standard
error adds (i) a jackknife over runs (leave one run out, pool the pairs of the others; covers
run-to-run variance and the run-dependent fitting and selection) and (ii) a paired bootstrap over test
invocations (covers test-invocation sampling; one set of resamples for every pair and policy). The
interval is estimate +/- t(df) x SE with Welch-Satterthwaite df (at least R - 1; ``interval.interval``,
the decision's own; docs/decision-validation.md measures its coverage). A jackknife needs R >= 3; with
fewer runs a figure has no interval and its mode no decision.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from itertools import permutations

import numpy as np
import pandas as pd
from scipy import stats

from headroom.core import contracts, defaults
from headroom.decide import interval, registry
from headroom.decide.costs import LifecycleCosts, charge

FUSION_ARMS = ("off", "on", "free")
NATIVE_ARM = "native"
# The trace contract's columns the analysis reads (all but dtype).
TRACE_COLUMNS = tuple(c for c in contracts.TRACE_COLUMNS if c != "dtype")
TIMING_COLUMNS = ("run", "invocation", "candidate", "fused", "median_us")


def _default(key: str):
    return defaults.value("policies", key)


@dataclass(frozen=True)
class Options:
    """Tunables of ``evaluate``; the keys of config ``policies:`` besides train_fraction and seed."""

    # Every default is the default study's (config/config.yaml `policies:`, where each is explained).
    clusters: int = field(default_factory=lambda: _default("clusters"))
    random_draws: int = field(default_factory=lambda: _default("random_draws"))
    bootstrap_resamples: int = field(default_factory=lambda: _default("bootstrap_resamples"))
    confidence: float = field(default_factory=lambda: _default("confidence"))
    deployment_invocations: int = field(default_factory=lambda: _default("deployment_invocations"))
    layers_per_forward: int = field(default_factory=lambda: _default("layers_per_forward"))
    validation_fraction: float = field(default_factory=lambda: _default("validation_fraction"))

    @classmethod
    def from_mapping(cls, options: Mapping) -> Options:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"options: unknown key(s) {unknown}; known: {sorted(known)}")
        opts = cls(**options)
        for name in (
            "clusters",
            "random_draws",
            "bootstrap_resamples",
            "deployment_invocations",
            "layers_per_forward",
        ):
            value = getattr(opts, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"options.{name} must be a positive integer, got {value!r}")
        if not 0.5 < float(opts.confidence) < 1.0:
            raise ValueError(f"options.confidence must be in (0.5, 1), got {opts.confidence!r}")
        if not 0.0 < float(opts.validation_fraction) < 1.0:
            raise ValueError(
                f"options.validation_fraction must be in (0, 1), got {opts.validation_fraction!r}"
            )
        return opts


def in_arm(arm: str, fused: bool, native: bool) -> bool:
    """Whether a candidate takes part in a fusion arm (native candidates only in ``native``)."""
    if arm == NATIVE_ARM:
        return True
    if native:
        return False
    return arm == "free" or fused == (arm == "on")


def group_seed(seed: int, *labels) -> np.random.Generator:
    key = zlib.crc32("|".join(map(str, labels)).encode())
    return np.random.default_rng(np.random.SeedSequence([int(seed), key]))


# ----------------------------------------------------------------------------------------------
# One mode's measurements as arrays
# ----------------------------------------------------------------------------------------------


@dataclass
class ModeData:
    """us/sem2: (R, N, C); features: the N trace rows in order; per-candidate names/fused/native/tile."""

    mode: str
    runs: list
    features: pd.DataFrame
    us: np.ndarray
    sem2: np.ndarray
    names: list[str]
    fused: np.ndarray
    native: np.ndarray
    tile: np.ndarray
    dropped: list[str] = field(default_factory=list)

    def arms(self) -> tuple[str, ...]:
        """The arms with at least one admitted candidate."""
        arms = FUSION_ARMS + ((NATIVE_ARM,) if self.native.any() else ())
        return tuple(a for a in arms if len(self.arm_cols(a)))

    def arm_cols(self, arm: str) -> np.ndarray:
        ok = [in_arm(arm, bool(f), bool(n)) for f, n in zip(self.fused, self.native, strict=True)]
        return np.flatnonzero(ok)


def _pivot(group: pd.DataFrame, column: str) -> pd.DataFrame:
    return group.pivot(index="invocation", columns="candidate", values=column).sort_index()


def mode_data(trace: pd.DataFrame, timings: pd.DataFrame) -> list[ModeData]:
    """Per mode, the runs' invocation x candidate matrices over the candidates timed everywhere."""
    features = trace.set_index("invocation")
    timings = timings if "mode" in timings.columns else timings.assign(mode="eager")
    out = []
    for mode, group in timings.groupby("mode", sort=True):
        dup = group.duplicated(["run", "invocation", "candidate"])
        if dup.any():
            first = group.loc[dup, ["run", "invocation", "candidate"]].iloc[0].tolist()
            raise ValueError(f"timings (mode {mode}): duplicate (run, invocation, candidate) row {first}")
        runs = sorted(group["run"].unique())
        meds = {r: _pivot(g, "median_us") for r, g in group.groupby("run")}
        invocations = meds[runs[0]].index
        if any(not m.index.equals(invocations) for m in meds.values()):
            raise ValueError(f"timings (mode {mode}): the runs did not time the same invocations")
        complete = [
            c for c in meds[runs[0]].columns if all(c in m and m[c].notna().all() for m in meds.values())
        ]
        if not complete:
            raise ValueError(f"timings (mode {mode}): no candidate is timed on every invocation")
        us = np.stack([meds[r][complete].to_numpy(np.float64) for r in runs])
        if (us <= 0).any():
            raise ValueError(f"timings (mode {mode}): median_us must be positive")
        first = group.drop_duplicates("candidate").set_index("candidate").loc[complete]
        out.append(
            ModeData(
                mode=str(mode),
                runs=runs,
                features=features.loc[invocations].reset_index(),
                us=us,
                sem2=_sem2(group, runs, invocations, complete),
                names=complete,
                fused=first["fused"].astype(bool).to_numpy(),
                native=(first["backend"].astype(str) != "triton").to_numpy()
                if "backend" in first.columns
                else np.zeros(len(complete), bool),
                tile=first["tile"].fillna(-1).astype(int).to_numpy()
                if "tile" in first.columns
                else np.arange(len(complete)),
                dropped=sorted(set(group["candidate"]) - set(complete)),
            )
        )  # fmt: skip  (one constructor, read top to bottom)
    return out


def _sem2(group, runs, invocations, complete) -> np.ndarray:
    """Squared standard error of each median (std_us^2 / reps); zeros when not recorded."""
    if not {"std_us", "reps"} <= set(group.columns):
        return np.zeros((len(runs), len(invocations), len(complete)))
    out = []
    for r in runs:
        g = group[group["run"] == r]
        std = _pivot(g, "std_us").loc[invocations, complete].fillna(0.0).to_numpy(np.float64)
        reps = _pivot(g, "reps").loc[invocations, complete].fillna(1).to_numpy(np.float64)
        out.append(std**2 / np.maximum(reps, 1.0))
    return np.stack(out)


# ----------------------------------------------------------------------------------------------
# Fitting per run
# ----------------------------------------------------------------------------------------------


@dataclass
class Fit:
    """One policy fitted on one run's train in one arm: its test choices and per-invocation cost."""

    policy: str
    arm: str
    choice: np.ndarray  # (n_test,) column of us, or (draws, n_test) for random
    cost_us: float  # per invocation, ``costs.charge`` averaged: lookup, switches, plans, compiles
    running_us: float
    switches: float
    used: list[str]
    basis: str
    compile_s: float
    cache_bytes: float
    fitted: object = None


def plan_charges(md: ModeData, costs: LifecycleCosts, opts: Options) -> np.ndarray:
    """(n, C) plan charge per call of a mode's trace (``LifecycleCosts.plan_charges``), as the engine
    charges it."""
    shapes = md.features["shape_key"].astype(str).tolist() if "shape_key" in md.features else []
    return costs.plan_charges(md.mode, md.names, shapes, md.us.shape[1], opts.layers_per_forward)


def _charges(md: ModeData, costs: LifecycleCosts, opts: Options):
    """(phase codes (n,), plan charge per call (n, C)) as the engine charges them."""
    phase = (md.features["phase"].astype(str).to_numpy() == "prefill").astype(np.int64)
    return phase, plan_charges(md, costs, opts)


def _cost(policy, choice, cols, rows, md: ModeData, costs: LifecycleCosts, opts: Options):
    """(cost, running, switches, used, basis, compile_s, cache_bytes) of a choice sequence (columns of
    the arm ``cols``) on trace rows ``rows``: ``costs.charge`` per invocation, averaged."""
    names = [md.names[c] for c in cols]
    seq = choice if choice.ndim == 2 else choice[None]
    phase, plan = _charges(md, costs, opts)
    phase, plan = phase[rows], plan[rows][:, cols]
    same = phase[1:] == phase[:-1]
    switches = float(np.mean(np.count_nonzero((seq[:, 1:] != seq[:, :-1]) & same, axis=1)))
    used = sorted({names[i] for i in np.unique(seq)}) if policy != "random" else sorted(set(names))
    dispatch, basis = costs.dispatch_for(policy)
    if md.mode == "graph":
        # Under CUDA Graph replay the lookup runs once, when the graph is captured for a shape;
        # replays pay no dispatch. Switching between kernels is still paid.
        dispatch, basis = 0.0, "captured into the graph"
    compile_us = np.array([costs.compile_s.get(c, 0.0) for c in names]) * 1e6 / opts.deployment_invocations
    switch = costs.switch_for(md.mode)
    running = float(charge(seq, phase, plan, dispatch, switch, np.zeros(len(names))).mean())
    cost = float(charge(seq, phase, plan, dispatch, switch, compile_us).mean())
    compile_s = sum(costs.compile_s.get(c, 0.0) for c in used)
    return cost, running, switches, used, basis, compile_s, sum(costs.cache_bytes.get(c, 0.0) for c in used)


def fit_arm(md: ModeData, run: int, arm: str, fit_rows: slice, score_rows: slice, ctx) -> dict[str, Fit]:
    """Every registry policy fitted on ``fit_rows`` of run index ``run`` in ``arm``, choosing on
    ``score_rows``; the oracle chooses on ``score_rows`` of the same run."""
    costs, opts, seed = ctx["costs"], ctx["opts"], ctx["seed"]
    cols = md.arm_cols(arm)
    names = [md.names[c] for c in cols]
    us = md.us[run][:, cols]
    feats = md.features
    score_feat = feats.iloc[score_rows]
    dispatch = 0.0 if md.mode == "graph" else costs.dispatch_for("regret-aware")[0]
    train = registry.Train(
        feats.iloc[fit_rows],
        us[fit_rows],
        tuple(names),
        md.sem2[run][fit_rows][:, cols],
        z=float(stats.norm.ppf(opts.confidence)),
        deviation_cost_us=dispatch + costs.switch_for(md.mode),
        clusters=opts.clusters,
        seed=seed,
        charge_us=_charges(md, costs, opts)[1][fit_rows][:, cols],
    )
    out = {}
    for name in registry.REGISTRY:
        policy = registry.make(name)
        if name == "random":
            policy.seed = seed
            policy.fit(train)
            choice = group_seed(seed, md.runs[run], md.mode, arm, "random").integers(
                0, len(cols), size=(opts.random_draws, len(score_feat))
            )
        else:
            choice = policy.fit(train).choose(score_feat)
        out[name] = _fit(name, arm, choice, policy, cols, score_rows, md, costs, opts)
    oracle = np.argmin(us[score_rows], axis=1)
    out["oracle"] = _fit("oracle", arm, oracle, None, cols, score_rows, md, costs, opts)
    for f in out.values():  # arm columns -> columns of md.us
        f.choice = cols[f.choice]
    return out


def _fit(name, arm, choice, policy, cols, rows, md, costs, opts) -> Fit:
    cost, running, switches, used, basis, compile_s, cache = _cost(name, choice, cols, rows, md, costs, opts)
    return Fit(name, arm, choice, cost, running, switches, used, basis, compile_s, cache, policy)


@dataclass
class RunFits:
    """Run index r's fits: ``test[arm][policy]`` (fitted on train) and the policy x arm selected on
    the validation slice, ``selected``, with the net gains over phase-keyed that chose it."""

    test: dict[str, dict[str, Fit]]
    selected: tuple[str, str]
    validation: dict[tuple[str, str], float]


def split(n: int, train_fraction: float, validation_fraction: float) -> tuple[int, int]:
    """(n_train, n_fit): train is [0, n_train), its fit part [0, n_fit), validation [n_fit, n_train)."""
    n_train = int(math.floor(n * float(train_fraction)))
    n_fit = n_train - int(math.ceil(n_train * float(validation_fraction)))
    return n_train, n_fit


def fit_run(md: ModeData, run: int, n_train: int, n_fit: int, ctx) -> RunFits:
    n = md.us.shape[1]
    test = {arm: fit_arm(md, run, arm, slice(0, n_train), slice(n_train, n), ctx) for arm in md.arms()}
    validation = {}
    if n_fit >= 1 and n_train - n_fit >= 1:
        val_rows = slice(n_fit, n_train)
        arms = [a for a in FUSION_ARMS if a in md.arms()]
        val = {arm: fit_arm(md, run, arm, slice(0, n_fit), val_rows, ctx) for arm in arms}
        us = md.us[run][val_rows]
        base = _net_mean(us, val["free"]["phase-keyed"])
        for arm in arms:
            for p in registry.DEPLOYABLE:
                validation[(p, arm)] = 100.0 * (base - _net_mean(us, val[arm][p])) / base
    # ties (and a train too short to hold a validation slice) keep the first of DEPLOYABLE x arms
    order = [(p, a) for a in FUSION_ARMS if a in md.arms() for p in registry.DEPLOYABLE]
    selected = max(order, key=lambda k: (validation.get(k, 0.0), -order.index(k)))
    return RunFits(test, selected, validation)


def _net_mean(us: np.ndarray, fit: Fit) -> float:
    return float(latency(us, fit).mean()) + fit.cost_us


def latency(us: np.ndarray, fit: Fit) -> np.ndarray:
    """Per-invocation µs of a fit's choices on a (n, C) matrix (random: mean over its draws)."""
    n = us.shape[0]
    if fit.choice.ndim == 2:
        return us[np.arange(n)[None, :], fit.choice].mean(axis=0)
    return us[np.arange(n), fit.choice]


# ----------------------------------------------------------------------------------------------
# Pooled estimates with run-covering uncertainty
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    estimate: float
    ci_low: float
    ci_high: float
    se: float
    df: float  # Welch-Satterthwaite degrees of freedom (at least runs - 1)
    pairs: int

    def p_above(self, threshold: float) -> float:
        """One-sided p-value of H0: figure <= threshold (small: the figure exceeds it)."""
        if not math.isfinite(self.se) or self.df < 1:
            return float("nan")
        se = max(self.se, 1e-12 * max(1.0, abs(threshold)))
        return float(stats.t.sf((self.estimate - threshold) / se, self.df))


# A figure is a function of named per-invocation latency vectors' sums (arrays over resamples) and
# named per-invocation costs; pairs supplies, per ordered pair (a, b), those vectors and costs.
FigureFn = Callable[[Mapping[str, np.ndarray], Mapping[str, float], int], np.ndarray]


def pooled(pairs: Mapping, figure: FigureFn, boot_idx: np.ndarray, confidence: float) -> Estimate:
    """Mean over ordered pairs; SE from a jackknife over runs plus a test-invocation bootstrap
    (``interval.interval``, the decision's own interval)."""
    per_pair, per_boot = [], []
    for vectors, costs in pairs.values():
        n = len(next(iter(vectors.values())))
        with np.errstate(invalid="ignore", divide="ignore"):  # a resample without a phase: NaN, left out
            per_pair.append(float(figure({k: v.sum() for k, v in vectors.items()}, costs, n)))
            boot = {k: v[boot_idx].sum(axis=1) for k, v in vectors.items()} if len(boot_idx) else None
            per_boot.append(figure(boot, costs, n) if boot is not None else np.zeros(0))
    runs = sorted({r for key in pairs for r in key})
    index = {r: i for i, r in enumerate(runs)}
    A = np.array([index[a] for a, _ in pairs], np.int64)
    B = np.array([index[b] for _, b in pairs], np.int64)
    iv = interval.interval(confidence, np.array([per_pair]), np.array([per_boot]), A, B, len(runs))
    return Estimate(*(float(iv[k][0]) for k in ("", "_lo", "_hi", "_se", "_df")), len(per_pair))


def boot_indices(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, n, size=(resamples, n))


# Figures as functions of sums S (µs over the test invocations), costs C (µs per invocation), n.
def gap_pct(policy: str, oracle: str = "oracle") -> FigureFn:
    return lambda S, C, n: 100.0 * (S[policy] - S[oracle]) / S[oracle]


def gain_pct(policy: str, base: str = "global", net: bool = False) -> FigureFn:
    def f(S, C, n):
        p = S[policy] / n + (C[policy] - C[base] if net else 0.0)
        return 100.0 * (S[base] / n - p) / (S[base] / n)

    return f


def ratio(num: str, den: str) -> FigureFn:
    return lambda S, C, n: S[num] / S[den]


def pair_vectors(md: ModeData, fits: list[RunFits], named: Mapping[str, Callable], n_train: int) -> dict:
    """{(a, b): ({name: latency on run b's test}, {name: cost per invocation})} for every ordered pair;
    ``named[name](fits[a])`` gives the Fit and optionally a row mask (e.g. one phase)."""
    out = {}
    for a, b in permutations(range(len(md.runs)), 2):
        us_b = md.us[b][n_train:]
        vectors, costs = {}, {}
        for name, pick in named.items():
            fit, mask = pick(fits[a])
            vec = latency(us_b, fit)
            vectors[name] = vec if mask is None else np.where(mask, vec, 0.0)
            costs[name] = fit.cost_us
        out[(md.runs[a], md.runs[b])] = (vectors, costs)
    return out
