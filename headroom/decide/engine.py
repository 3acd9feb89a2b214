"""The decision engine: fitting, cost charging, cross-run scoring, intervals and the rule, as array
operations over a leading seed axis. A study is one seed (``us`` of shape (1, R, N, C)); the
simulator (``headroom.decide.power``) passes many seeds at once and holds no procedure of its own.

``Layout`` is what the procedure fixes before it sees a timing: the train/test split, the keys every
registry policy assigns to the fit and score rows (clustered's k-means sees shapes only), the phases,
the lifecycle charges per invocation and candidate, the bootstrap's resamples. ``figures`` then fits
every policy of every (seed, run) through the registry's ``fit_keyed``, charges the costs
(``costs.charge``), selects on the validation slice, scores every ordered pair of runs and pools them
(``intervals``: for the decided figures and the gap's bound, ``CANDIDATES_FOR``, the rule's interval is
bootstrap-t, with the Welch t interval of decision v3, t on n_test - 1 df and bootstrap-t with an
unbiased run part beside it; every other figure has the Welch t interval). ``rule`` is the decision rule over one Holm family.

Fitting objective: each keyed policy takes, per key, the candidate with the least summed latency plus
per-call charge (plan builds); switches and compiles depend on the whole sequence and are left out of
the per-key argmin, so the fit approximates the net cost it is scored on (regret-aware charges a switch
for deviating). Scoring charges everything (``costs.charge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np
from scipy import stats

from headroom.decide import interval, measured, registry
from headroom.decide.costs import LifecycleCosts, charge
from headroom.decide.measured import ModeData, Options

# v3 with the bootstrap-t interval (CANDIDATES_FOR): decision v3.1, tagged `decision-v3.1` before the
# azure-conv-gen2-6x100 recording; v3.1.1 adds one degenerate-case fix made after that tag (a resample
# whose figure equals the sample's has pivot 0: a figure constant over the invocations had no interval)
# and changes no figure of any reference (README.md, "The rule"). v3.2 (tag `decision-v3.2`): the gap
# and its bound take the unbiased run part from four runs on (RULE_INTERVAL '_u'), pre-registered and
# accepted on default-gen2-6x100 (docs/decision-validation.md, "Decision v3.2"); 3-run studies are
# decided exactly as under v3.1.1. v3.3 (tag `decision-v3.3`): the gap and its bound take the run part
# from its two variance components instead (RULE_INTERVAL), pre-registered, chosen on three designs
# and accepted on default-gen2-6x100-b at 6 x 100 and 6 x 400 (docs/decision-validation.md, "Decision
# v3.3"); 3-run studies are still decided exactly as under v3.1.1.
RULE_VERSION = "decision-v3.3"
DECIDED = ("gap_to_oracle", "policy_gain")
# The figure whose CI's upper end a decided figure needs below its threshold to hold. The cross-run
# gap is biased down (the oracle chosen on run a is no oracle on run b), so a `stop` on it would be
# anti-conservative; ``gap_to_oracle_bound`` scores run b's own oracle, chosen on the very data it is
# scored on (biased up by the winner's curse): a bound from above. The gap exceeds on the cross-run
# figure and holds on the bound, conservative both ways.
HOLD_BY = {"gap_to_oracle": "gap_to_oracle_bound"}
ARMS = ("off", "on", "free")
BASELINES = ("global", "phase-keyed")  # the policy figure's baseline: the better of them on validation
RUNTIME_DISPATCH = "needs runtime dispatch inside the graph"


@dataclass(frozen=True)
class Keys:
    fit: np.ndarray  # (n_fit_rows,) key code of each fit row
    score: np.ndarray  # (n_score_rows,) key code, -1 for keys unseen in fit
    k: int


@dataclass
class Layout:
    mode: str
    n: int
    n_train: int
    n_fit: int
    names: tuple[str, ...]
    tile: np.ndarray
    native: np.ndarray
    cols: dict  # arm -> columns of us (arms with at least one candidate)
    deployable: tuple[str, ...]  # selected from in this mode
    runtime: tuple[str, ...]  # graph mode: kv-keyed policies, reported as needing runtime dispatch
    keys: dict  # (window, policy) -> Keys; window 'train' (scores test) or 'fit' (scores validation)
    phase: np.ndarray  # (n,) 1 for prefill, 0 for decode
    plan: np.ndarray  # (n, C) plan charge per call
    dispatch: dict  # policy -> µs per lookup (0 in graph mode)
    switch_us: float
    deviation_us: float
    z: float
    compile_us: np.ndarray  # (C,) compile amortized per invocation
    boot: np.ndarray  # (B, n_test) resample counts
    confidence: float


def _keys(md: ModeData, name: str, fit_rows: slice, score_rows: slice, opts: Options, seed: int) -> Keys:
    pol = registry.make(name)
    if isinstance(pol, registry.Clustered):
        pol.clusters, pol.seed = opts.clusters, seed
    feats = md.features
    pol.prepare(feats.iloc[fit_rows])
    codes, uniques = registry.key_codes(pol.keys(feats.iloc[fit_rows]))
    index = {u: i for i, u in enumerate(uniques)}
    score = np.array([index.get(k, -1) for k in pol.keys(feats.iloc[score_rows])], dtype=np.int64)
    return Keys(codes, score, len(uniques))


def layout(md: ModeData, opts: Options, costs: LifecycleCosts, train_fraction: float, seed: int) -> Layout:
    """What the procedure fixes before it sees a timing (see the module docstring)."""
    n = md.us.shape[1]
    n_train, n_fit = measured.split(n, train_fraction, opts.validation_fraction)
    deployable = registry.deployable_in(md.mode)
    runtime = tuple(p for p in registry.DEPLOYABLE if p not in deployable)
    keys = {}
    for window, fit_rows, score_rows in (
        ("train", slice(0, n_train), slice(n_train, n)),
        ("fit", slice(0, n_fit), slice(n_fit, n_train)),
    ):
        for name in ("global", "phase-keyed", *deployable, *runtime):
            keys[(window, name)] = _keys(md, name, fit_rows, score_rows, opts, seed)
    idx = measured.boot_indices(
        n - n_train, opts.bootstrap_resamples, measured.group_seed(seed, md.mode, "fig")
    )
    boot = np.zeros((len(idx), n - n_train))
    np.add.at(boot, (np.repeat(np.arange(len(idx)), n - n_train), idx.ravel()), 1.0)
    graph = md.mode == "graph"
    dispatch = {p: 0.0 if graph else costs.dispatch_for(p)[0] for p in registry.REGISTRY}
    switch = costs.switch_for(md.mode)
    return Layout(
        md.mode,
        n,
        n_train,
        n_fit,
        tuple(md.names),
        md.tile,
        md.native,
        {a: md.arm_cols(a) for a in ARMS if len(md.arm_cols(a))},
        deployable,
        runtime if graph else (),
        keys,
        (md.features["phase"].astype(str).to_numpy() == "prefill").astype(np.int64),
        measured.plan_charges(md, costs, opts),
        dispatch,
        switch,
        dispatch["regret-aware"] + switch,
        float(stats.norm.ppf(opts.confidence)),
        np.array([costs.compile_s.get(c, 0.0) for c in md.names]) * 1e6 / opts.deployment_invocations,
        boot,
        opts.confidence,
    )  # fmt: skip  (one constructor, read top to bottom)


# ----------------------------------------------------------------------------------------------
# Fitting and charging
# ----------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One call's timings and the rows its test positions hold: us, sem2 (S, R, N, C); rows (S,
    n_test) or None: which of the trace's test invocations sit at each test position (redrawn test
    invocations; ``us`` already holds them)."""

    us: np.ndarray
    sem2: np.ndarray
    rows: np.ndarray | None = None


