"""The one cross-run estimator: fitting, cost charging, scoring on other runs and the interval, as
array operations over a leading seed axis. A study is one seed (``us`` of shape (1, R, N, C)); the
validation simulator (tools/validation) passes many seeds at once and holds no procedure of its own.
policy_eval, the decision and the recommendation all read their figures from here.

``Layout`` is what the procedure fixes before it sees a timing: the train/test split, the keys every
registry policy (and a family's config table) assigns to the fit and score rows (clustered's k-means sees shapes only), the
invocations' category codes, weights and strata, the lifecycle charges per invocation and candidate,
the bootstrap's invocation resamples. ``figures`` then fits every policy of every (seed, run) through the
registry's ``fit_keyed``, charges the costs (``costs.charge``), selects on the validation slice,
scores every ordered pair of runs (fitted on run a, scored on run b: no choice sees the numbers that
score it), pools them, and gives every figure the two-way bootstrap's percentile interval
(``interval``).

Every sum over invocations is weighted by the trace's ``weight`` (how many of the window's invocations
an invocation stands for: 1 unless the trace sampler stratified by step kind), so trace-weighted
figures are unbiased for the workload.

Fitting objective: each keyed policy takes, per key, the candidate with the least weighted summed
latency plus per-call charge (plan builds); switches and compiles depend on the whole sequence and are
left out of the per-key argmin, so the fit approximates the net cost it is scored on (regret-aware
charges a switch for deviating). Scoring charges everything (``costs.charge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np
from scipy.special import ndtri  # the normal quantile (scipy.stats.norm.ppf is ndtri)

from headroom.core.names import (
    CATEGORY_KEYED,
    CATEGORY_SPLIT_GAIN,
    CONFIG_TABLE,
    GAIN_VS_CATEGORY,
    MADE_OF_BASE_WITHIN_CATEGORY,
    MADE_OF_CATEGORY_SPLIT,
    MADE_OF_FUSION_WITHIN_CATEGORY,
)
from headroom.decide import interval, measured, registry
from headroom.decide.costs import LifecycleCosts, charge
from headroom.decide.measured import ModeData, Options

ARMS = measured.FUSION_ARMS
# The column set of our candidates alone (natives out): not an arm, what ``kernel_vs_*`` compares.
OURS = "ours"
BASELINES = ("global", CATEGORY_KEYED)  # the policy figure's baseline: the better of them on validation
RUNTIME_DISPATCH = "needs runtime dispatch inside the graph"


@dataclass(frozen=True)
class Keys:
    fit: np.ndarray  # (n_fit_rows,) key code of each fit row
    score: np.ndarray  # (n_score_rows,) key code, -1 for keys unseen in fit
    k: int
    fixed: tuple[str, ...] | None = None  # config-table's: the candidate each code's entry names


@dataclass
class Layout:
    mode: str
    n: int
    n_train: int
    n_fit: int
    names: tuple[str, ...]
    policies: tuple[str, ...]  # every policy policy_eval scores (registry.policies_of the family's keying)
    base: np.ndarray  # (C,) each candidate's base config (``ModeData.base``)
    native: np.ndarray
    cols: dict  # arm -> columns of us (the arms with at least one candidate; `free`: every competing one)
    arm_cols: dict  # every column set a policy is fitted in: the arms, and OURS where we have candidates
    deployable: tuple[str, ...]  # selected from in this mode
    runtime: tuple[str, ...]  # graph mode: policies keyed beyond capture (they need runtime dispatch)
    keys: dict  # (window, policy) -> Keys; window 'train' (scores test) or 'fit' (scores validation)
    category: np.ndarray  # (n,) category code (Keying.category_codes; attention: 1 prefill, 0 decode)
    weight: np.ndarray  # (n,) invocations of the workload each one stands for
    strata: np.ndarray  # (n,) stratum code (step kind): the bootstrap resamples within it
    plan: np.ndarray  # (n, C) plan charge per call
    dispatch: dict  # policy -> µs per lookup (0 in graph mode)
    switch_us: float
    deviation_us: float
    z: float
    compile_us: np.ndarray  # (C,) compile amortized per invocation
    boot: np.ndarray  # (B, n_test) invocation resample counts
    confidence: float
    seed: int


def _keys(md: ModeData, name: str, fit_rows: slice, score_rows: slice, opts: Options, seed: int) -> Keys:
    if name == CONFIG_TABLE:
        return _table_keys(md, fit_rows, score_rows)
    pol = registry.make(name, md.keying)
    if isinstance(pol, registry.Clustered):
        pol.clusters, pol.seed = opts.clusters, seed
    feats = md.features
    pol.prepare(feats.iloc[fit_rows])
    codes, uniques = registry.key_codes(pol.keys(feats.iloc[fit_rows]))
    index = {u: i for i, u in enumerate(uniques)}
    score = np.array([index.get(k, -1) for k in pol.keys(feats.iloc[score_rows])], dtype=np.int64)
    return Keys(codes, score, len(uniques))


def _table_keys(md: ModeData, fit_rows: slice, score_rows: slice) -> Keys:
    """config-table's keys: each row's nearest table entry, coded by the entry's place in the table
    (every entry a key, seen in fit or not), with the candidate each entry names."""
    pol = registry.make(CONFIG_TABLE, md.keying)
    index = {m: i for i, (m, _) in enumerate(md.keying.table)}

    def codes(rows: slice) -> np.ndarray:
        return np.array([index.get(k, -1) for k in pol.keys(md.features.iloc[rows])], np.int64)

    return Keys(codes(fit_rows), codes(score_rows), len(index), tuple(c for _, c in md.keying.table))


def layout(
    md: ModeData, opts: Options, costs: LifecycleCosts, train_fraction: float, seed: int, every=False
) -> Layout:
    """What the procedure fixes before it sees a timing (see the module docstring); ``every``: the
    keys of every keyed policy of the registry (policy_eval scores them all), not only the decision's."""
    n = md.us.shape[1]
    n_train, n_fit = measured.split(n, train_fraction, opts.validation_fraction)
    deployable = registry.deployable_in(md.mode)
    runtime = tuple(p for p in registry.DEPLOYABLE if p not in deployable)
    keys = {}
    for window, fit_rows, score_rows in (
        ("train", slice(0, n_train), slice(n_train, n)),
        ("fit", slice(0, n_fit), slice(n_fit, n_train)),
    ):
        named = (
            registry.keyed_of(md.keying)
            if every
            else ("global", CATEGORY_KEYED, *deployable, *runtime, *registry.RICHER)
        )
        for name in named:
            if (window, name) not in keys:
                keys[(window, name)] = _keys(md, name, fit_rows, score_rows, opts, seed)
    strata = measured.strata_of(md.features)
    rng = measured.group_seed(seed, md.mode, "fig")
    boot = interval.invocation_counts(strata[n_train:], opts.bootstrap_resamples, rng)
    graph = md.mode == "graph"
    policies = registry.policies_of(md.keying)
    dispatch = {p: 0.0 if graph else costs.dispatch_for(p)[0] for p in policies if p != "oracle"}
    switch = costs.switch_for(md.mode)
    return Layout(
        md.mode,
        n,
        n_train,
        n_fit,
        tuple(md.names),
        policies,
        md.base,
        md.native,
        {a: md.arm_cols(a) for a in md.arms()},
        {**{a: md.arm_cols(a) for a in md.arms()}, **({OURS: md.ours()} if len(md.ours()) else {})},
        deployable,
        runtime if graph else (),
        keys,
        md.keying.category_codes(md.features),
        measured.weights_of(md.features),
        strata,
        measured.plan_charges(md, costs, opts),
        dispatch,
        switch,
        dispatch["regret-aware"] + switch,
        float(ndtri(opts.confidence)),
        np.array([costs.compile_s.get(c, 0.0) for c in md.names]) * 1e6 / opts.deployment_invocations,
        boot,
        opts.confidence,
        int(seed),
    )  # fmt: skip  (one constructor, read top to bottom)


