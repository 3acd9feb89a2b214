"""The fitted policies as data, and the one lookup implementation (numpy and plain Python only).

A policy maps an invocation's shape to a candidate. Each keyed policy holds a ``table`` (key -> index
into ``candidates``) and a ``fallback`` (the global candidate: for keys never seen in its fit); its
``key(shape)`` says which key a shape has. Then

* ``choose(features)`` gives the chosen index for every row of a table of shapes (what the analysis
  scores), and
* ``lookup(shape)`` gives the candidate id for one shape, a mapping with the trace's columns (what a
  serving system runs: ``headroom.dispatch``, and what the lifecycle stage times as the dispatch cost).

Both go through the same table, so the answer timed is the answer scored. ``to_dict`` / ``from_dict``
write a fitted policy as plain JSON-able data and read it back to the same choices. Fitting lives in
``headroom.policies.fit`` (pandas, and scikit-learn for clustered's k-means), imported only when a
policy is fitted: a lookup never imports them (nor torch).
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from headroom.policies.shapes import CLUSTER_FEATURES, cluster_vector, rows_of

# vLLM's default CUDA Graph capture sizes: a decode batch runs the graph of the smallest size >= it.
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))


def _pow2(x: float) -> int:
    return 1 << (max(int(math.ceil(x)), 1) - 1).bit_length()


def bucket_label(shape: Mapping) -> str:
    """Phase and power-of-two ceilings of q_len, kv_len and batch."""
    return f"{shape['phase']}|q{_pow2(shape['q_len'])}|kv{_pow2(shape['kv_len'])}|b{_pow2(shape['batch'])}"


def padded_batch(batch: int) -> int:
    """The captured batch size a batch of ``batch`` replays (itself above the largest capture size)."""
    return next((c for c in CAPTURE_SIZES if c >= batch), int(batch))


def _plain_key(key):
    """A table key as JSON keeps it (None, str or int); the fit's factorized None (global's one key)
    comes back as NaN, and is None again."""
    if key is None or isinstance(key, str):
        return key
    if isinstance(key, float) and math.isnan(key):
        return None
    if isinstance(key, numbers.Integral):
        return int(key)
    raise TypeError(f"policy key {key!r} ({type(key).__name__}) has no JSON form")


@dataclass
class KeyedPolicy:
    """Best candidate per key on its fit; unseen keys and ties go to the global candidate."""

    name: str = "global"
    deployable: bool = True
    table: dict = field(default_factory=dict)
    fallback: int = 0
    candidates: tuple[str, ...] = ()
    regret = False  # regret-aware: deviate from global only when the gain's lower bound pays for it
    features: ClassVar[tuple[str, ...]] = ()  # what ``key`` reads of a shape

    def key(self, shape: Mapping) -> Hashable:
        return None  # global: one key for every shape

    def keys(self, features) -> list:
        return [self.key(s) for s in rows_of(features)]

    def prepare(self, features) -> KeyedPolicy:
        """Whatever the keys need from the fit's shapes alone (clustered: its k-means)."""
        return self

    def fit(self, train) -> KeyedPolicy:
        """Fitted on a ``headroom.policies.fit.Train`` (see ``fit.fit_table``)."""
        from headroom.policies import fit

        return fit.fit_table(self, train)

    def choose(self, features) -> np.ndarray:
        get, fb = self.table.get, self.fallback
        return np.array([get(k, fb) for k in self.keys(features)], dtype=np.int64)

    def lookup(self, shape: Mapping) -> str:
        return self.candidates[self.table.get(self.key(shape), self.fallback)]

    def to_dict(self) -> dict:
        """The fitted policy as plain data (``from_dict`` reads it back to the same choices)."""
        return {
            "policy": self.name,
            "features": list(self.features),
            "candidates": list(self.candidates),
            "fallback": int(self.fallback),
            "table": [[_plain_key(k), int(v)] for k, v in self.table.items()],
        }

    def _load(self, data: Mapping) -> KeyedPolicy:
        self.candidates = tuple(str(c) for c in data["candidates"])
        self.fallback = int(data["fallback"])
        self.table = {k: int(v) for k, v in data["table"]}
        return self


class _OneColumn(KeyedPolicy):
    """Keyed on one column of the shape, its value as the key (``key`` reads it by name: it is the
    lookup the lifecycle times)."""

    def keys(self, features):
        (column,) = self.features
        return features[column].astype(str).tolist()


class PhaseKeyed(_OneColumn):
    """One candidate per phase (prefill, decode): the obvious two-kernel rule."""

    features = ("phase",)

    def key(self, shape):
        return shape["phase"]


class ExactKey(_OneColumn):
    """One candidate per exact shape_key seen in its fit."""

    features = ("shape_key",)

    def key(self, shape):
        return shape["shape_key"]


class Bucketed(KeyedPolicy):
    """One candidate per bucket: phase and power-of-two ceilings of q_len, kv_len, batch."""

    features = ("phase", "q_len", "kv_len", "batch")

    def key(self, shape):
        return bucket_label(shape)