def _test_view(L: Layout, b: Batch):
    """(phase (S|1, n_test), plan (S|1, n_test, C)) of the test positions."""
    nt = L.n_train
    if b.rows is None:
        return L.phase[None, nt:], L.plan[None, nt:]
    return L.phase[nt + b.rows], L.plan[nt + b.rows]


def fit(L: Layout, b: Batch, window: str, policy: str, arm: str):
    """(choice (S, R, n_score) in columns of us, charge (S, R, n_score)) of ``policy`` in ``arm``
    fitted on the window's fit rows of every (seed, run)."""
    keys = L.keys[(window, policy)]
    cols = L.cols[arm]
    n_fit = L.n_train if window == "train" else L.n_fit
    fit_rows = slice(0, n_fit)
    objective = b.us[:, :, fit_rows][..., cols] + L.plan[fit_rows][:, cols]
    regret = None
    if policy == "regret-aware":
        regret = (L.z, L.deviation_us, b.sem2[:, :, fit_rows][..., cols])
    best, fb = registry.fit_keyed(keys.fit, keys.k, objective, regret)
    if window == "train":
        score = keys.score if b.rows is None else keys.score[b.rows]
        phase, plan = _test_view(L, b)
    else:
        score, phase, plan = keys.score, L.phase[None, L.n_fit : L.n_train], L.plan[None, L.n_fit : L.n_train]
    score = np.broadcast_to(score, (best.shape[0], score.shape[-1]))
    picked = np.take_along_axis(
        best, np.broadcast_to(np.maximum(score, 0)[:, None], (*fb.shape, score.shape[-1])), -1
    )
    choice = cols[np.where(score[:, None] >= 0, picked, fb[..., None])]
    return choice, charge(
        choice, phase[:, None], plan[:, None], L.dispatch[policy], L.switch_us, L.compile_us
    )