# ----------------------------------------------------------------------------------------------
# Fitting and charging
# ----------------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One call's timings and the rows its test positions hold: us, sem2 (S, R, N, C); rows (S,
    n_test) or None: which of the trace's test invocations sit at each test position (the simulator's
    redrawn test invocations, drawn within each position's stratum; ``us`` already holds them)."""

    us: np.ndarray
    sem2: np.ndarray
    rows: np.ndarray | None = None


def _test_view(L: Layout, b: Batch):
    """(category (S|1, n_test), plan (S|1, n_test, C), weight (S|1, n_test)) of the test positions."""
    nt = L.n_train
    if b.rows is None:
        return L.category[None, nt:], L.plan[None, nt:], L.weight[None, nt:]
    return L.category[nt + b.rows], L.plan[nt + b.rows], L.weight[nt + b.rows]


def fit(L: Layout, b: Batch, window: str, policy: str, arm: str):
    """(choice (S, R, n_score) in columns of us, charge (S, R, n_score)) of ``policy`` in ``arm``
    fitted on the window's fit rows of every (seed, run)."""
    keys = L.keys[(window, policy)]
    cols = L.arm_cols[arm]
    n_fit = L.n_train if window == "train" else L.n_fit
    fit_rows = slice(0, n_fit)
    objective = b.us[:, :, fit_rows][..., cols] + L.plan[fit_rows][:, cols]
    regret = None
    if policy == "regret-aware":
        regret = (L.z, L.deviation_us, b.sem2[:, :, fit_rows][..., cols])
    if keys.fixed is None:
        best, fb = registry.fit_keyed(keys.fit, keys.k, objective, regret, weight=L.weight[fit_rows])
    else:
        best, fb = _fixed(keys.fixed, L.names, cols, objective, L.weight[fit_rows])
    if window == "train":
        score = keys.score if b.rows is None else keys.score[b.rows]
        category, plan, _ = _test_view(L, b)
    else:
        val = slice(L.n_fit, L.n_train)
        score, category, plan = keys.score, L.category[None, val], L.plan[None, val]
    score = np.broadcast_to(score, (best.shape[0], score.shape[-1]))
    picked = np.take_along_axis(
        best, np.broadcast_to(np.maximum(score, 0)[:, None], (*fb.shape, score.shape[-1])), -1
    )
    choice = cols[np.where(score[:, None] >= 0, picked, fb[..., None])]
    return choice, charge(
        choice, category[:, None], plan[:, None], L.dispatch[policy], L.switch_us, L.compile_us
    )


