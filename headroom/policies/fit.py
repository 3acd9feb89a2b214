"""Fitting the policies of ``headroom.policies.lookup``: what each minimizes, on what.

``Train`` is what a policy is fitted on; ``fit_keyed`` is the per-key argmin the decision engine runs
batched over seeds and runs (``headroom.decide.engine``) and a single policy runs on one train
matrix (``fit_table``); clustered's k-means (scikit-learn, imported here only) sees shapes, not
latencies. Fitting objective: per key, the least summed latency plus per-call charge (plan builds);
switches and compiles depend on the whole sequence or the whole set of candidates, so the per-key
argmin is an approximation of the net cost the policy is scored on (regret-aware charges a switch for
deviating).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from headroom.policies.shapes import rows_of


@dataclass(frozen=True)
class Train:
    """What a policy is fitted on: ``features`` (trace rows, chronological) and ``us`` (n, C) µs.

    sem2: squared standard error of each median (regret-aware's noise term; zeros when unknown);
    z: one-sided normal quantile of regret-aware's lower bound; deviation_cost_us: what deviating from
    the global candidate costs per invocation (lookup + a switch); seed, clusters: of the k-means;
    charge_us: what each candidate is charged per call on each invocation besides its latency (plan
    builds in eager mode), part of what policies minimize (``fit_objective``).
    """

    features: pd.DataFrame
    us: np.ndarray
    candidates: tuple[str, ...]
    sem2: np.ndarray | None = None
    z: float = 1.645
    deviation_cost_us: float = 0.0
    clusters: int = 4
    seed: int = 0
    charge_us: np.ndarray | None = None  # (n, C) per-call charge of each candidate (eager plan builds)
    weight: np.ndarray | None = None  # (n,) invocations each row stands for (a stratified trace's weight)


def key_codes(keys: list) -> tuple[np.ndarray, list]:
    """(code of each key, the distinct keys in first-seen order)."""
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    return codes.astype(np.int64), list(uniques)


def fit_objective(train: Train) -> np.ndarray:
    """What a policy minimizes per key: each invocation's latency plus the per-call charge its
    candidate pays there (plan builds); see the module docstring."""
    return train.us if train.charge_us is None else train.us + train.charge_us


def regret_of(policy, train: Train):
    """regret-aware's test parameters (z, deviation cost, squared SE of each median) or None."""
    if not policy.regret:
        return None
    sem2 = train.sem2 if train.sem2 is not None else np.zeros_like(train.us)
    return train.z, train.deviation_cost_us, sem2


def fit_table(policy, train: Train):
    """``policy`` (a keyed policy) fitted on ``train``: its table and fallback set, returned."""
    policy.candidates = tuple(train.candidates)
    policy.prepare(train.features)
    codes, uniques = key_codes(policy.keys(train.features))
    best, fb = fit_keyed(
        codes, len(uniques), fit_objective(train), regret_of(policy, train), weight=train.weight
    )
    policy.fallback = int(fb)
    policy.table = dict(zip(uniques, best.tolist(), strict=True))
    return policy


def fit_config_table(policy, train: Train):
    """``policy`` (a ConfigTablePolicy) on ``train``'s candidates: each table entry's candidate, fixed
    (no latency is read but the fallback's); an entry whose candidate ``train`` lacks takes the global
    column (``global_column``), and ``policy.missing`` names those candidates."""
    policy.candidates = tuple(train.candidates)
    policy.fallback = int(global_column(fit_objective(train), train.weight))
    index = {c: i for i, c in enumerate(policy.candidates)}
    policy.table = {m: index.get(c, policy.fallback) for m, c in policy.keying.table}
    policy.missing = tuple(dict.fromkeys(c for _, c in policy.keying.table if c not in index))
    return policy


def global_column(us: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """The global column (...) of ``us`` (..., n, C): the least weighted summed cost (weight (n,);
    None: 1 each), what every keyed policy falls back to."""
    w = np.ones(us.shape[-2]) if weight is None else np.asarray(weight, float)
    return np.argmin((us * w[:, None]).sum(axis=-2), axis=-1)


def fit_keyed(
    codes: np.ndarray, k: int, us: np.ndarray, regret=None, weight: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(best column per key (..., k), global column (...)) of a keyed policy on ``us`` (..., n, C):
    the least weighted summed cost per key; a tie keeps the global column (no switch). Leading axes
    are seeds and runs of the simulator; a study's run is ``us`` (n, C). weight (n,): how many of the
    workload's invocations each row stands for (a stratified trace's ``weight``; None: 1 each).

    regret (z, deviation_us, sem2 (..., n, C)): keep a key on the global column unless the lower
    confidence bound of its per-invocation gain (weighted mean over the key's rows) exceeds the
    deviation cost; the gain's standard error combines the medians' noise (sem2 of both columns) and
    the spread of the gain over the key's invocations (when it has at least two)."""
    n = us.shape[-2]
    w = np.ones(n) if weight is None else np.asarray(weight, float)
    onehot = np.zeros((k, n))
    onehot[codes, np.arange(n)] = 1.0
    fb = global_column(us, w)
    sums = np.einsum("kn,...nc->...kc", onehot * w, us)
    best = np.argmin(sums, axis=-1)
    at_fb = np.take_along_axis(sums, np.broadcast_to(fb[..., None, None], (*fb.shape, k, 1)), -1)[..., 0]
    at_best = np.take_along_axis(sums, best[..., None], -1)[..., 0]
    best = np.where(at_fb <= at_best, fb[..., None], best)
    if regret is None:
        return best, fb
    z, deviation_us, sem2 = regret
    row_best = best[..., codes]
    pick = lambda a, col: np.take_along_axis(a, col[..., None], -1)[..., 0]  # noqa: E731
    fb_rows = np.broadcast_to(fb[..., None], row_best.shape)
    d = pick(us, fb_rows) - pick(us, row_best)
    s2 = pick(sem2, fb_rows) + pick(sem2, row_best)
    cnt = onehot.sum(axis=1)
    share = onehot * w / np.maximum((onehot * w).sum(axis=1, keepdims=True), 1e-300)
    mean = d @ share.T
    spread = ((d - mean[..., codes]) ** 2 @ onehot.T) / np.maximum(cnt - 1, 1)
    se2 = (s2 @ onehot.T) / cnt**2 + np.where(cnt >= 2, spread / cnt, 0.0)
    deviate = (best != fb[..., None]) & (mean - z * np.sqrt(se2) > deviation_us)
    return np.where(deviate, best, fb[..., None]), fb


@lru_cache(maxsize=64)
def _kmeans(distinct: bytes, counts: bytes, dim: int, k: int, seed: int) -> np.ndarray:
    """Centroids of a weighted k-means; cached, since every run of a study shares the trace."""
    from sklearn.cluster import KMeans
    from threadpoolctl import threadpool_limits

    x = np.frombuffer(distinct).reshape(-1, dim)
    w = np.frombuffer(counts, dtype=np.int64)
    # one thread: a handful of points, where OpenMP start-up costs 10x the fit itself
    with threadpool_limits(1):
        return KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x, sample_weight=w).cluster_centers_


def prepare_clusters(policy, features: pd.DataFrame):
    """Clustered's standardization and centroids from the fit's shapes (weighted by their counts)."""
    x = np.array([policy.keying.vector(s) for s in rows_of(features)])
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0  # a constant feature carries no distance
    # fit on the distinct shapes weighted by their train counts: same objective, far fewer points
    distinct, counts = np.unique((x - mean) / std, axis=0, return_counts=True)
    k = max(1, min(policy.clusters, len(distinct)))
    centroids = _kmeans(
        np.ascontiguousarray(distinct).tobytes(),
        counts.astype(np.int64).tobytes(),
        x.shape[1],
        k,
        policy.seed,
    )
    return policy.set_centroids(mean, std, centroids)
