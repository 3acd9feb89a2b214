"""A simulator of portfolio runs with a known true surface, to validate the decision rule.

Noise model (log scale, per mode), estimated from the recorded study being decided (``estimate_noise``)
so that a kernel or harness change re-estimates it:

    log us[r, i, c] = log truth[i, c] + run[r] + block[r, i] + cand_run[r, c] + resid[r, i, c]

run: a run offset; block: an offset shared by every candidate of invocation i in run r, AR(1) along the
trace (drift and neighbouring-call correlation); cand_run: a candidate x run effect; resid: the rest
(which includes the within-run noise of each median). ``within_sd`` is what the within-run samples
imply for one median (std_us / sqrt(reps), relative), so ``between_over_within`` — the variance of the
candidate-specific run-to-run part over that — says how much a single run's samples understate it.

Truth targets: invocations are *not* redrawn; the trace is fixed and the truth of a figure is the
expected value, over the noise, of the fitted procedure's figure scored on the true surface
(``truth_scored``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from headroom.analysis import crossrun, decision, figures
from headroom.analysis.costs import LifecycleCosts
from headroom.analysis.crossrun import ModeData, Options
from headroom.core import defaults


@dataclass(frozen=True)
class NoiseModel:
    mode: str
    run_sd: float
    block_sd: float
    block_ar: float
    cand_run_sd: float
    resid_sd: float
    within_sd: float

    def scaled(self, k: float) -> NoiseModel:
        return replace(
            self,
            run_sd=self.run_sd * k,
            block_sd=self.block_sd * k,
            cand_run_sd=self.cand_run_sd * k,
            resid_sd=self.resid_sd * k,
            within_sd=self.within_sd * k,
        )

    @property
    def between_over_within(self) -> float:
        return (self.cand_run_sd**2 + self.resid_sd**2) / max(self.within_sd**2, 1e-30)


def estimate_noise(md: ModeData) -> NoiseModel:
    """Variance components of log medians across the runs of one mode (method of moments)."""
    L = np.log(md.us)  # (R, N, C)
    R = L.shape[0]
    mu = L.mean(axis=0)
    run = L.mean(axis=(1, 2)) - L.mean()
    E = L - mu - run[:, None, None]
    block = E.mean(axis=2)  # (R, N)
    cand_run = (E - block[:, :, None]).mean(axis=1)  # (R, C)
    resid = E - block[:, :, None] - cand_run[:, None, :]
    c = R / max(R - 1, 1)  # deviations from a mean over R runs understate the variance by (R-1)/R
    b = block - block.mean(axis=1, keepdims=True)
    ar = float(np.sum(b[:, 1:] * b[:, :-1]) / max(np.sum(b * b), 1e-30))
    rel_within = np.sqrt(md.sem2) / md.us
    return NoiseModel(
        md.mode,
        float(np.std(run) * np.sqrt(c)),
        float(np.std(block) * np.sqrt(c)),
        float(np.clip(ar, 0, 0.95)),
        float(np.std(cand_run) * np.sqrt(c)),
        float(np.std(resid) * np.sqrt(c)),
        float(np.median(rel_within)),
    )


def draw(truth: np.ndarray, model: NoiseModel, runs: int, rng: np.random.Generator) -> np.ndarray:
    """(runs, N, C) simulated medians around ``truth`` (N, C)."""
    n, c = truth.shape
    block = np.empty((runs, n))
    block[:, 0] = rng.standard_normal(runs)
    eps = rng.standard_normal((runs, n))
    phi = model.block_ar
    for i in range(1, n):  # AR(1) with unit marginal variance
        block[:, i] = phi * block[:, i - 1] + np.sqrt(1 - phi**2) * eps[:, i]
    log = (
        np.log(truth)[None]
        + model.run_sd * rng.standard_normal((runs, 1, 1))
        + model.block_sd * block[:, :, None]
        + model.cand_run_sd * rng.standard_normal((runs, 1, c))
        + model.resid_sd * rng.standard_normal((runs, n, c))
    )
    return np.exp(log)


def with_us(md: ModeData, us: np.ndarray) -> ModeData:
    runs = list(range(1, us.shape[0] + 1))
    return replace(md, us=us, runs=runs, sem2=np.zeros_like(us))


def one_seed(md: ModeData, truth, model, runs, rng, opts: Options, costs: LifecycleCosts, thresholds) -> dict:
    """Simulate, decide this mode alone, and score the same fits on the truth: one seed's outcome."""
    from headroom.analysis.policies import fit_mode

    sim = with_us(md, draw(truth, model, runs, rng))
    n_train, fits = fit_mode(sim, costs, opts, 0.5, 0)
    rows = pd.DataFrame(figures.mode_figures(sim, fits, n_train, opts, 0))
    d = decision.decide(
        rows, None, pd.DataFrame([{"device": "cuda"}]), confidence=opts.confidence, **thresholds
    )
    true_md = with_us(md, np.broadcast_to(truth, sim.us.shape).copy())
    truth_rows = pd.DataFrame(
        figures.mode_figures(true_md, fits, n_train, replace(opts, bootstrap_resamples=1), 0)
    )
    out = {"verdict": d["verdict"].iloc[0]}
    for name in ("gap_to_oracle", "policy_gain", "fusion_speedup"):
        r = d[d["figure"] == name]
        if len(r):
            out.update(
                {
                    f"{name}": r["estimate"].iloc[0],
                    f"{name}_lo": r["ci_low"].iloc[0],
                    f"{name}_hi": r["ci_high"].iloc[0],
                    f"{name}_state": r["state"].iloc[0],
                    f"{name}_true": float(truth_rows.loc[truth_rows["figure"] == name, "estimate"].iloc[0]),
                }
            )
    return out