def _fixed(named: tuple[str, ...], names, cols: np.ndarray, us: np.ndarray, weight: np.ndarray):
    """(best (..., k), fb (...)) of a fixed table in ``fit_keyed``'s form: each key's named candidate
    as its column in the arm's ``cols``; a key whose candidate the arm lacks takes the global column
    (``global_column`` of ``us`` (..., n, len(cols)), as fit_keyed's)."""
    fb = registry.global_column(us, weight)
    at = {names[c]: i for i, c in enumerate(cols)}
    col = np.array([at.get(c, -1) for c in named], np.int64)
    return np.where(col >= 0, col, fb[..., None]), fb


def _gather(us: np.ndarray, choice: np.ndarray) -> np.ndarray:
    return np.take_along_axis(us, choice[..., None], axis=-1)[..., 0]


def validation(L: Layout, b: Batch, order: list) -> dict:
    """The choice on the validation slice of each run's train (fitted on the part before it):
    'nets' (S, R, len(order)) each policy x arm's weighted net µs there, 'base_nets' (S, R, 2) those of
    BASELINES, 'baseline' (S, R) the better baseline's index, 'selected' (S, R) the index into
    ``order`` of the best net gain over it. Ties keep the first; without a validation slice (or an
    empty order), the first of each and no nets."""
    S, R = b.us.shape[:2]
    if not (L.n_fit >= 1 and L.n_train - L.n_fit >= 1) or not order:
        zeros = np.zeros((S, R), np.int64)
        return {"selected": zeros, "baseline": zeros, "nets": None, "base_nets": None}
    uv = b.us[:, :, L.n_fit : L.n_train]
    wv = L.weight[L.n_fit : L.n_train]

    def net(policy, arm):
        choice, cost = fit(L, b, "fit", policy, arm)
        return ((_gather(uv, choice) + cost) * wv).sum(axis=-1)

    base_nets = np.stack([net(p, "free") for p in BASELINES], axis=-1)
    base = base_nets.min(axis=-1)
    nets = np.stack([net(p, a) for p, a in order], axis=-1)
    selected = np.argmax(100.0 * (base[..., None] - nets) / base[..., None], axis=-1)
    return {
        "selected": selected,
        "baseline": np.argmin(base_nets, axis=-1),
        "nets": nets,
        "base_nets": base_nets,
    }


