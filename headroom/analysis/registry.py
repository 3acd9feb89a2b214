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
    regret = False  # regret-aware: deviate from global only when the gain's lower bound pays for it

    def key(self, shape: Mapping) -> Hashable:
        return None  # global: one key for every shape

    def keys(self, features: pd.DataFrame) -> list:
        return [self.key(s) for s in rows_of(features)]

    def prepare(self, features: pd.DataFrame) -> KeyedPolicy:
        """Whatever the keys need from the train shapes alone (clustered: its k-means)."""
        return self

    def fit(self, train: Train) -> KeyedPolicy:
        self.candidates = tuple(train.candidates)
        self.prepare(train.features)
        codes, uniques = key_codes(self.keys(train.features))
        best, fb = fit_keyed(codes, len(uniques), fit_objective(train), regret_of(self, train))
        self.fallback = int(fb)
        self.table = dict(zip(uniques, best.tolist(), strict=True))
        return self

    def choose(self, features: pd.DataFrame) -> np.ndarray:
        get, fb = self.table.get, self.fallback
        return np.array([get(k, fb) for k in self.keys(features)], dtype=np.int64)

    def lookup(self, shape: Mapping) -> str:
        return self.candidates[self.table.get(self.key(shape), self.fallback)]


def key_codes(keys: list) -> tuple[np.ndarray, list]:
    """(code of each key, the distinct keys in first-seen order)."""
    codes, uniques = pd.factorize(pd.Series(keys, dtype=object), use_na_sentinel=False)
    return codes.astype(np.int64), list(uniques)


def fit_objective(train: Train) -> np.ndarray:
    """What a policy minimizes per key: each invocation's latency plus the per-call charge its
    candidate pays there (plan builds). Switches and compiles are left out: they depend on the whole
    sequence or the whole set of candidates, so the per-key argmin is an approximation of the net cost
    the policy is scored on (regret-aware charges a switch for deviating)."""
    return train.us if train.charge_us is None else train.us + train.charge_us


def regret_of(policy, train: Train):
    """regret-aware's test parameters (z, deviation cost, squared SE of each median) or None."""
    if not policy.regret:
        return None
    sem2 = train.sem2 if train.sem2 is not None else np.zeros_like(train.us)
    return train.z, train.deviation_cost_us, sem2


def fit_keyed(codes: np.ndarray, k: int, us: np.ndarray, regret=None) -> tuple[np.ndarray, np.ndarray]:
    """(best column per key (..., k), global column (...)) of a keyed policy on ``us`` (..., n, C):
    the least summed cost per key; a tie keeps the global column (no switch). Leading axes are seeds
    and runs of the simulator; a study's run is ``us`` (n, C).

    regret (z, deviation_us, sem2 (..., n, C)): keep a key on the global column unless the lower
    confidence bound of its per-invocation gain exceeds the deviation cost; the gain's standard error
    combines the medians' noise (sem2 of both columns) and the spread of the gain over the key's
    invocations (when it has at least two)."""
    onehot = np.zeros((k, us.shape[-2]))
    onehot[codes, np.arange(us.shape[-2])] = 1.0
    fb = np.argmin(us.sum(axis=-2), axis=-1)
    sums = np.einsum("kn,...nc->...kc", onehot, us)
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
    mean = (d @ onehot.T) / cnt
    spread = ((d - mean[..., codes]) ** 2 @ onehot.T) / np.maximum(cnt - 1, 1)
    se2 = (s2 @ onehot.T) / cnt**2 + np.where(cnt >= 2, spread / cnt, 0.0)
    deviate = (best != fb[..., None]) & (mean - z * np.sqrt(se2) > deviation_us)
    return np.where(deviate, best, fb[..., None]), fb


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
    invocations (std(d)/sqrt(n), when n >= 2); see ``fit_keyed``."""

    regret = True


# vLLM's default CUDA Graph capture sizes: a decode batch runs the graph of the smallest size >= it.
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))


def padded_batch(batch: int) -> int:
    """The captured batch size a batch of ``batch`` replays (itself above the largest capture size)."""
    return next((c for c in CAPTURE_SIZES if c >= batch), int(batch))


class BatchKeyed(KeyedPolicy):
    """One candidate per (phase, padded batch size): keyed only on what is fixed when a CUDA Graph is
    captured, so a graph-mode server can bake the choice into each captured graph."""

    def key(self, shape):
        return f"{shape['phase']}|b{padded_batch(int(shape['batch']))}"

    def keys(self, features):
        pad = [padded_batch(int(b)) for b in features["batch"]]
        return [f"{p}|b{b}" for p, b in zip(features["phase"].astype(str), pad, strict=True)]


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
    clusters: int = 4
    seed: int = 0

    def prepare(self, features: pd.DataFrame) -> Clustered:
        x = np.array([_cluster_vector(s) for s in rows_of(features)])
        self.mean, self.std = x.mean(axis=0), x.std(axis=0)
        self.std[self.std == 0] = 1.0  # a constant feature carries no distance
        # fit on the distinct shapes weighted by their train counts: same objective, far fewer points
        distinct, counts = np.unique((x - self.mean) / self.std, axis=0, return_counts=True)
        k = max(1, min(self.clusters, len(distinct)))
        self.centroids = _kmeans(
            np.ascontiguousarray(distinct).tobytes(),
            counts.astype(np.int64).tobytes(),
            x.shape[1],
            k,
            self.seed,
        )
        self._plain = (self.mean.tolist(), self.std.tolist(), self.centroids.tolist())
        return self

    def fit(self, train: Train) -> Clustered:
        self.clusters, self.seed = train.clusters, train.seed
        return super().fit(train)

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
    "batch-keyed": BatchKeyed,
    "random": Random,
}
POLICIES = (*REGISTRY, "oracle")
# Policies a serving system could ship that adapt to shape beyond the phase split; the better of
# `global` and `phase-keyed` is the baseline they must beat, `random` a floor, `oracle` needs the future.
DEPLOYABLE = ("exact-key", "bucketed", "clustered", "regret-aware", "batch-keyed")
# Under full CUDA Graph replay kv_len changes inside a replay: only policies keyed on what is fixed at
# capture (phase, padded batch size) can be baked into the graphs. The others would need a runtime
# dispatch inside the graph; graph mode reports them and decides on these.
GRAPH_DEPLOYABLE = ("batch-keyed",)


def deployable_in(mode: str) -> tuple[str, ...]:
    """The policies the decision selects from in ``mode``."""
    return GRAPH_DEPLOYABLE if mode == "graph" else DEPLOYABLE


def make(name: str):
    """An unfitted policy by name (see ``REGISTRY``)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name](name=name)