def _gather(us: np.ndarray, choice: np.ndarray) -> np.ndarray:
    return np.take_along_axis(us, choice[..., None], axis=-1)[..., 0]


def _validation(L: Layout, b: Batch, order: list) -> tuple[np.ndarray, np.ndarray]:
    """(index into ``order`` of each (seed, run)'s selected policy x arm, index into BASELINES of its
    baseline), both chosen on the validation slice of the run's train (fitted on the part before it):
    the baseline is the better of global and phase-keyed there, the policy the one with the best net
    gain over it. Ties keep the first; without a validation slice, the first of each."""
    S, R = b.us.shape[:2]
    if not (L.n_fit >= 1 and L.n_train - L.n_fit >= 1) or not order:
        return np.zeros((S, R), np.int64), np.zeros((S, R), np.int64)
    uv = b.us[:, :, L.n_fit : L.n_train]

    def net(policy, arm):
        choice, cost = fit(L, b, "fit", policy, arm)
        return (_gather(uv, choice) + cost).mean(axis=-1)

    base_nets = np.stack([net(p, "free") for p in BASELINES], axis=-1)
    baseline = np.argmin(base_nets, axis=-1)
    base = base_nets.min(axis=-1)
    gains = np.stack([100.0 * (base - net(p, a)) / base for p, a in order], axis=-1)
    return np.argmax(gains, axis=-1), baseline


def _stacked(picks: dict, names: list, index: np.ndarray):
    """The (choice, charge) of names[index] per (seed, run)."""
    ch = np.stack([picks[n][0] for n in names], axis=-1)
    co = np.stack([picks[n][1] for n in names], axis=-1)
    sel = np.broadcast_to(index[:, :, None, None], (*ch.shape[:3], 1))
    return np.take_along_axis(ch, sel, -1)[..., 0], np.take_along_axis(co, sel, -1)[..., 0]


def _fusion_within_phase(L: Layout, ut: np.ndarray, phase_choice: np.ndarray) -> np.ndarray:
    """Per test invocation, fused or not (chosen on the same run's test) at the phase-keyed tile."""
    ours = ~L.native
    mask = ours[None, None, None, :] & (L.tile[None, None, None, :] == L.tile[phase_choice][..., None])
    return np.argmin(np.where(mask, ut, np.inf), axis=-1)