def _stacked(picks: dict, names: list, index: np.ndarray):
    """The (choice, charge) of names[index] per (seed, run)."""
    ch = np.stack([picks[n][0] for n in names], axis=-1)
    co = np.stack([picks[n][1] for n in names], axis=-1)
    sel = np.broadcast_to(index[:, :, None, None], (*ch.shape[:3], 1))
    return np.take_along_axis(ch, sel, -1)[..., 0], np.take_along_axis(co, sel, -1)[..., 0]


def _fusion_within_category(L: Layout, ut: np.ndarray, category_choice: np.ndarray) -> np.ndarray:
    """Per test invocation, fused or not (chosen on the same run's test) at the category-keyed
    candidate's base config; a native category-keyed choice has no fusion arm: itself."""
    choice = category_choice[..., None]  # (S, R, n_test, 1)
    ours = ~L.native
    mask = (ours & ours[choice] & (L.base == L.base[choice])) | (np.arange(len(L.base)) == choice)
    return np.argmin(np.where(mask, ut, np.inf), axis=-1)


def choices(L: Layout, b: Batch) -> tuple[dict, list, np.ndarray, np.ndarray]:
    """(picks, order, selected, baseline): picks {name: (choice (S, R, n_test), charge (S, R,
    n_test))} of everything the figures score; order: the policy x arm candidates of the selection;
    selected (S, R): each run's index into it; baseline (S, R): its index into BASELINES."""
    nt = L.n_train
    picks = {}
    for arm in L.cols:
        for p in ("global", *L.deployable, *L.runtime):
            picks[f"{p}@{arm}"] = fit(L, b, "train", p, arm)
    for p in registry.RICHER:
        picks.setdefault(f"{p}@free", fit(L, b, "train", p, "free"))
    picks["category"] = fit(L, b, "train", CATEGORY_KEYED, "free")
    picks["global"] = picks["global@free"]
    if OURS in L.arm_cols:  # our best global kernel, what kernel_vs_* compares (free's where it is ours)
        same = np.array_equal(L.arm_cols[OURS], L.cols["free"])
        picks[f"global@{OURS}"] = picks["global"] if same else fit(L, b, "train", "global", OURS)
    ut = b.us[:, :, nt:]
    zero = np.zeros(ut.shape[:-1])
    free = L.cols["free"]
    picks["oracle"] = (free[np.argmin(ut[..., free], axis=-1)], zero)
    picks["oracle_all"] = (None, zero)  # chosen on the mean over runs: ``_oracle_all``
    picks["fwc"] = (_fusion_within_category(L, ut, picks["category"][0]), zero)
    order = [(p, a) for a in L.cols for p in L.deployable]
    val = validation(L, b, order)
    selected, baseline = val["selected"], val["baseline"]
    picks["selected"] = _stacked(picks, [f"{p}@{a}" for p, a in order], selected)
    picks["baseline"] = _stacked(picks, ["global", "category"], baseline)
    if L.runtime:
        rt_order = [(p, "free") for p in L.runtime]
        rt = validation(L, b, rt_order)["selected"]
        picks["runtime"] = _stacked(picks, [f"{p}@free" for p, _ in rt_order], rt)
    for c in np.flatnonzero(L.native):
        picks[f"native:{L.names[c]}"] = (np.full(ut.shape[:-1], c), zero)
    return picks, order, selected, baseline