def monte_carlo(md, truth, model, *, runs=3, seeds=200, opts=None, costs=None, thresholds=None, seed=0):
    """One row per seed (see ``one_seed``); coverage needs the truth target, the mean of *_true."""
    opts = opts or Options(bootstrap_resamples=200, random_draws=20)
    costs = costs or LifecycleCosts()
    thresholds = thresholds or {}
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [one_seed(md, truth, model, runs, rng, opts, costs, thresholds) for _ in range(seeds)]
    )


def coverage(mc: pd.DataFrame, figure: str) -> float:
    target = mc[f"{figure}_true"].mean()
    return float(((mc[f"{figure}_lo"] <= target) & (target <= mc[f"{figure}_hi"])).mean())


# ----------------------------------------------------------------------------------------------
# True surfaces
# ----------------------------------------------------------------------------------------------


def recorded_truth(md: ModeData) -> np.ndarray:
    """The recorded surface: geometric mean over runs of each (invocation, candidate) median."""
    return np.exp(np.log(md.us).mean(axis=0))


def flat(md: ModeData) -> np.ndarray:
    """Every candidate equal: each invocation's geometric mean over candidates."""
    base = recorded_truth(md)
    return np.repeat(np.exp(np.log(base).mean(axis=1, keepdims=True)), base.shape[1], axis=1)


def phase_split(md: ModeData, effect: float = 0.15) -> np.ndarray:
    """Fused best for decode, unfused best for prefill, by ``effect``; tiles equal."""
    truth = flat(md)
    decode = (md.features["phase"].astype(str) == "decode").to_numpy()
    better = np.where(decode[:, None], md.fused[None, :], ~md.fused[None, :])
    return truth * np.where(better, 1.0 - effect, 1.0)


def beyond_phase(md: ModeData, effect: float) -> np.ndarray:
    """Headroom the phase split cannot capture: within decode, short-context invocations want tile A
    and long-context ones tile B (by ``effect``); prefill wants tile A."""
    truth = flat(md)
    feats = md.features
    kv = np.log2(np.maximum(feats["kv_len"].to_numpy(float), 1.0))
    decode = (feats["phase"].astype(str) == "decode").to_numpy()
    long_ctx = decode & (kv > np.median(kv[decode]))
    tiles = sorted(set(md.tile[~md.native]))
    tile_a, tile_b = tiles[0], tiles[min(2, len(tiles) - 1)]
    want = np.where(long_ctx, tile_b, tile_a)
    fast = (md.tile[None, :] == want[:, None]) & ~md.native[None, :]
    return truth * np.where(fast, 1.0 - effect, 1.0)


def true_policy_gain(md: ModeData, truth: np.ndarray, opts: Options, costs: LifecycleCosts) -> float:
    """The noise-free figure: procedure fitted on the truth and scored on it."""
    from headroom.analysis.policies import fit_mode

    t = with_us(md, np.broadcast_to(truth, (3, *truth.shape)).copy())
    n_train, fits = fit_mode(t, costs, opts, 0.5, 0)
    rows = pd.DataFrame(figures.mode_figures(t, fits, n_train, replace(opts, bootstrap_resamples=1), 0))
    return float(rows.loc[rows["figure"] == "policy_gain", "estimate"].iloc[0])


def planted(md: ModeData, target_pct: float, opts: Options, costs: LifecycleCosts) -> np.ndarray:
    """``beyond_phase`` with the effect that makes the true net gain over phase-keyed ``target_pct``."""
    lo, hi = 0.0, 0.9
    for _ in range(40):
        mid = (lo + hi) / 2
        if true_policy_gain(md, beyond_phase(md, mid), opts, costs) < target_pct:
            lo = mid
        else:
            hi = mid
    return beyond_phase(md, (lo + hi) / 2)


def longer_trace(md: ModeData, invocations: int, seed: int = 0) -> ModeData:
    """A synthetic trace of ``invocations`` drawn (with replacement) from the study's invocations."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, md.us.shape[1], size=invocations)
    feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(invocations))
    return replace(md, features=feats, us=md.us[:, idx], sem2=md.sem2[:, idx])


def reference_mode(study_dir, mode: str) -> ModeData:
    """One mode of a recorded study (trace + portfolio runs) as arrays."""
    from pathlib import Path

    d = Path(study_dir)
    trace = pd.read_parquet(d / "trace.parquet")
    runs = pd.concat([pd.read_parquet(p) for p in sorted((d / "portfolio").glob("run-?.parquet"))])
    return next(m for m in crossrun.mode_data(trace, runs) if m.mode == mode)


# ----------------------------------------------------------------------------------------------
# The fast path: the decision's figures for a batch of simulated studies at once (numpy)
# ----------------------------------------------------------------------------------------------
#
# Everything the procedure decides that does not depend on the timings is fixed by the trace: the
# keys every keyed policy assigns to the fit and score rows (clustered's k-means sees shapes only),
# the bootstrap's resamples, the lifecycle costs. ``Plan`` holds them once; ``fast_figures`` then fits
# every policy of every (seed, run) by key sums, selects on the validation slice, scores every ordered
# pair and pools them exactly as ``crossrun.pooled`` does. tests/analysis/test_simulate.py proves it
# equal to ``figures.mode_figures`` + ``decision.decide`` on several seeds. Simulated medians carry no
# sem2 (``with_us``), so regret-aware's noise term is the spread of its per-key gains only.

FAST_FIGURES = ("gap_to_oracle", "policy_gain", "phase_split_gain", "fusion_speedup")
THRESHOLD_KEYS = {
    "gap_to_oracle": "max_gap_to_oracle_pct",
    "policy_gain": "max_policy_gain_pct",
    "fusion_speedup": "max_graph_fusion_speedup",
}


def _default_thresholds() -> dict[str, float]:
    """The default study's decision thresholds (config/config.yaml)."""
    decision = defaults.section("decision")
    return {key: decision[key] for key in THRESHOLD_KEYS.values()}


