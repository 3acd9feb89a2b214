"""The policy registry: every dispatch policy is one small object, fitted on train and asked per shape.

A policy maps an invocation's shape to a candidate. ``make(name)`` returns an unfitted policy;
``policy.fit(train)`` returns it fitted on a ``Train`` (trace rows of the train invocations, in order,
and their invocation x candidate latency matrix); then

* ``policy.choose(features)`` gives the chosen column of the train matrix for every row of a trace
  slice (what ``evaluate`` scores), and
* ``policy.lookup(shape)`` gives the candidate id for one shape, a mapping with the trace columns
  (what a serving system would run, and what the lifecycle stage times as the dispatch cost).

Both go through the same fitted tables, so the dispatch cost in the ledger is the cost of the policy
that was scored. Keyed policies take the best candidate per key on train (least summed latency; a tie
keeps the global candidate, so ties never cause a switch) and send keys unseen in train to the global
candidate. ``oracle`` needs the future: it is not in the registry; ``evaluate`` picks it per invocation.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

# Features the k-means of `clustered` sees, log2-scaled (phase enters as 0/1).
CLUSTER_FEATURES = ("batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim")


@dataclass(frozen=True)
class Train:
    """What a policy is fitted on: ``features`` (trace rows, chronological) and ``us`` (n, C) µs.

    sem2: squared standard error of each median (regret-aware's noise term; zeros when unknown);
    z: one-sided normal quantile of regret-aware's lower bound; deviation_cost_us: what deviating from
    the global candidate costs per invocation (lookup + a switch); seed, clusters: of the k-means.
    """

    features: pd.DataFrame
    us: np.ndarray
    candidates: tuple[str, ...]
    sem2: np.ndarray | None = None
    z: float = 1.645
    deviation_cost_us: float = 0.0
    clusters: int = 4
    seed: int = 0


def _pow2(x: float) -> int:
    return 1 << (max(int(math.ceil(x)), 1) - 1).bit_length()


def bucket_label(shape: Mapping) -> str:
    """Phase and power-of-two ceilings of q_len, kv_len and batch."""
    return f"{shape['phase']}|q{_pow2(shape['q_len'])}|kv{_pow2(shape['kv_len'])}|b{_pow2(shape['batch'])}"


def rows_of(features: pd.DataFrame) -> list[dict]:
    return features.to_dict("records")


@dataclass
class KeyedPolicy:
    """Best candidate per key on train; unseen keys and ties go to the global candidate."""

    name: str = "global"
    deployable: bool = True
    table: dict = field(default_factory=dict)
    fallback: int = 0
    candidates: tuple[str, ...] = ()

    def key(self, shape: Mapping) -> Hashable:
        return None  # global: one key for every shape

    def keys(self, features: pd.DataFrame) -> list:
        return [self.key(s) for s in rows_of(features)]

    def fit(self, train: Train) -> KeyedPolicy:
        sums = train.us.sum(axis=0)
        self.fallback, self.candidates = int(np.argmin(sums)), tuple(train.candidates)
        self.table = self._fit_table(train)
        return self

    def _fit_table(self, train: Train) -> dict:
        return best_per_key(self.keys(train.features), train.us, self.fallback)

    def choose(self, features: pd.DataFrame) -> np.ndarray:
        get, fb = self.table.get, self.fallback
        return np.array([get(k, fb) for k in self.keys(features)], dtype=np.int64)

    def lookup(self, shape: Mapping) -> str:
        return self.candidates[self.table.get(self.key(shape), self.fallback)]


def best_per_key(keys: list, us: np.ndarray, fallback: int) -> dict:
    """Column with the least summed latency per key; a tie keeps ``fallback`` (no switch)."""
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    sums = np.zeros((len(uniques), us.shape[1]))
    np.add.at(sums, codes, us)
    best = np.argmin(sums, axis=1)
    keep = sums[np.arange(len(uniques)), fallback] <= sums[np.arange(len(uniques)), best]
    best[keep] = fallback
    return dict(zip(uniques, best.tolist(), strict=True))


class PhaseKeyed(KeyedPolicy):
    """One candidate per phase (prefill, decode): the obvious two-kernel rule."""

    def key(self, shape):
        return shape["phase"]

    def keys(self, features):
        return features["phase"].astype(str).tolist()


class ExactKey(KeyedPolicy):
    """One candidate per exact shape_key seen in train."""

    def key(self, shape):
        return shape["shape_key"]

    def keys(self, features):
        return features["shape_key"].astype(str).tolist()


class Bucketed(KeyedPolicy):
    """One candidate per bucket: phase and power-of-two ceilings of q_len, kv_len, batch."""

    def key(self, shape):
        return bucket_label(shape)


class RegretAware(ExactKey):
    """Deviate from global for a key only when the lower confidence bound of its per-invocation gain
    exceeds the cost of deviating (dispatch lookup + a switch, charged on every invocation).

    gain d_i = t_global,i - t_best,i over the key's train invocations; its standard error combines
    the timing noise of each median (sem2 of both candidates) and the spread of d across the key's
    invocations (std(d)/sqrt(n), when n >= 2)."""

    def _fit_table(self, train: Train) -> dict:
        keys = np.array(self.keys(train.features), dtype=object)
        sem2 = train.sem2 if train.sem2 is not None else np.zeros_like(train.us)
        fb, table = self.fallback, {}
        for key, col in best_per_key(list(keys), train.us, fb).items():
            if col == fb:
                continue
            rows = keys == key
            d = train.us[rows, fb] - train.us[rows, col]
            n = len(d)
            se2 = (sem2[rows, fb] + sem2[rows, col]).sum() / n**2 + (d.var(ddof=1) / n if n >= 2 else 0.0)
            if d.mean() - train.z * math.sqrt(se2) > train.deviation_cost_us:
                table[key] = col
        return table


def _cluster_vector(shape: Mapping) -> list[float]:
    x = [math.log2(max(float(shape[c]), 1.0)) for c in CLUSTER_FEATURES]
    return x + [float(str(shape["phase"]) == "prefill")]


@lru_cache(maxsize=64)
def _kmeans(distinct: bytes, counts: bytes, dim: int, k: int, seed: int) -> np.ndarray:
    """Centroids of a weighted k-means; cached, since every run of a study shares the trace."""
    x = np.frombuffer(distinct).reshape(-1, dim)
    w = np.frombuffer(counts, dtype=np.int64)
    # one thread: a handful of points, where OpenMP start-up costs 10x the fit itself
    with threadpool_limits(1):
        return KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x, sample_weight=w).cluster_centers_


class Clustered(KeyedPolicy):
    """k-means on standardized log2 shape features (train shapes); one candidate per cluster."""

    mean: np.ndarray
    std: np.ndarray
    centroids: np.ndarray

    def _fit_table(self, train: Train) -> dict:
        x = np.array([_cluster_vector(s) for s in rows_of(train.features)])
        self.mean, self.std = x.mean(axis=0), x.std(axis=0)
        self.std[self.std == 0] = 1.0  # a constant feature carries no distance
        # fit on the distinct shapes weighted by their train counts: same objective, far fewer points
        distinct, counts = np.unique((x - self.mean) / self.std, axis=0, return_counts=True)
        k = max(1, min(train.clusters, len(distinct)))
        self.centroids = _kmeans(
            np.ascontiguousarray(distinct).tobytes(),
            counts.astype(np.int64).tobytes(),
            x.shape[1],
            k,
            train.seed,
        )
        self._plain = (self.mean.tolist(), self.std.tolist(), self.centroids.tolist())
        return best_per_key(self.keys(train.features), train.us, self.fallback)

    @property
    def k(self) -> int:
        return len(self.centroids)

    def key(self, shape):
        # plain Python on one shape: numpy's per-call overhead would be most of a serving lookup's cost
        mean, std, centroids = self._plain
        z = [(x - m) / d for x, m, d in zip(_cluster_vector(shape), mean, std, strict=True)]
        best, best_d = 0, math.inf
        for i, c in enumerate(centroids):
            dist = sum((a - b) * (a - b) for a, b in zip(z, c, strict=True))
            if dist < best_d:
                best, best_d = i, dist
        return best

    def keys(self, features):
        z = (np.array([_cluster_vector(s) for s in rows_of(features)]) - self.mean) / self.std
        return np.argmin(((z[:, None, :] - self.centroids[None]) ** 2).sum(axis=2), axis=1).tolist()


@dataclass
class Random:
    """A seeded uniformly random candidate per call: the baseline any adaptive policy must beat."""

    name: str = "random"
    deployable: bool = True
    candidates: tuple[str, ...] = ()
    seed: int = 0

    def fit(self, train: Train) -> Random:
        self.candidates = tuple(train.candidates)
        self._rng = random.Random(self.seed)  # a serving-time draw: Python's, cheaper per call than numpy's
        return self

    def draws(self, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(self.candidates), size=(draws, n))

    def lookup(self, shape: Mapping) -> str:
        return self.candidates[self._rng.randrange(len(self.candidates))]


REGISTRY = {
    "global": KeyedPolicy,
    "phase-keyed": PhaseKeyed,
    "exact-key": ExactKey,
    "bucketed": Bucketed,
    "clustered": Clustered,
    "regret-aware": RegretAware,
    "random": Random,
}
POLICIES = (*REGISTRY, "oracle")
# Policies a serving system could ship that adapt to shape beyond the phase split; `phase-keyed` is
# the baseline they must beat, `random` a floor, `oracle` needs the future.
DEPLOYABLE = ("exact-key", "bucketed", "clustered", "regret-aware")


def make(name: str):
    """An unfitted policy by name (see ``REGISTRY``)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name](name=name)