# ----------------------------------------------------------------------------------------------
# Scoring on other runs, and the interval
# ----------------------------------------------------------------------------------------------


def pairs(R: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of every ordered pair of distinct runs: fitted on a, scored on b."""
    ab = list(permutations(range(R), 2))
    return np.array([a for a, _ in ab], np.int64), np.array([b for _, b in ab], np.int64)


def _pct(a, b, of):
    return lambda G, N: 100.0 * (a(G, N) - b(G, N)) / of(G, N)


def specs(L: Layout, picks: dict) -> dict:
    """figure -> (function of gross sums G and net sums N (dicts of arrays), category code to mask
    the test invocations by, or None)."""
    g = lambda k: lambda G, N: G[k]  # noqa: E731
    n = lambda k: lambda G, N: N[k]  # noqa: E731
    out = {
        "gap_to_oracle": (_pct(g("global"), g("oracle"), g("oracle")), None),
        "gap_to_oracle_bound": (_pct(g("global"), g("oracle_all"), g("oracle_all")), None),
        "policy_gain": (_pct(n("baseline"), n("selected"), n("baseline")), None),
        CATEGORY_SPLIT_GAIN: (_pct(n("global"), n("category"), n("global")), None),
        "policy_gain_vs_global": (_pct(n("global"), n("selected"), n("global")), None),
        GAIN_VS_CATEGORY: (_pct(n("category"), n("selected"), n("category")), None),
        MADE_OF_CATEGORY_SPLIT: (_pct(g("global"), g("category"), g("oracle")), None),
        MADE_OF_FUSION_WITHIN_CATEGORY: (_pct(g("category"), g("fwc"), g("oracle")), None),
        MADE_OF_BASE_WITHIN_CATEGORY: (_pct(g("fwc"), g("oracle"), g("oracle")), None),
    }
    if "runtime" in picks:
        out["policy_gain_runtime_dispatch"] = (_pct(n("baseline"), n("runtime"), n("baseline")), None)
    for p in registry.RICHER:
        if f"{p}@free" in picks:
            out[f"richer_gain_{p}"] = (_pct(n("baseline"), n(f"{p}@free"), n("baseline")), None)
    if {"off", "on"} <= set(L.cols):
        out["fusion_speedup"] = (lambda G, N: G["global@off"] / G["global@on"], None)
        for name, code in (("prefill", 1), ("decode", 0)):  # attention's category codes: its arms fuse
            if (L.category[L.n_train :] == code).any():
                fn = lambda G, N: G["off@category"] / G["on@category"]  # noqa: E731
                out[f"fusion_speedup_{name}"] = (fn, code)
    if OURS not in L.arm_cols:  # natives alone: no kernel of ours to compare
        return out
    ours = f"global@{OURS}"
    if {"off", "on"} <= set(L.cols):  # without a fused arm the best unfused is the kernel itself
        out["kernel_vs_best_unfused"] = (lambda G, N: G["global@off"] / G[ours], None)
    for k in picks:
        if k.startswith("native:"):
            out[f"kernel_vs_{k[7:]}"] = (lambda G, N, k=k: G[k] / G[ours], None)
    return out


def _category_picks(L: Layout, b: Batch) -> dict:
    """Category-keyed in the off and on arms (the per-category fusion speedups' two sides)."""
    if not {"off", "on"} <= set(L.cols):
        return {}
    return {
        "off@category": fit(L, b, "train", CATEGORY_KEYED, "off"),
        "on@category": fit(L, b, "train", CATEGORY_KEYED, "on"),
    }


_CHUNK_VALUES = 1 << 18  # float64 values per temporary of _oracle_all: 2 MB


def _oracle_all(ut: np.ndarray, free: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    """The oracle chosen on the mean over runs of each test invocation (S, [B,] n_test) in columns of
    us: over every run (``counts`` None), or over each run resample's draws (counts (B, R))."""
    sub = ut[..., free]  # (S, R, n, Cf)
    if counts is None:
        return free[np.argmin(sub.mean(axis=1), axis=-1)]
    # one seed and a few hundred resamples at a time: the same sums, in temporaries of about 2 MB the
    # allocator reuses, where the whole (S, B, n, Cf) array (15-38 MB in the default study's figures
    # and power batches) was fresh memory on every call, whose page faults took most of the time
    # (data/checks/cpu/2026-12-05-session22)
    S, B, n, C = sub.shape[0], counts.shape[0], sub.shape[2], sub.shape[3]
    step = max(1, _CHUNK_VALUES // (n * C))
    chosen = np.empty((S, B, n), np.intp)
    for s in range(S):
        for b in range(0, B, step):
            chosen[s, b : b + step] = np.argmin(
                np.einsum("br,rnc->bnc", counts[b : b + step], sub[s]), axis=-1
            )
    return free[chosen]


def _pair_scorer(ut, A, B):
    """Choices of run a scored on run b (a pick without choices carries its gross per scoring run);
    ``oracle_all`` is handled by ``_sums``."""

    def score(pick):
        ch, co = pick[:2]
        gross = pick[2][:, B] if ch is None else np.take_along_axis(ut[:, B], ch[:, A][..., None], -1)[..., 0]
        return gross, gross + co[:, A]

    return score


def _truth_scorer(tt):
    """Every run's choices scored on the true surface (a pick without choices: its own gross)."""

    def score(pick):
        ch, co = pick[:2]
        gross = pick[2] if ch is None else _gather(tt, ch)
        return gross, gross + co

    return score


class _Lazy(dict):
    """A dict whose missing key is computed on first use: each pick is summed only if a figure reads it."""

    def __init__(self, make):
        super().__init__()
        self._make = make

    def __missing__(self, key):
        self[key] = value = self._make(key)
        return value


def _sums(score, picks, weight, mask, boot=None, oracle_all=None):
    """Weighted gross and net sums per pick: per pair (S, P); with ``boot`` (B, n) also per resample
    (S, P, B). ``oracle_all``: (its gross per pair (S, P, n), per run resample (S, P, B) or None)."""
    w = weight if mask is None else weight * mask  # (S|1, n)
    scored = _Lazy(lambda k: tuple(x * w[:, None] for x in score(picks[k])))

    def oracle(per_boot):
        if oracle_all is None:
            raise KeyError("oracle_all")
        return (oracle_all[0] * w[:, None]).sum(-1) if not per_boot else oracle_all[1](w)

    G = _Lazy(lambda k: oracle(False) if k == "oracle_all" else scored[k][0].sum(-1))
    N = _Lazy(lambda k: oracle(False) if k == "oracle_all" else scored[k][1].sum(-1))
    if boot is None:
        return G, N, None, None
    GB = _Lazy(lambda k: oracle(True) if k == "oracle_all" else scored[k][0] @ boot.T)
    NB = _Lazy(lambda k: GB[k] if k == "oracle_all" else scored[k][1] @ boot.T)
    return G, N, GB, NB


def _oracle_all_sums(ut, free, A, B, counts, boot):
    """(per-pair gross (S, P, n), a function of the weights giving the per-resample sums (S, P, B))
    of the oracle chosen on the mean over runs, scored on each pair's run b."""
    point = _oracle_all(ut, free, None)  # (S, n)
    per_pair = np.take_along_axis(ut[:, B], point[:, None, :, None], -1)[..., 0]
    chosen = []  # each run resample's oracle (S, B, n), chosen once for every category mask
    vals = {}  # run b's latencies under those choices (S, B, n): one per run, whatever the pair or mask

    def per_boot(w):
        if not chosen:
            chosen.append(_oracle_all(ut, free, counts))
        out = np.empty((ut.shape[0], len(A), counts.shape[0]))
        sums = {}  # the pairs scored on one run b share its sums
        for p, b in enumerate(map(int, B)):
            if b not in sums:
                if b not in vals:
                    vals[b] = np.take_along_axis(ut[:, b][:, None], chosen[0][..., None], -1)[..., 0]
                sums[b] = np.einsum("sbn,sn,bn->sb", vals[b], w, boot)
            out[:, p] = sums[b]
        return out

    return per_pair, per_boot


def score(L: Layout, b: Batch, picks: dict, figure_specs: dict, truth: np.ndarray | None = None) -> dict:
    """Score ``picks`` ({name: (choice, charge) (S, R, n_test)}, ``oracle_all`` among them or not; a
    pick (None, charge, gross) has no choices and its gross latency per run instead, e.g. ``random``)
    on every ordered pair of runs and give every figure of ``figure_specs`` (``specs``' form) its
    estimate (S,) (the mean over pairs), '_lo', '_hi' (the two-way bootstrap's percentile
    interval), '_se' (the resamples' standard deviation), '_boot' (S, B) the resamples; with
    ``truth`` ((N, C), or per seed (S, N, C)) also '_true', the same fits scored on the true surface
    (mean over the runs' fits; the bound's oracle is the true one)."""
    S, R, N, C = b.us.shape
    nt = L.n_train
    A, B = pairs(R)
    ut = b.us[:, :, nt:]
    category_t, _, weight_t = _test_view(L, b)
    counts = interval.run_counts(R, L.boot.shape[0], measured.group_seed(L.seed, L.mode, "runs"))
    pw = interval.pair_weights(counts, A, B)
    free = L.cols["free"]
    oracle_all = _oracle_all_sums(ut, free, A, B, counts, L.boot)
    out = {}
    tt = None
    if truth is not None:
        tt = np.asarray(truth)[..., nt:, :]
        tt = np.broadcast_to(tt if tt.ndim == 2 else tt[:, None], (S, R, N - nt, C))
        true_oracle = (tt[..., free].min(-1), None) if oracle_all is not None else None
    sums, true_sums = {}, {}
    for name, (fn, code) in figure_specs.items():
        if code not in sums:
            mask = None if code is None else (category_t == code).astype(float)
            sums[code] = _sums(_pair_scorer(ut, A, B), picks, weight_t, mask, L.boot, oracle_all)
            if tt is not None:
                true_sums[code] = _sums(_truth_scorer(tt), picks, weight_t, mask, None, true_oracle)
        G, Nn, GB, NB = sums[code]
        with np.errstate(invalid="ignore", divide="ignore"):  # a seed without the category: NaN
            per_pair, per_boot = fn(G, Nn), fn(GB, NB)
            if tt is not None:
                out[name + "_true"] = fn(*true_sums[code][:2]).mean(axis=1)
        boot = interval.pooled(per_boot, pw)
        out[name] = per_pair.mean(axis=1) if per_pair.shape[1] else np.full(S, np.nan)  # one run: no pair
        out[name + "_lo"], out[name + "_hi"] = interval.percentile(boot, L.confidence)
        out[name + "_se"] = interval.spread(boot)
        out[name + "_boot"] = boot
    return out


def figures(L: Layout, b: Batch, truth: np.ndarray | None = None, only=None) -> dict[str, np.ndarray]:
    """Every figure of one mode for S studies at once (``score`` of ``choices`` on ``specs``; ``only``:
    just these figures), plus
    'gap_to_oracle_same_run' (each run's own oracle), 'selected' (S, R), 'baseline' (S, R) and
    'order' (see ``choices``)."""
    picks, order, selected, baseline = choices(L, b)
    picks.update(_category_picks(L, b))
    wanted = {k: v for k, v in specs(L, picks).items() if only is None or k in only}
    out = score(L, b, picks, wanted, truth)
    out.update(selected=selected, baseline=baseline, order=order)
    ut = b.us[:, :, L.n_train :]
    _, _, weight_t = _test_view(L, b)
    same = [(_gather(ut, picks[k][0]) * weight_t[:, None]).sum(-1) for k in ("global", "oracle")]
    out["gap_to_oracle_same_run"] = (100.0 * (same[0] - same[1]) / same[1]).mean(axis=1)
    return out