@dataclass
class _Keys:
    fit: np.ndarray  # (n_fit_rows,) key code of each fit row
    score: np.ndarray  # (n_score_rows,) key code, -1 for keys unseen in fit
    k: int


@dataclass
class Plan:
    mode: str
    n: int
    n_train: int
    n_fit: int
    cols: dict  # arm -> columns of us
    keys: dict  # (window, policy) -> _Keys; window 'train' (scores test) or 'fit' (scores validation)
    compile_s: np.ndarray  # (C,)
    dispatch: dict  # policy -> µs per lookup (0 in graph mode)
    switch_us: float
    deviation_us: float
    z: float
    deployment: int
    boot: np.ndarray  # (B, n_test) resample counts
    confidence: float
    phases: np.ndarray  # (n_test,) phase of each test invocation


def plan(
    md: ModeData, opts: Options, costs: LifecycleCosts, train_fraction: float = 0.5, seed: int = 0
) -> Plan:
    """What the procedure fixes before it sees a timing (see the section comment)."""
    from headroom.analysis import registry

    n = md.us.shape[1]
    n_train, n_fit = crossrun.split(n, train_fraction, opts.validation_fraction)
    feats = md.features
    keys = {}
    for window, fit_rows, score_rows in (
        ("train", slice(0, n_train), slice(n_train, n)),
        ("fit", slice(0, n_fit), slice(n_fit, n_train)),
    ):
        dummy = registry.Train(
            feats.iloc[fit_rows], np.zeros((fit_rows.stop, 1)), ("x",), clusters=opts.clusters, seed=seed
        )
        for name in ("global", "phase-keyed", *registry.DEPLOYABLE):
            pol = registry.make(name).fit(dummy)
            fit_keys = pol.keys(feats.iloc[fit_rows])
            codes, uniques = pd.factorize(pd.Series(fit_keys, dtype=object), use_na_sentinel=False)
            index = {u: i for i, u in enumerate(uniques)}
            score = np.array([index.get(k, -1) for k in pol.keys(feats.iloc[score_rows])], dtype=np.int64)
            keys[(window, name)] = _Keys(codes.astype(np.int64), score, len(uniques))
    n_test = n - n_train
    idx = crossrun.boot_indices(n_test, opts.bootstrap_resamples, crossrun.group_seed(seed, md.mode, "fig"))
    boot = np.zeros((len(idx), n_test))
    np.add.at(boot, (np.repeat(np.arange(len(idx)), n_test), idx.ravel()), 1.0)
    dispatch = {
        p: (0.0 if md.mode == "graph" else costs.dispatch_for(p)[0])
        for p in ("global", "phase-keyed", *registry.DEPLOYABLE)
    }
    deviation = (0.0 if md.mode == "graph" else costs.dispatch_for("regret-aware")[0]) + costs.switch_for(
        md.mode
    )
    return Plan(
        md.mode,
        n,
        n_train,
        n_fit,
        {a: md.arm_cols(a) for a in crossrun.FUSION_ARMS},
        keys,
        np.array([costs.compile_s.get(c, 0.0) for c in md.names]),
        dispatch,
        costs.switch_for(md.mode),
        deviation,
        float(stats.norm.ppf(opts.confidence)),
        opts.deployment_invocations,
        boot,
        opts.confidence,
        md.features["phase"].astype(str).to_numpy()[n_train:],
    )


def _fit_keyed(p: Plan, us_fit, keys: _Keys, cols, regret: bool, score=None):
    """Choices (S, R, n_score) in columns of us of a keyed policy fitted on us_fit (S, R, n_fit, C)."""
    uf = us_fit[..., cols]
    fb = np.argmin(uf.sum(axis=2), axis=-1)  # (S, R)
    onehot = np.zeros((keys.k, uf.shape[2]))
    onehot[keys.fit, np.arange(uf.shape[2])] = 1.0
    sums = np.einsum("kn,srnc->srkc", onehot, uf)
    best = np.argmin(sums, axis=-1)  # (S, R, K)
    at_fb = np.take_along_axis(sums, fb[..., None, None].repeat(keys.k, 2), axis=-1)[..., 0]
    at_best = np.take_along_axis(sums, best[..., None], axis=-1)[..., 0]
    best = np.where(at_fb <= at_best, fb[..., None], best)
    if regret:  # deviate only when the gain's lower bound beats the deviation cost
        row_best = best[..., keys.fit]  # (S, R, n_fit)
        d = (
            np.take_along_axis(uf, fb[..., None, None].repeat(uf.shape[2], 2), -1)[..., 0]
            - np.take_along_axis(uf, row_best[..., None], -1)[..., 0]
        )
        cnt = onehot.sum(axis=1)
        mean = (d @ onehot.T) / cnt
        var = ((d - mean[..., keys.fit]) ** 2 @ onehot.T) / np.maximum(cnt - 1, 1)
        se2 = np.where(cnt >= 2, var / cnt, 0.0)
        deviate = (best != fb[..., None]) & (mean - p.z * np.sqrt(se2) > p.deviation_us)
        best = np.where(deviate, best, fb[..., None])
    codes = keys.score if score is None else score  # (n,) or, per seed, (S, n)
    seen = codes >= 0
    idx = np.where(seen, codes, 0)
    if idx.ndim == 2:
        seen = seen[:, None, :]
        picked = np.take_along_axis(
            best, np.broadcast_to(idx[:, None, :], (*best.shape[:2], idx.shape[1])), -1
        )
    else:
        picked = np.take(best, idx, axis=-1)
    choice = np.where(seen, picked, fb[..., None])
    return cols[choice]


