"""The one interval of every figure: a two-way (crossed) bootstrap, percentile, two-sided.

A cross-run figure is the mean over ordered pairs of runs (fitted on run a, scored on run b) of a
function of weighted sums over the test invocations. Two things are sampled: the runs (each a fresh
process, whose offsets every pair involving it shares) and the test invocations (a sample of the
workload). The bootstrap resamples both, independently — R runs drawn with replacement and the test
invocations drawn with replacement within their strata (step kinds, so a stratified trace keeps its
design) — and recomputes the cross-run figure on every resample: a pair (a, b) enters with weight
m_a x m_b (how often each run was drawn; a run drawn twice never pairs with itself, since a pair
needs two processes), and every sum is taken with the invocations' resample counts. The interval is
the resamples' 2.5% and 97.5% quantiles (at confidence 0.95). This is the crossed-random-effects
("pigeonhole") bootstrap; the simulator measures its coverage on the same code
(docs/decision-validation.md).

A figure *exceeds* its threshold when the interval's lower end lies above it and *holds* when the
upper end lies below it (for the gap, the upper end of its bound's interval: ``rules.HOLD_BY``): each
a one-sided test at (1 - confidence) / 2.
"""

from __future__ import annotations

import warnings

import numpy as np


def invocation_counts(strata: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n) how often each test invocation is drawn: n draws with replacement, the same
    number within each stratum as it holds (a stratum's code per invocation in ``strata``)."""
    strata = np.asarray(strata)
    n = len(strata)
    counts = np.zeros((resamples, n))
    for code in np.unique(strata):
        members = np.flatnonzero(strata == code)
        draws = members[rng.integers(0, len(members), size=(resamples, len(members)))]
        np.add.at(counts, (np.repeat(np.arange(resamples), len(members)), draws.ravel()), 1.0)
    return counts


def run_counts(runs: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, runs) how often each run is drawn in R draws with replacement."""
    draws = rng.integers(0, runs, size=(resamples, runs))
    counts = np.zeros((resamples, runs))
    np.add.at(counts, (np.repeat(np.arange(resamples), runs), draws.ravel()), 1.0)
    return counts


def pair_weights(counts: np.ndarray, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """(resamples, P) the weight of each ordered pair (A[p], B[p]) in each run resample."""
    return counts[:, A] * counts[:, B]


def pooled(per_pair_boot: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(S, resamples) the cross-run figure of each resample: per_pair_boot (S, P, resamples), the
    figure of each pair on that resample's invocations; weights (resamples, P). A pair whose value is
    not finite (a resample without the invocations a figure needs) is left out; a resample left with
    no pair is NaN."""
    ok = np.isfinite(per_pair_boot)
    w = np.where(ok, weights.T[None], 0.0)
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (np.where(ok, per_pair_boot, 0.0) * w).sum(axis=1) / total, np.nan)


def percentile(boot: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) (S,) the two-sided percentile interval of each seed's resamples (S, resamples);
    NaN where fewer than half the resamples are finite."""
    alpha = (1.0 - confidence) / 2.0
    finite = np.isfinite(boot)
    enough = finite.sum(axis=-1) >= max(1, boot.shape[-1] // 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN seed: NaN, said by `enough`
        lo, hi = np.nanquantile(boot, [alpha, 1.0 - alpha], axis=-1)
    return np.where(enough, lo, np.nan), np.where(enough, hi, np.nan)


def p_above(boot: np.ndarray, threshold: float) -> np.ndarray:
    """(S,) the bootstrap's one-sided p-value of "figure <= threshold": the share of finite resamples at
    or below it, (k + 1) / (n + 1) so that it is never 0. NaN without finite resamples."""
    finite = np.isfinite(boot)
    n = finite.sum(axis=-1)
    k = (np.where(finite, boot, np.inf) <= threshold).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (k + 1.0) / (n + 1.0), np.nan)


def spread(boot: np.ndarray) -> np.ndarray:
    """(S,) the resamples' standard deviation (NaN without two finite resamples)."""
    finite = np.isfinite(boot)
    n = finite.sum(axis=-1)
    x = np.where(finite, boot, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = x.sum(axis=-1) / n
        var = (np.where(finite, (boot - mean[..., None]) ** 2, 0.0)).sum(axis=-1) / (n - 1)
    return np.where(n >= 2, np.sqrt(var), np.nan)