class RegretAware(ExactKey):
    """Deviate from global for a key only when the lower confidence bound of its per-invocation gain
    exceeds the cost of deviating (dispatch lookup + a switch, charged on every invocation).

    gain d_i = t_global,i - t_best,i over the key's train invocations; its standard error combines
    the timing noise of each median (sem2 of both candidates) and the spread of d across the key's
    invocations (std(d)/sqrt(n), when n >= 2); see ``fit.fit_keyed``."""

    regret = True


class BatchKeyed(KeyedPolicy):
    """One candidate per (phase, padded batch size): keyed only on what is fixed when a CUDA Graph is
    captured, so a graph-mode server can bake the choice into each captured graph."""

    features = ("phase", "batch")

    def key(self, shape):
        return f"{shape['phase']}|b{padded_batch(int(shape['batch']))}"

    def keys(self, features):
        pad = [padded_batch(int(b)) for b in features["batch"]]
        return [f"{p}|b{b}" for p, b in zip(features["phase"].astype(str), pad, strict=True)]


class Clustered(KeyedPolicy):
    """k-means on standardized log2 shape features (its fit's shapes); one candidate per cluster; a
    shape's key is its nearest centroid (nearest-centroid in plain Python and numpy)."""

    mean: np.ndarray
    std: np.ndarray
    centroids: np.ndarray
    clusters: int = 4
    seed: int = 0
    features = (*CLUSTER_FEATURES, "phase")

    def prepare(self, features) -> Clustered:
        from headroom.policies import fit

        return fit.prepare_clusters(self, features)

    def set_centroids(self, mean, std, centroids) -> Clustered:
        self.mean, self.std = np.asarray(mean, float), np.asarray(std, float)
        self.centroids = np.asarray(centroids, float)
        self._plain = (self.mean.tolist(), self.std.tolist(), self.centroids.tolist())
        return self

    def fit(self, train) -> Clustered:
        self.clusters, self.seed = train.clusters, train.seed
        return super().fit(train)

    @property
    def k(self) -> int:
        return len(self.centroids)

    def key(self, shape):
        # plain Python on one shape: numpy's per-call overhead would be most of a serving lookup's cost
        mean, std, centroids = self._plain
        z = [(x - m) / d for x, m, d in zip(cluster_vector(shape), mean, std, strict=True)]
        best, best_d = 0, math.inf
        for i, c in enumerate(centroids):
            dist = sum((a - b) * (a - b) for a, b in zip(z, c, strict=True))
            if dist < best_d:
                best, best_d = i, dist
        return best

    def keys(self, features):
        z = (np.array([cluster_vector(s) for s in rows_of(features)]) - self.mean) / self.std
        return np.argmin(((z[:, None, :] - self.centroids[None]) ** 2).sum(axis=2), axis=1).tolist()

    def to_dict(self) -> dict:
        mean, std, centroids = self._plain
        return {**super().to_dict(), "mean": mean, "std": std, "centroids": centroids, "seed": self.seed}

    def _load(self, data: Mapping) -> Clustered:
        self.seed = int(data.get("seed", 0))
        self.set_centroids(data["mean"], data["std"], data["centroids"])
        self.clusters = self.k
        return super()._load(data)


@dataclass
class Random:
    """A seeded uniformly random candidate per call: the baseline any adaptive policy must beat."""

    name: str = "random"
    deployable: bool = True
    candidates: tuple[str, ...] = ()
    seed: int = 0
    features = ()

    def fit(self, train) -> Random:
        self.candidates = tuple(train.candidates)
        self._rng = random.Random(self.seed)  # a serving-time draw: Python's, cheaper per call than numpy's
        return self

    def draws(self, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, len(self.candidates), size=(draws, n))

    def lookup(self, shape: Mapping) -> str:
        return self.candidates[self._rng.randrange(len(self.candidates))]

    def to_dict(self) -> dict:
        return {"policy": self.name, "features": [], "candidates": list(self.candidates), "seed": self.seed}

    def _load(self, data: Mapping) -> Random:
        self.candidates, self.seed = tuple(str(c) for c in data["candidates"]), int(data.get("seed", 0))
        self._rng = random.Random(self.seed)
        return self


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


def make(name: str):
    """An unfitted policy by name (see ``REGISTRY``)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name](name=name)


def from_dict(data: Mapping):
    """A fitted policy from ``to_dict``'s data; ValueError naming what is missing or wrong."""
    if not isinstance(data, Mapping) or "policy" not in data:
        raise ValueError(f"a policy's data must be a mapping with a 'policy' name, got {data!r:.80}")
    need = ("candidates",) if data["policy"] == "random" else ("candidates", "fallback", "table")
    if data["policy"] == "clustered":
        need += ("mean", "std", "centroids")
    missing = [k for k in need if k not in data]
    if missing:
        raise ValueError(f"policy {data['policy']!r}: missing {missing}")
    policy = make(str(data["policy"]))._load(data)
    if not policy.candidates:
        raise ValueError(f"policy {data['policy']!r}: no candidates")
    bad = [v for v in [getattr(policy, "fallback", 0), *getattr(policy, "table", {}).values()]
           if not 0 <= v < len(policy.candidates)]  # fmt: skip
    if bad:
        raise ValueError(f"policy {data['policy']!r}: candidate index {bad[0]} out of range")
    return policy