def choices(L: Layout, b: Batch) -> dict:
    """(picks, order, selected, baseline): picks {name: (choice (S, R, n_test), charge (S, R,
    n_test))} of everything the figures score; order: the policy x arm candidates of the selection;
    selected (S, R): each run's index into it; baseline (S, R): its index into BASELINES."""
    nt = L.n_train
    picks = {}
    for arm in L.cols:
        for p in ("global", *L.deployable, *L.runtime):
            picks[f"{p}@{arm}"] = fit(L, b, "train", p, arm)
    picks["phase"] = fit(L, b, "train", "phase-keyed", "free")
    picks["global"] = picks["global@free"]
    ut = b.us[:, :, nt:]
    zero = np.zeros(ut.shape[:-1])
    free = L.cols["free"]
    picks["oracle"] = (free[np.argmin(ut[..., free], axis=-1)], zero)
    picks["oracle_b"] = picks["oracle"]
    picks["fwp"] = (_fusion_within_phase(L, ut, picks["phase"][0]), zero)
    order = [(p, a) for a in L.cols for p in L.deployable]
    selected, baseline = _validation(L, b, order)
    picks["selected"] = _stacked(picks, [f"{p}@{a}" for p, a in order], selected)
    picks["baseline"] = _stacked(picks, ["global", "phase"], baseline)
    if L.runtime:
        rt_order = [(p, "free") for p in L.runtime]
        rt, _ = _validation(L, b, rt_order)
        picks["runtime"] = _stacked(picks, [f"{p}@free" for p, _ in rt_order], rt)
    for c in np.flatnonzero(L.native):
        picks[f"native:{L.names[c]}"] = (np.full(ut.shape[:-1], c), zero)
    return picks, order, selected, baseline


# ----------------------------------------------------------------------------------------------
# Scoring on other runs, and the intervals
# ----------------------------------------------------------------------------------------------