def _cost(p: Plan, policy: str, choice) -> np.ndarray:
    """Per-invocation lifecycle cost (S, R) of choices (S, R, n) (as ``crossrun._cost``)."""
    n = choice.shape[-1]
    switches = np.count_nonzero(choice[..., 1:] != choice[..., :-1], axis=-1)
    used = np.zeros((*choice.shape[:-1], len(p.compile_s)), bool)
    np.put_along_axis(used, choice, True, axis=-1)
    return (
        p.dispatch.get(policy, 0.0) + p.switch_us * switches / n + (used @ p.compile_s) * 1e6 / p.deployment
    )


def _gather(us, choice):
    """us (S, R, n, C), choice (S, R, n) -> (S, R, n) latency of the choice on the same run."""
    return np.take_along_axis(us, choice[..., None], axis=-1)[..., 0]


def _keyed(p: Plan, us, test_rows, window, name, arm, fit_rows, score_rows):
    """(choice (S, R, n), cost (S, R)) of policy ``name`` on arm ``arm`` fitted on ``fit_rows``."""
    keys = p.keys[(window, name)]
    score = keys.score[test_rows] if (test_rows is not None and window == "train") else None
    ch = _fit_keyed(p, us[:, :, fit_rows], keys, p.cols[arm], name == "regret-aware", score)
    return ch, _cost(p, name, ch)


def _selected(p: Plan, us, test_rows, order) -> np.ndarray:
    """(S, R) index into ``order`` of the candidate each run selects on its train's validation slice."""
    S, R, _, _ = us.shape
    nt, nf = p.n_train, p.n_fit
    if not (nf >= 1 and nt - nf >= 1):
        return np.zeros((S, R), dtype=np.int64)
    fit, val = slice(0, nf), slice(nf, nt)
    uv = us[:, :, val]
    ch, cost = _keyed(p, us, test_rows, "fit", "phase-keyed", "free", fit, val)
    base = _gather(uv, ch).mean(axis=-1) + cost
    vals = []
    for name, arm in order:
        ch, cost = _keyed(p, us, test_rows, "fit", name, arm, fit, val)
        vals.append(100.0 * (base - (_gather(uv, ch).mean(axis=-1) + cost)) / base)
    return np.argmax(np.stack(vals, axis=-1), axis=-1)  # ties: the first of the order


def _test_choices(p: Plan, us, test_rows) -> dict:
    """{name: (choice (S, R, n_test), cost (S, R))} of every policy and arm on the test invocations."""
    from headroom.analysis import registry

    S, R, N, _ = us.shape
    nt = p.n_train
    test = {}
    train, tst = slice(0, nt), slice(nt, N)
    for arm in ("off", "on", "free"):
        test[f"global@{arm}"] = _keyed(p, us, test_rows, "train", "global", arm, train, tst)
        for name in registry.DEPLOYABLE:
            test[f"{name}@{arm}"] = _keyed(p, us, test_rows, "train", name, arm, train, tst)
    test["phase"] = _keyed(p, us, test_rows, "train", "phase-keyed", "free", train, tst)
    free = p.cols["free"]
    test["oracle"] = (free[np.argmin(us[:, :, nt:][..., free], axis=-1)], np.zeros((S, R)))
    # selection on the validation slice of each run's train
    order = [(name, arm) for arm in ("off", "on", "free") for name in registry.DEPLOYABLE]
    selected = _selected(p, us, test_rows, order)
    cand_ch = np.stack([test[f"{n}@{a}"][0] for n, a in order], axis=-1)  # (S, R, n_test, 12)
    cand_cost = np.stack([test[f"{n}@{a}"][1] for n, a in order], axis=-1)
    test["selected"] = (
        np.take_along_axis(cand_ch, selected[:, :, None, None].repeat(N - nt, 2), -1)[..., 0],
        np.take_along_axis(cand_cost, selected[..., None], -1)[..., 0],
    )
    return test


