"""The intervals of a pooled cross-run figure, batched over a leading seed axis.

A figure is the mean over ordered pairs of runs (fitted on a, scored on b) of a function of sums over
the test invocations. Its uncertainty has two parts: a jackknife over runs (the run part, R - 1
degrees of freedom) and a bootstrap over test invocations (the invocation part). Six candidate
intervals, all computed (docs/decision-validation.md compares them; the first three were fixed in
advance of decision v3.1's choice, the fourth was added after it and chosen for v3.2, the last two
were fixed in advance of v3.3's choice):

* ``interval`` (Welch t; decision v3's rule, and since decision-v3.1 the interval of every figure the
  rule does not hold on): estimate +/- t(df) x SE, SE^2 = run part + the bootstrap's variance, df
  Welch-Satterthwaite (at least R - 1). Its SE and df give every figure's t p-value.
* ``t_ntest``: the same SE, t on n_test - 1 degrees of freedom.
* ``bootstrap_t`` (the rule's since decision-v3.1, for the decided figures and the gap's bound:
  ``engine.CANDIDATES_FOR``): the invocation part studentized. Each resample's statistic is divided by its own
  linearized SE (``linear_var``: the delta method on the resample's sums), the pivot's quantiles set
  the invocation part's two half-widths (asymmetric where a few large invocations dominate a ratio's
  denominator); the run part's t(R - 1) half-width is added to each in quadrature.
* ``bootstrap_t`` with ``run_variance_unbiased`` as its run part (``boot_t_u``; decision v3.2's for the
  gap and its bound): the jackknife over runs of a mean over ordered pairs of runs is biased up (its
  root is 1.6-1.9x the figure's spread on flat surfaces, where the pair term dominates); the unbiased
  variance of that two-run U-statistic needs four runs, so below four it is the jackknife's and this
  candidate is ``bootstrap_t``. Clipped at 0 where it is negative, it can leave no run part at all.
* ``bootstrap_t`` with ``run_variance_components`` as its run part, on its Satterthwaite df
  (``boot_t_c``; decision v3.3's for the gap and its bound) or on R - 1 df (``boot_t_c1``): the run
  and pair variance components each kept non-negative, so where the noise is pair-specific the run
  part is the pair term's, never 0. Below four runs, the jackknife's.

This module sits below both the engine and the study-level ``crossrun`` (neither imports the other
for it).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats


def run_variance(per_pair: np.ndarray, A: np.ndarray, B: np.ndarray, R: int) -> np.ndarray:
    """The run part: jackknife variance over runs of the pair mean; per_pair (S, P, ...) -> (S, ...)."""
    loo = np.stack([per_pair[:, (A != r) & (B != r)].mean(axis=1) for r in range(R)], axis=1)
    return (R - 1) / R * ((loo - loo.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)


def run_variance_unbiased(per_pair: np.ndarray, A: np.ndarray, B: np.ndarray, R: int) -> np.ndarray:
    """The unbiased variance over runs of the pair mean (S, P) -> (S,): the squared mean less the
    mean product of the pair values over every two pairs with no run in common (an unbiased estimate
    of the squared expectation when runs are independent). It can be negative (in 28% of seeds at 4
    runs on a pair-dominated figure, 14% at 6): a user clips it. NaN with fewer than 4 runs, where no
    two pairs are disjoint. Sums over runs, not over pairs of pairs: of all P^2 products,
    those sharing run r add up to C_r^2 (C_r: the sum of the pairs that involve r), and a pair with its
    reverse or itself shares two runs and is counted twice."""
    S, P = per_pair.shape[0], per_pair.shape[1]
    if R < 4:
        return np.full(S, np.nan)
    total = per_pair.sum(axis=1)
    C = np.stack([per_pair[:, (A == r) | (B == r)].sum(axis=1) for r in range(R)], axis=1)
    reverse = np.array([int(np.flatnonzero((A == b) & (B == a))[0]) for a, b in zip(A, B, strict=True)])
    twice = (per_pair**2).sum(axis=1) + (per_pair * per_pair[:, reverse]).sum(axis=1)
    disjoint = total**2 - ((C**2).sum(axis=1) - twice)
    square = disjoint / (P * (R - 2) * (R - 3))
    return (total / P) ** 2 - square


def run_variance_components(per_pair: np.ndarray, A: np.ndarray, B: np.ndarray, R: int):
    """(variance (S,), df (S,)) of the pair mean over runs from its two variance components, each
    kept non-negative; NaN for both with fewer than 4 runs. per_pair (S, P) over the ordered pairs.

    The pair mean equals the mean of the symmetric values s_ab = (h_ab + h_ba) / 2 over the C(R, 2)
    unordered pairs, and s_ab = mu + phi_a + phi_b + e_ab (a run's own effect phi, as fitter and as
    scorer together; the pair's own term e). Its variance is 4 var(phi) / R + 2 var(e) / (R (R - 1)).
    The round-robin analysis of variance gives the run mean square MS_A (R - 1 df, expectation
    (R - 2) var(phi) + var(e)) and the residual mean square MS_E (C(R, 2) - R df, expectation var(e));
    var(phi) is estimated as (MS_A - MS_E) / (R - 2) clipped at 0, var(e) as MS_E. So where the
    figure's noise is pair-specific the run part is the pair term's, never 0 (the unbiased total,
    ``run_variance_unbiased``, is the same difference unclipped: negative in a quarter to a third of
    such seeds). df: Welch-Satterthwaite over the two non-negative terms (R - 1 and C(R, 2) - R df),
    near R - 1 where the run term dominates, C(R, 2) - R where the pair term does (so between the
    smaller of the two and their sum)."""
    S = per_pair.shape[0]
    if R < 4:
        nan = np.full(S, np.nan)
        return nan, nan
    up = [(a, b) for a in range(R) for b in range(a + 1, R)]
    at = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(A, B, strict=True))}
    sym = np.stack([(per_pair[:, at[(a, b)]] + per_pair[:, at[(b, a)]]) / 2.0 for a, b in up], axis=1)
    incidence = np.zeros((len(up), R))
    for i, (a, b) in enumerate(up):
        incidence[i, [a, b]] = 1.0
    T = sym @ incidence  # (S, R): each run's total over the pairs it is in
    ss_runs = ((T - T.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) / (R - 2)
    ss_total = ((sym - sym.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    df_runs, df_pairs = R - 1, len(up) - R
    ms_runs, ms_pairs = ss_runs / df_runs, np.maximum(ss_total - ss_runs, 0.0) / df_pairs
    run_term = 4.0 * np.maximum(ms_runs - ms_pairs, 0.0) / (R - 2) / R
    pair_term = 2.0 * ms_pairs / (R * (R - 1))
    var = run_term + pair_term
    with np.errstate(divide="ignore", invalid="ignore"):
        df = var**2 / (run_term**2 / df_runs + pair_term**2 / df_pairs)
    return var, np.where(var > 0, df, df_runs)


def interval(confidence: float, per_pair, per_boot, A, B, R: int) -> dict[str, np.ndarray]:
    """Estimate, SE (a jackknife over runs plus the invocation bootstrap's variance), Welch-Satterthwaite
    df (the run part has R - 1) and the t interval of one figure from its per-pair (S, P) and
    per-resample (S, P, B) values; '_var_runs' the run part. With fewer than 3 runs: no interval (NaN)."""
    S = per_pair.shape[0]
    est = per_pair.mean(axis=1) if per_pair.shape[1] else np.full(S, np.nan)
    if R < 3:
        nan = np.full(S, np.nan)
        return {"": est, "_lo": nan, "_hi": nan, "_se": nan, "_df": np.zeros(S), "_var_runs": nan}
    var_runs = run_variance(per_pair, A, B, R)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample without a phase: NaN, left out
        boot = np.nanmean(per_boot, axis=1) if per_boot.shape[-1] else np.zeros((S, 0))
        ok = np.isfinite(boot).sum(axis=1) > 1
        var_inv = np.nan_to_num(np.where(ok, np.nanvar(boot, axis=1, ddof=1), 0.0))
    se = np.sqrt(var_runs + var_inv)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(var_runs > 0, (var_runs + var_inv) ** 2 / (var_runs**2 / (R - 1)), np.inf)
    df = np.maximum(R - 1, np.minimum(df, 1e6))
    half = stats.t.ppf(0.5 + confidence / 2.0, df) * se
    return {"": est, "_lo": est - half, "_hi": est + half, "_se": se, "_df": df, "_var_runs": var_runs}


def t_ntest(confidence: float, iv: dict, n_test: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi): the rule's estimate and SE, t on n_test - 1 degrees of freedom."""
    half = stats.t.ppf(0.5 + confidence / 2.0, max(n_test - 1, 1)) * iv["_se"]
    return iv[""] - half, iv[""] + half


class _Reads(dict):
    """A dict that records which keys a figure function reads."""

    def __init__(self, data, seen: set, label: str):
        super().__init__(data)
        self.seen, self.label = seen, label

    def __getitem__(self, k):
        self.seen.add((self.label, k))
        return super().__getitem__(k)


def _gradient(fn, sums: tuple[dict, dict]) -> dict:
    """{(0 | 1, pick): d fn / d sum} at ``sums`` (G, N), forward differences on each sum fn reads."""
    seen: set = set()
    base = fn(_Reads(sums[0], seen, 0), _Reads(sums[1], seen, 1))
    grad = {}
    for which, k in sorted(seen, key=str):
        x = sums[which][k]
        h = 1e-7 * np.maximum(np.abs(x), 1e-9)
        bumped = [dict(sums[0]), dict(sums[1])]
        bumped[which][k] = x + h
        grad[(which, k)] = (fn(*bumped) - base) / h
    return grad


def linear_terms(fn, sums: tuple[dict, dict], per_inv: tuple[dict, dict]) -> np.ndarray:
    """Each test invocation's linear term in the pair mean of ``fn``: u (S, [B,] n) from sums (S, P[, B])
    and per-invocation values per_inv (G, N) of (S, P, n)."""
    u = 0.0
    for (which, k), g in _gradient(fn, sums).items():
        x = per_inv[which][k]
        sub = "sp,spn->sn" if g.ndim == 2 else "spb,spn->sbn"
        u = u + np.einsum(sub, np.nan_to_num(g), x) / g.shape[1]
    return np.asarray(u)


def linear_var(u: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """The delta-method bootstrap variance of the figure: sum_i w_i (u_i - u_bar)^2 with w the
    resample's counts (B, n) (u (S, B, n)), or w = 1 (u (S, n))."""
    if counts is None:
        return ((u - u.mean(axis=-1, keepdims=True)) ** 2).sum(axis=-1)
    ubar = (u * counts).sum(axis=-1, keepdims=True) / counts.sum(axis=-1)[:, None]
    return (counts * (u - ubar) ** 2).sum(axis=-1)


# A resample's linearized SE below this share of the sample's is a tie's zero, not a measurement.
TIED = 1e-3


def pivots(iv: dict, per_boot, u0, ub, counts) -> tuple[np.ndarray, np.ndarray]:
    """(pivot (S, B), se_inv (S,)): each invocation resample's studentized deviation from the
    sample's figure, and the sample's linearized SE; per_boot (S, P, B), u0 (S, n) and ub (S, B, n)
    the linear terms at the sample and at each resample, counts (B, n)."""
    est = iv[""]
    se_inv = np.sqrt(linear_var(u0))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # resamples without a phase: NaN, left out
        theta = np.nanmean(per_boot, axis=1)  # (S, B)
        dev, se_b = theta - est[:, None], np.sqrt(linear_var(ub, counts))  # (S, B)
        # A resample whose every invocation is tied (the figure constant on it) has a linearized SE
        # of 0, which the forward difference returns as rounding (~1e-7 of the sample's): its pivot
        # is +/-inf, kept among the others; where such resamples reach a tail's quantile, that end is
        # unbounded (NaN: the figure cannot hold). A resample whose figure equals the sample's has
        # pivot 0, its SE zero or not.
        pivot = np.where(se_b > TIED * se_inv[:, None], dev / se_b, np.sign(dev) * np.inf)
        pivot = np.where(dev == 0.0, 0.0, pivot)
    return pivot, se_inv


def bootstrap_t(confidence: float, iv: dict, per_boot, u0, ub, counts, R: int):
    """(lo, hi) of the studentized candidate (module docstring; ``pivots`` for the arguments)."""
    return ends(confidence, iv, *pivots(iv, per_boot, u0, ub, counts), R)


def ends(confidence: float, iv: dict, pivot, se_inv, R: int, var_runs=None, df_runs=None):
    """(lo, hi) of the bootstrap-t interval from ``pivots``, its run part ``var_runs`` (default the
    jackknife's, ``iv['_var_runs']``) on t(``df_runs``) (default R - 1; per seed allowed). A figure
    constant over the invocations gets est +/- the run part; a tail reached by resamples tied
    everywhere (pivot +/-inf) leaves that end unbounded (NaN)."""
    est, alpha = iv[""], 1.0 - confidence
    var_runs = iv["_var_runs"] if var_runs is None else var_runs
    df_runs = max(R - 1, 1) if df_runs is None else df_runs
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a seed without any finite pivot: NaN
        q_lo, q_hi = np.nanquantile(pivot, [alpha / 2, 1 - alpha / 2], axis=1)
        q_lo, q_hi = (np.where(np.isfinite(q), q, np.nan) for q in (q_lo, q_hi))
    run_half = stats.t.ppf(1 - alpha / 2, df_runs) * np.sqrt(var_runs)
    lo = est - np.hypot(np.maximum(q_hi, 0.0) * se_inv, run_half)
    hi = est + np.hypot(np.maximum(-q_lo, 0.0) * se_inv, run_half)
    return lo, hi