def pairs(R: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of every ordered pair of distinct runs: fitted on a, scored on b."""
    ab = list(permutations(range(R), 2))
    return np.array([a for a, _ in ab], np.int64), np.array([b for _, b in ab], np.int64)


def _pct(a, b, of):
    return lambda G, N: 100.0 * (a(G, N) - b(G, N)) / of(G, N)


def specs(L: Layout, picks: dict) -> dict:
    """figure -> (function of gross sums G and net sums N (dicts of arrays), phase mask or None)."""
    g = lambda k: lambda G, N: G[k]  # noqa: E731
    n = lambda k: lambda G, N: N[k]  # noqa: E731
    out = {
        "gap_to_oracle": (_pct(g("global"), g("oracle"), g("oracle")), None),
        "gap_to_oracle_bound": (_pct(g("global"), g("oracle_b"), g("oracle_b")), None),
        "policy_gain": (_pct(n("baseline"), n("selected"), n("baseline")), None),
        "phase_split_gain": (_pct(n("global"), n("phase"), n("global")), None),
        "policy_gain_vs_global": (_pct(n("global"), n("selected"), n("global")), None),
        "policy_gain_vs_phase": (_pct(n("phase"), n("selected"), n("phase")), None),
        "made_of_phase_split": (_pct(g("global"), g("phase"), g("oracle")), None),
        "made_of_fusion_within_phase": (_pct(g("phase"), g("fwp"), g("oracle")), None),
        "made_of_tile_within_phase": (_pct(g("fwp"), g("oracle"), g("oracle")), None),
    }
    if "runtime" in picks:
        out["policy_gain_runtime_dispatch"] = (_pct(n("baseline"), n("runtime"), n("baseline")), None)
    if {"off", "on"} <= set(L.cols):
        out["fusion_speedup"] = (lambda G, N: G["global@off"] / G["global@on"], None)
        for ph, code in (("prefill", 1), ("decode", 0)):
            if (L.phase[L.n_train :] == code).any():
                fn = lambda G, N: G["off@phase"] / G["on@phase"]  # noqa: E731
                out[f"fusion_speedup_{ph}"] = (fn, code)
    if "off" in L.cols:
        out["kernel_vs_best_unfused"] = (lambda G, N: G["global@off"] / G["global@free"], None)
    for k in picks:
        if k.startswith("native:"):
            out[f"kernel_vs_{k[7:]}"] = (lambda G, N, k=k: G[k] / G["global@free"], None)
    return out


def _phase_picks(L: Layout, b: Batch, picks: dict) -> dict:
    """Phase-keyed in the off and on arms (the per-phase fusion speedups' two sides)."""
    if not {"off", "on"} <= set(L.cols):
        return {}
    return {
        "off@phase": fit(L, b, "train", "phase-keyed", "off"),
        "on@phase": fit(L, b, "train", "phase-keyed", "on"),
    }


def _sums(score, picks, mask, boot):
    """Gross and net sums per pick (``score(name, choice, charge)`` -> per-invocation gross and net):
    per pair (S, P); with ``boot``, per resample (S, P, B) and the per-invocation values (S, P, n)."""
    G, N, GB, NB, X, XN = {}, {}, {}, {}, {}, {}
    for k, (ch, co) in picks.items():
        gross, net = score(k, ch, co)
        if mask is not None:
            gross, net = gross * mask, net * mask
        G[k], N[k] = gross.sum(-1), net.sum(-1)
        if boot is not None:
            GB[k], NB[k] = gross @ boot.T, net @ boot.T
            X[k], XN[k] = gross, net
    return G, N, GB, NB, X, XN


# The figures whose interval is the rule's bootstrap-t (decision-v3.1: the decided ones and their
# bounds), each with the validation's other candidates beside it; every other figure keeps the Welch t.
CANDIDATES_FOR = (*DECIDED, *HOLD_BY.values())
# Of those, the figures whose rule interval is not '_b' (bootstrap-t with the jackknife run part), by
# the engine suffix of the one they take. The gap and its bound: their noise is nearly all
# pair-specific, where the jackknife over runs is biased up (docs/decision-validation.md, "What the
# misses are made of", 4-5). decision-v3.2 gave them '_u' (the unbiased run part, clipped at 0: it
# under-covers at 400 invocations); decision-v3.3 gives them '_c', the run part from its two variance
# components on their Satterthwaite df (``interval.run_variance_components``; "Decision v3.3").
# Below four runs both are the jackknife's. The policy figure keeps the jackknife, whose excess covers
# the spread of its seeds' own truths (ibid., 5).
RULE_INTERVAL = {"gap_to_oracle": "_c", **{bound: "_c" for bound in HOLD_BY.values()}}


def _candidates(L: Layout, name: str, fn, sums, iv: dict, per_pair, per_boot, pair_runs, n_test: int) -> dict:
    """The candidate intervals of figure ``name`` (``intervals``): '_lo_w'/'_hi_w' the Welch t interval
    (decision v3's), '_lo_n'/'_hi_n' t on n_test - 1 df, '_lo_b'/'_hi_b' bootstrap-t with the
    jackknife run part (decision v3.1's), '_lo_u'/'_hi_u' bootstrap-t with the unbiased run part (the
    jackknife's below 4 runs), '_lo_c'/'_hi_c' bootstrap-t with the run part from its two variance
    components on their Welch-Satterthwaite df and '_lo_c1'/'_hi_c1' the same on R - 1 df
    (``interval.run_variance_components``; the jackknife's below 4 runs); '_lo'/'_hi' the rule's:
    ``RULE_INTERVAL``'s for its figures, '_b' otherwise. The SE, df and p-value stay the Welch t's (a figure exceeds on Holm over the t
    p-values). pair_runs: (A, B, R) of ``pairs``."""
    G, N, GB, NB, X, XN = sums
    A, B, R = pair_runs
    lo_n, hi_n = interval.t_ntest(L.confidence, iv, n_test)
    out = {"_lo_w": iv["_lo"], "_hi_w": iv["_hi"], "_lo_n": lo_n, "_hi_n": hi_n}
    with np.errstate(invalid="ignore", divide="ignore"):
        u0 = interval.linear_terms(fn, (G, N), (X, XN))
        ub = interval.linear_terms(fn, (GB, NB), (X, XN))
    pivot, se_inv = interval.pivots(iv, per_boot, u0, ub, L.boot)
    out["_lo_b"], out["_hi_b"] = interval.ends(L.confidence, iv, pivot, se_inv, R)
    unbiased = interval.run_variance_unbiased(per_pair, A, B, R)
    var_u = np.where(np.isfinite(unbiased), np.maximum(unbiased, 0.0), iv["_var_runs"])
    out["_lo_u"], out["_hi_u"] = interval.ends(L.confidence, iv, pivot, se_inv, R, var_u)
    var_c, df_c = interval.run_variance_components(per_pair, A, B, R)
    few = ~np.isfinite(var_c)  # below 4 runs: the jackknife's, as for '_u'
    var_c, df_c = np.where(few, iv["_var_runs"], var_c), np.where(few, max(R - 1, 1), df_c)
    out["_lo_c"], out["_hi_c"] = interval.ends(L.confidence, iv, pivot, se_inv, R, var_c, df_c)
    out["_lo_c1"], out["_hi_c1"] = interval.ends(L.confidence, iv, pivot, se_inv, R, var_c)
    rule = RULE_INTERVAL.get(name, "_b")
    out["_lo"], out["_hi"] = out["_lo" + rule], out["_hi" + rule]
    return out


def _pair_scorer(ut, A, B):
    """Choices of run a scored on run b; ``oracle_b``: run b's own oracle (chosen on what scores it)."""

    def score(k, ch, co):
        if k == "oracle_b":
            gross = _gather(ut, ch)[:, B]
            return gross, gross
        gross = np.take_along_axis(ut[:, B], ch[:, A][..., None], -1)[..., 0]
        return gross, gross + co[:, A]

    return score


def _truth_scorer(tt, free):
    """Every run's choices scored on the true surface; ``oracle_b``: the true oracle."""

    def score(k, ch, co):
        gross = tt[..., free].min(-1) if k == "oracle_b" else _gather(tt, ch)
        return gross, gross + co

    return score


def figures(L: Layout, b: Batch, truth: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Every figure of one mode for S studies at once: {'<figure>': estimate (S,), '<figure>_lo',
    '_hi' (its interval: the rule's bootstrap-t for ``CANDIDATES_FOR``, which add '_lo_w'/'_hi_w',
    '_lo_n'/'_hi_n', '_lo_b'/'_hi_b', '_lo_u'/'_hi_u', '_lo_c'/'_hi_c' and '_lo_c1'/'_hi_c1'; Welch t
    otherwise), '_se', '_df'}; with ``truth`` ((N, C), or per seed (S, N, C)) also '<figure>_true', the
    same fits scored on the true surface (mean over the runs' fits); 'gap_to_oracle_same_run' (v1);
    'selected' (S, R) and 'baseline' (S, R) indices (see ``choices``)."""
    S, R, N, C = b.us.shape
    nt = L.n_train
    picks, order, selected, baseline = choices(L, b)
    picks.update(_phase_picks(L, b, picks))
    A, B = pairs(R)
    ut = b.us[:, :, nt:]
    phase_t, _ = _test_view(L, b)
    out = {"selected": selected, "baseline": baseline, "order": order}
    tt = None
    if truth is not None:
        tt = np.asarray(truth)[..., nt:, :]
        tt = np.broadcast_to(tt if tt.ndim == 2 else tt[:, None], (S, R, N - nt, C))
    sums, true_sums = {}, {}
    for name, (fn, code) in specs(L, picks).items():
        if code not in sums:
            mask = None if code is None else (phase_t == code)[:, None].astype(float)
            sums[code] = _sums(_pair_scorer(ut, A, B), picks, mask, L.boot)
            if tt is not None:
                true_sums[code] = _sums(_truth_scorer(tt, L.cols["free"]), picks, mask, None)
        G, Nn, GB, NB = sums[code][:4]
        with np.errstate(invalid="ignore", divide="ignore"):  # a seed without a phase: NaN
            per_pair, per_boot = fn(G, Nn), fn(GB, NB)
            if tt is not None:
                out[name + "_true"] = fn(*true_sums[code][:2]).mean(axis=1)
        iv = interval.interval(L.confidence, per_pair, per_boot, A, B, R)
        out.update({name + k: v for k, v in iv.items() if k != "_var_runs"})
        if name in CANDIDATES_FOR:
            cand = _candidates(L, name, fn, sums[code], iv, per_pair, per_boot, (A, B, R), N - nt)
            out.update({name + k: v for k, v in cand.items()})
    same = [_gather(ut, picks[k][0]).sum(-1) for k in ("global", "oracle")]
    out["gap_to_oracle_same_run"] = (100.0 * (same[0] - same[1]) / same[1]).mean(axis=1)
    return out


# ----------------------------------------------------------------------------------------------
# The rule over one Holm family
# ----------------------------------------------------------------------------------------------


def p_above(est, se, df, threshold) -> np.ndarray:
    """One-sided p-value of H0: figure <= threshold (NaN without an SE or with df < 1)."""
    est, se, df = (np.asarray(x, float) for x in (est, se, df))
    ok = np.isfinite(se) & np.isfinite(est) & (df >= 1)
    scale = np.maximum(np.where(ok, se, 1.0), 1e-12 * max(1.0, abs(float(threshold))))
    with np.errstate(invalid="ignore"):
        p = stats.t.sf((np.where(ok, est, 0.0) - threshold) / scale, np.where(ok, df, 1.0))
    return np.where(ok, p, np.nan)


def holm(p: np.ndarray, alpha: float) -> np.ndarray:
    """Which nulls Holm's step-down procedure rejects at family-wise level ``alpha``; p (..., m), a
    NaN p-value is never rejected (and counts in the family)."""
    p = np.asarray(p, float)
    m = p.shape[-1]
    order = np.argsort(np.where(np.isnan(p), np.inf, p), axis=-1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=-1)
    ok = np.cumprod(sorted_p <= alpha / (m - np.arange(m)), axis=-1).astype(bool)
    reject = np.zeros(p.shape, bool)
    np.put_along_axis(reject, order, ok, axis=-1)
    return reject


def rule(family: list[dict], alpha: float) -> dict[str, np.ndarray]:
    """One Holm family of decided figures, each {'estimate', 'se', 'df', 'ci_high', 'threshold'} with
    arrays (S,): 'exceeds' and 'holds' (S, m) and 'verdict' (S,).

    A figure exceeds when Holm rejects "figure <= threshold" at family-wise level alpha (t p-values on
    'se' and 'df'); it holds when its CI's upper end ('ci_high': the bootstrap-t interval's in a study,
    ``CANDIDATES_FOR``) lies below the threshold. ``continue`` when any figure exceeds; ``stop`` when
    every figure holds (an intersection-union test: each figure's own test at its level, no
    multiplicity correction needed since every one must reject); otherwise ``no-decision``."""
    if not family:
        return {
            "exceeds": np.zeros((1, 0), bool),
            "holds": np.zeros((1, 0), bool),
            "verdict": np.array(["no-decision"]),
        }
    pv = np.stack([p_above(f["estimate"], f["se"], f["df"], f["threshold"]) for f in family], axis=-1)
    exceeds = holm(pv, alpha)
    holds = np.stack([np.asarray(f["ci_high"], float) < f["threshold"] for f in family], axis=-1)
    verdict = np.where(exceeds.any(-1), "continue", np.where(holds.all(-1), "stop", "no-decision"))
    return {"p_value": pv, "exceeds": exceeds, "holds": holds, "verdict": verdict}