def _interval(p: Plan, per_pair, per_boot, A, B, R: int) -> dict[str, np.ndarray]:
    """Estimate, standard error (runs' jackknife plus invocations' bootstrap), df and the t interval
    of one figure from its per-pair (S, P) and per-bootstrap (S, P, B) values."""
    S = per_pair.shape[0]
    est = per_pair.mean(axis=1)
    loo = np.stack([per_pair[:, (A != r) & (B != r)].mean(axis=1) for r in range(R)], axis=1)
    var_runs = (R - 1) / R * ((loo - loo.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    boot = per_boot.mean(axis=1)  # (S, B)
    var_inv = boot.var(axis=1, ddof=1) if boot.shape[1] > 1 else np.zeros(S)
    se = np.sqrt(var_runs + var_inv)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var_runs > 0, (var_runs + var_inv) ** 2 / (var_runs**2 / (R - 1)), np.inf)
    df = np.maximum(R - 1, np.minimum(df, 1e6))
    half = stats.t.ppf(0.5 + p.confidence / 2.0, df) * se
    return {"": est, "_lo": est - half, "_hi": est + half, "_se": se, "_df": df}


def fast_figures(
    p: Plan, us: np.ndarray, truth: np.ndarray | None = None, test_rows: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The decision's figures for S simulated studies ``us`` (S, R, N, C) at once.

    Returns {figure: (S,)} for estimate, ci_low, ci_high, se, df of FAST_FIGURES (keys
    '<figure>', '<figure>_lo', '<figure>_hi', '<figure>_se', '<figure>_df') and, with ``truth``
    (N, C), or per seed (S, N, C), '<figure>_true': the same fits scored on the true surface (mean
    over the runs' fits). ``test_rows`` (S, n_test): per seed, which of the trace's test invocations
    (0-based within test) sit at each test position, for redrawn test invocations; ``us`` and
    ``truth`` must already hold those rows.
    """
    S, R, N, C = us.shape
    nt = p.n_train
    test = _test_choices(p, us, test_rows)  # name -> (choice (S,R,n_test), cost (S,R))
    names = {
        "global": "global@free",
        "oracle": "oracle",
        "phase": "phase",
        "selected": "selected",
        "global_off": "global@off",
        "global_on": "global@on",
    }
    pairs = [(a, b) for a in range(R) for b in range(R) if a != b]
    A = np.array([a for a, _ in pairs])
    B = np.array([b for _, b in pairs])
    ut = us[:, :, nt:]  # (S, R, n_test, C)
    lat, cst = {}, {}
    for k, name in names.items():
        ch, cost = test[name]
        lat[k] = np.take_along_axis(ut[:, B], ch[:, A][..., None], axis=-1)[..., 0]  # (S, P, n_test)
        cst[k] = cost[:, A]
    out = {}
    specs = _fast_specs(N - nt)
    for fig, fn in specs.items():
        per_pair = fn({k: v.sum(axis=-1) for k, v in lat.items()}, cst)  # (S, P)
        per_boot = fn({k: v @ p.boot.T for k, v in lat.items()}, {k: v[..., None] for k, v in cst.items()})
        out.update({fig + suffix: v for suffix, v in _interval(p, per_pair, per_boot, A, B, R).items()})
        if truth is not None:
            tt = np.asarray(truth)[..., nt:, :]  # (n_test, C) or (S, n_test, C)
            if tt.ndim == 3:
                tt = tt[:, None]
            t_lat = {
                k: np.take_along_axis(np.broadcast_to(tt, (S, R, N - nt, C)), test[name][0][..., None], -1)[
                    ..., 0
                ].sum(axis=-1)
                for k, name in names.items()
            }
            out[f"{fig}_true"] = fn(t_lat, {k: test[name][1] for k, name in names.items()}).mean(axis=1)
    return out


def _fast_specs(n: int) -> dict:
    def gain(pol, base):
        return lambda S, C: 100.0 * (S[base] / n - (S[pol] / n + C[pol] - C[base])) / (S[base] / n)

    return {
        "gap_to_oracle": lambda S, C: 100.0 * (S["global"] - S["oracle"]) / S["oracle"],
        "policy_gain": gain("selected", "phase"),
        "phase_split_gain": gain("phase", "global"),
        "fusion_speedup": lambda S, C: S["global_off"] / S["global_on"],
    }


def fast_decide(
    mode: str, figs: dict, thresholds: dict | None = None, confidence: float = 0.95
) -> dict[str, np.ndarray]:
    """One mode decided alone, per seed: '<figure>_state' and 'verdict' (as ``decision.decide`` with
    this mode's figures only: Holm over its 2 (eager) or 3 (graph) decided figures)."""
    thr = {**_default_thresholds(), **(thresholds or {})}
    decided = [f for f in THRESHOLD_KEYS if f != "fusion_speedup" or mode == "graph"]
    alpha = 1.0 - confidence
    pv = np.stack(
        [
            stats.t.sf(
                (figs[f] - thr[THRESHOLD_KEYS[f]]) / np.maximum(figs[f"{f}_se"], 1e-12), figs[f"{f}_df"]
            )
            for f in decided
        ],
        axis=1,
    )
    m = len(decided)
    order = np.argsort(pv, axis=1, kind="stable")
    sorted_p = np.take_along_axis(pv, order, axis=1)
    ok = np.cumprod(sorted_p <= alpha / (m - np.arange(m)), axis=1).astype(bool)
    exceeds = np.zeros_like(ok)
    np.put_along_axis(exceeds, order, ok, axis=1)
    holds = np.stack([figs[f"{f}_hi"] < thr[THRESHOLD_KEYS[f]] for f in decided], axis=1)
    out = {}
    for j, f in enumerate(decided):
        out[f"{f}_state"] = np.where(exceeds[:, j], "exceeds", np.where(holds[:, j], "holds", "inconclusive"))
    out["verdict"] = np.where(
        exceeds.any(axis=1), "continue", np.where(holds.all(axis=1), "stop", "no-decision")
    )
    # the reason names the phase split when the gap exceeds and the policy figure does not
    out["names_phase_split"] = (
        exceeds[:, decided.index("gap_to_oracle")] & ~exceeds[:, decided.index("policy_gain")]
    )
    return out


def draw_batch(
    truth: np.ndarray, model: NoiseModel, seeds: int, runs: int, rng: np.random.Generator
) -> np.ndarray:
    """(seeds, runs, N, C) simulated medians around ``truth`` (N, C): ``draw`` for many seeds at once."""
    n, c = truth.shape
    eps = rng.standard_normal((seeds, runs, n))
    block = np.empty_like(eps)
    block[..., 0] = eps[..., 0]
    phi = model.block_ar
    for i in range(1, n):  # AR(1) with unit marginal variance
        block[..., i] = phi * block[..., i - 1] + np.sqrt(1 - phi**2) * eps[..., i]
    log = (
        np.log(truth)[None, None]
        + model.run_sd * rng.standard_normal((seeds, runs, 1, 1))
        + model.block_sd * block[..., None]
        + model.cand_run_sd * rng.standard_normal((seeds, runs, 1, c))
        + model.resid_sd * rng.standard_normal((seeds, runs, n, c))
    )
    return np.exp(log)


def fast_monte_carlo(
    md: ModeData,
    truth: np.ndarray,
    model: NoiseModel,
    *,
    runs: int = 3,
    seeds: int = 400,
    opts=None,
    costs=None,
    thresholds=None,
    seed: int = 0,
    batch: int = 200,
    the_plan: Plan | None = None,
) -> pd.DataFrame:
    """One row per seed, as ``monte_carlo`` (figures, CIs, states, verdict, truths), vectorized."""
    opts = opts or Options(bootstrap_resamples=200, random_draws=20)
    costs = costs or LifecycleCosts()
    p = the_plan or plan(md, opts, costs)
    rng = np.random.default_rng(seed)
    parts = []
    for start in range(0, seeds, batch):
        us = draw_batch(truth, model, min(batch, seeds - start), runs, rng)
        figs = fast_figures(p, us, truth)
        parts.append(pd.DataFrame({**figs, **fast_decide(md.mode, figs, thresholds, opts.confidence)}))
    return pd.concat(parts, ignore_index=True)


# ----------------------------------------------------------------------------------------------
# Validation of the decision on a recorded study: scenarios, power curve, minimum detectable effect
# ----------------------------------------------------------------------------------------------


@dataclass
class Study:
    """One mode of a recorded study with what the simulation needs: its costs, options, noise."""

    name: str
    md: ModeData
    costs: LifecycleCosts
    opts: Options
    thresholds: dict
    model: NoiseModel


def config_options(bootstrap_resamples: int | None = None) -> tuple[Options, dict]:
    """The pipeline's policies options and decision thresholds (config/config.yaml)."""
    from pathlib import Path

    import yaml

    cfg = yaml.safe_load((Path(__file__).resolve().parents[2] / "config" / "config.yaml").read_text())
    pol = {k: v for k, v in cfg["policies"].items() if k not in ("train_fraction", "seed")}
    if bootstrap_resamples:
        pol["bootstrap_resamples"] = bootstrap_resamples
    pol.pop("confidence", None)
    return Options.from_mapping(pol), {**_default_thresholds(), **cfg.get("decision", {})}


def load_study(study_dir, mode: str, bootstrap_resamples: int | None = 200) -> Study:
    """A recorded study's mode, its lifecycle costs, the pipeline's options and its estimated noise."""
    from pathlib import Path

    from headroom.analysis.costs import lifecycle_costs

    d = Path(study_dir)
    md = reference_mode(d, mode)
    life = d / "lifecycle.parquet"
    costs = lifecycle_costs(pd.read_parquet(life)) if life.exists() else LifecycleCosts()
    opts, thresholds = config_options(bootstrap_resamples)
    return Study(d.name, md, costs, opts, thresholds, estimate_noise(md))


def _noise(md: ModeData, model: NoiseModel, seeds: int, runs: int, seed: int) -> np.ndarray:
    """Multiplicative noise at scale 1, (seeds, runs, N, C); scale k is this to the power k."""
    return draw_batch(np.ones(md.us.shape[1:]), model, seeds, runs, np.random.default_rng(seed))


REDRAW_SEED = 20240610


def run_mc(
    s: Study,
    p: Plan,
    truth: np.ndarray,
    noise: np.ndarray,
    scale: float = 1.0,
    batch: int = 200,
    redraw: bool = True,
) -> pd.DataFrame:
    """Figures, states and verdict per seed for ``truth`` under ``noise ** scale``.

    redraw: each seed's test invocations are drawn with replacement from the trace's test part (the
    train part stays), so the truth target — the mean over seeds of the fitted procedure's figure
    scored on the truth — is the expected figure over new test invocations of the same workload,
    the population the CI's invocation bootstrap speaks for. Without it the trace is fixed and the
    target is the figure on these very test invocations (the CI is then conservative by design)."""
    parts = []
    rng = np.random.default_rng(REDRAW_SEED)
    nt, n = p.n_train, p.n
    for i in range(0, len(noise), batch):
        z = noise[i : i + batch] ** scale
        if redraw:
            rows = rng.integers(0, n - nt, size=(len(z), n - nt))
            t = np.concatenate(
                [np.broadcast_to(truth[:nt], (len(z), nt, truth.shape[1])), truth[nt + rows]], 1
            )
            figs = fast_figures(p, t[:, None] * z, t, rows)
        else:
            figs = fast_figures(p, truth[None, None] * z, truth)
        parts.append(pd.DataFrame({**figs, **fast_decide(s.md.mode, figs, s.thresholds, s.opts.confidence)}))
    return pd.concat(parts, ignore_index=True)


def calibrate(s: Study, p: Plan, make, target: float, figure: str, noise: np.ndarray, scale: float = 1.0):
    """The effect for which the truth target of ``figure`` (mean of '<figure>_true' over ``noise``'s
    seeds) is ``target``; ``make(effect)`` builds the true surface. Bisection on [0, 0.9]."""
    lo, hi = 0.0, 0.9
    for _ in range(16):
        mid = (lo + hi) / 2
        if run_mc(s, p, make(mid), noise, scale)[f"{figure}_true"].mean() < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _rate(x) -> tuple[float, float, float]:
    """Proportion and its 95% Clopper-Pearson interval (the Monte Carlo tolerance)."""
    x = np.asarray(x, bool)
    k, n = int(x.sum()), len(x)
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return k / n, float(lo), float(hi)


def coverage_of(mc: pd.DataFrame, figure: str) -> float:
    target = mc[f"{figure}_true"].mean()
    return float(((mc[f"{figure}_lo"] <= target) & (target <= mc[f"{figure}_hi"])).mean())


def summarize(mc: pd.DataFrame, mode: str) -> dict:
    """One scenario's outcome: verdict rates with their Monte Carlo intervals, coverage, truths."""
    out = {"seeds": len(mc)}
    for name, x in (
        ("continue", mc["verdict"] == "continue"),
        ("stop", mc["verdict"] == "stop"),
        ("policy_exceeds", mc["policy_gain_state"] == "exceeds"),
        ("gap_exceeds", mc["gap_to_oracle_state"] == "exceeds"),
        ("names_phase_split", mc["names_phase_split"]),
        ("policy_within_0.3pp", mc["policy_gain"].abs() <= 0.3),
        ("policy_ci_covers_0", (mc["policy_gain_lo"] <= 0) & (0 <= mc["policy_gain_hi"])),
    ):
        out[name], out[f"{name}_lo"], out[f"{name}_hi"] = _rate(x)
    for f in ("gap_to_oracle", "policy_gain", "fusion_speedup"):
        if mode == "graph" or f != "fusion_speedup":
            out[f"{f}_true"] = float(mc[f"{f}_true"].mean())
            out[f"{f}_mean"] = float(mc[f].mean())
            out[f"{f}_coverage"] = coverage_of(mc, f)
            out[f"{f}_halfwidth"] = float(((mc[f"{f}_hi"] - mc[f"{f}_lo"]) / 2).median())
    return out


def power_curve(s: Study, p: Plan, noise: np.ndarray, effects) -> pd.DataFrame:
    """P(policy figure exceeds) and P(continue) against the planted effect beyond the phase split;
    x is the truth target of the policy figure (%), not the planted multiplier."""
    rows = []
    for e in effects:
        mc = run_mc(s, p, beyond_phase(s.md, e), noise)
        r = summarize(mc, s.md.mode)
        rows.append(
            {
                "effect": e,
                "true_policy_gain_pct": r["policy_gain_true"],
                **{k: r[k] for k in ("policy_exceeds", "policy_exceeds_lo", "policy_exceeds_hi", "continue")},
            }
        )
    return pd.DataFrame(rows)


def mde_from_curve(curve: pd.DataFrame, power: float) -> float:
    """Smallest true policy gain (%) at which P(policy figure exceeds) reaches ``power`` (linear
    interpolation between curve points; inf when the curve never reaches it)."""
    c = curve.sort_values("effect")
    x, y = c["true_policy_gain_pct"].to_numpy(), c["policy_exceeds"].to_numpy()
    above = np.flatnonzero(y >= power)
    if not len(above):
        return float("inf")
    i = above[0]
    if i == 0:
        return float(x[0])
    return float(x[i - 1] + (power - y[i - 1]) * (x[i] - x[i - 1]) / (y[i] - y[i - 1]))


MDE_EFFECTS = {
    "graph": (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8),
    "eager": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9),
}


def minimum_detectable_effect(
    study_dir,
    mode: str = "graph",
    *,
    power: float = 0.8,
    runs: int | None = None,
    seeds: int = 200,
    seed: int = 0,
) -> dict:
    """The smallest net gain over phase-keyed (%, trace-weighted, on the study's own trace and noise)
    that the decision detects (policy figure 'exceeds', Holm within the mode) in ``power`` of the
    seeds: what a `stop` on this study can rule out. A few seconds.

    Returns {'mode', 'mde_pct', 'mde_at_least_pct', 'power', 'threshold_pct', 'invocations', 'runs',
    'seeds', 'curve'}: mde_pct is inf when no planted effect reaches ``power``, and mde_at_least_pct
    then the largest effect tried (the report can say "more than X%"); curve: list of
    {'effect', 'true_policy_gain_pct', 'policy_exceeds', 'continue', ...}."""
    s = load_study(study_dir, mode)
    runs = runs or len(s.md.runs)
    p = plan(s.md, s.opts, s.costs)
    curve = power_curve(s, p, _noise(s.md, s.model, seeds, runs, seed), MDE_EFFECTS[mode])
    return {
        "mode": mode,
        "mde_pct": mde_from_curve(curve, power),
        "power": power,
        "mde_at_least_pct": float(curve["true_policy_gain_pct"].max())
        if not np.isfinite(mde_from_curve(curve, power))
        else mde_from_curve(curve, power),
        "threshold_pct": float(s.thresholds["max_policy_gain_pct"]),
        "invocations": int(s.md.us.shape[1]),
        "runs": runs,
        "seeds": seeds,
        "curve": curve.to_dict("records"),
    }


def gap_boundary(md: ModeData, effect: float) -> np.ndarray:
    """A phase split whose size ``effect`` sets the gap; nothing beyond the phase split."""
    return phase_split(md, effect)


def validate(
    study_dir,
    *,
    seeds: int = 400,
    seed: int = 0,
    modes=("graph", "eager"),
    scales=(0.5, 1.0, 2.0, 4.0),
    long_trace: int = 240,
    bootstrap_resamples: int = 200,
    run_counts=(3, 5),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every acceptance scenario of issue 10 item 6 on one recorded study: (scenarios, power curves)."""
    rows, curves = [], []
    for mode in modes:
        s = load_study(study_dir, mode, bootstrap_resamples)
        for runs in run_counts:
            _validate_runs(s, mode, runs, seeds, seed, scales if runs == 3 else (1.0,), rows, curves)
        _validate_long_trace(s, mode, long_trace, seeds, seed, rows)
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def _scenario_row(s: Study, mode, scenario, mc, scale=1.0, runs=3, invocations=None, effect=np.nan):
    invocations = s.md.us.shape[1] if invocations is None else invocations
    return {
        "study": s.name,
        "mode": mode,
        "scenario": scenario,
        "noise_scale": scale,
        "runs": runs,
        "invocations": invocations,
        "effect": effect,
        **summarize(mc, mode),
    }


def _validate_runs(s: Study, mode, runs, seeds, seed, scales, rows, curves) -> None:
    """The scenarios on the study's own trace with `runs` runs: flat and the boundary nulls at each
    noise scale, the phase split (with and without costs), 3x planted headroom, the power curve."""
    md, thr, gap_thr = s.md, s.thresholds["max_policy_gain_pct"], s.thresholds["max_gap_to_oracle_pct"]
    p = plan(md, s.opts, s.costs)
    noise = _noise(md, s.model, seeds, runs, seed + runs)
    pilot = _noise(md, s.model, seeds, runs, seed + 1000 + runs)
    for k in scales:
        rows.append(_scenario_row(s, mode, "flat", run_mc(s, p, flat(md), noise, k), k, runs))
        e = calibrate(s, p, lambda x: beyond_phase(md, x), thr, "policy_gain", pilot, k)
        mc = run_mc(s, p, beyond_phase(md, e), noise, k)
        rows.append(_scenario_row(s, mode, "boundary-policy", mc, k, runs, effect=e))
        e = calibrate(s, p, lambda x: gap_boundary(md, x), gap_thr, "gap_to_oracle", pilot, k)
        mc = run_mc(s, p, gap_boundary(md, e), noise, k)
        rows.append(_scenario_row(s, mode, "boundary-gap", mc, k, runs, effect=e))
    mc = run_mc(s, p, phase_split(md), noise)
    rows.append(_scenario_row(s, mode, "phase-split", mc, 1.0, runs, effect=0.15))
    free = replace(s, costs=LifecycleCosts())
    mc0 = run_mc(free, plan(md, s.opts, free.costs), phase_split(md), noise)
    rows.append(_scenario_row(s, mode, "phase-split-no-costs", mc0, 1.0, runs, effect=0.15))
    e = calibrate(s, p, lambda x: beyond_phase(md, x), 3 * thr, "policy_gain", pilot)
    mc = run_mc(s, p, beyond_phase(md, e), noise)
    rows.append(_scenario_row(s, mode, "planted-3x", mc, 1.0, runs, effect=e))
    c = power_curve(s, p, noise, MDE_EFFECTS[mode])
    curves.append(c.assign(study=s.name, mode=mode, runs=runs, invocations=md.us.shape[1]))


def _validate_long_trace(s: Study, mode, long_trace, seeds, seed, rows) -> None:
    """Power (3x the threshold) and the policy boundary null on a synthetic trace of `long_trace`
    invocations drawn from the study's own."""
    thr = s.thresholds["max_policy_gain_pct"]
    lmd = longer_trace(s.md, long_trace, seed)
    ls = replace(s, md=lmd)
    lp = plan(lmd, s.opts, s.costs)
    noise = _noise(lmd, s.model, seeds, 3, seed + 7)
    pilot = _noise(lmd, s.model, seeds, 3, seed + 1007)
    for scenario, target in (("planted-3x", 3 * thr), ("boundary-policy", thr)):
        e = calibrate(ls, lp, lambda x: beyond_phase(lmd, x), target, "policy_gain", pilot)
        mc = run_mc(ls, lp, beyond_phase(lmd, e), noise)
        rows.append(_scenario_row(ls, mode, scenario, mc, 1.0, 3, long_trace, effect=e))
