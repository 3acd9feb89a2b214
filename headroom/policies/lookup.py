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
from functools import cached_property

import numpy as np

from headroom.core.names import CATEGORY_KEYED, CONFIG_TABLE
from headroom.policies.shapes import CAPTURE_SIZES, Keying, builtin, nearest, padded, rows_of  # noqa: F401


def bucket_label(shape: Mapping, keying: Keying | None = None) -> str:
    """A shape's bucket: its category values and the power-of-two ceilings of its numeric features
    (``keying``: the family's keys; None: the built-in family's)."""
    return (keying or builtin()).bucket(shape)


def padded_batch(batch: int) -> int:
    """The captured batch size a batch of ``batch`` replays (itself above the largest capture size)."""
    return padded(batch, CAPTURE_SIZES)


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
    keying: Keying = field(default_factory=builtin, repr=False)  # the family's keys (policies.shapes)
    regret = False  # regret-aware: deviate from global only when the gain's lower bound pays for it

    @property
    def features(self) -> tuple[str, ...]:
        """What ``key`` reads of a shape."""
        return ()

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
        """The fitted policy as plain data (``from_dict`` reads it back to the same choices); a
        family's keying other than the built-in family's is written with it."""
        return {
            "policy": self.name,
            "features": list(self.features),
            "candidates": list(self.candidates),
            "fallback": int(self.fallback),
            "table": [[_plain_key(k), int(v)] for k, v in self.table.items()],
            **_keying_dict(self.keying),
        }

    def _load(self, data: Mapping) -> KeyedPolicy:
        self.candidates = tuple(str(c) for c in data["candidates"])
        self.fallback = int(data["fallback"])
        self.table = {k: int(v) for k, v in data["table"]}
        return self


class CategoryKeyed(KeyedPolicy):
    """One candidate per category key (attention: one kernel for prefill and one for decode, the
    obvious two-kernel rule); a family without category features has one key, as global."""

    @property
    def features(self):
        return self.keying.categories

    def key(self, shape):
        return self.keying.category(shape)

    def keys(self, features):
        return self.keying.category_keys(features)


class ExactKey(KeyedPolicy):
    """One candidate per exact shape_key seen in its fit."""

    @property
    def features(self):
        return ("shape_key",)

    def key(self, shape):
        return shape["shape_key"]

    def keys(self, features):
        return features["shape_key"].astype(str).tolist()


class Bucketed(KeyedPolicy):
    """One candidate per bucket: category values and power-of-two ceilings of the numeric features
    (attention: its prefill or decode, then its new tokens, context length and batch)."""

    @property
    def features(self):
        return (*self.keying.categories, *(f for f, _ in self.keying.numeric))

    def key(self, shape):
        return self.keying.bucket(shape)


class RegretAware(ExactKey):
    """Deviate from global for a key only when the lower confidence bound of its per-invocation gain
    exceeds the cost of deviating (dispatch lookup + a switch, charged on every invocation).

    gain d_i = t_global,i - t_best,i over the key's train invocations; its standard error combines
    the timing noise of each median (sem2 of both candidates) and the spread of d across the key's
    invocations (std(d)/sqrt(n), when n >= 2); see ``fit.fit_keyed``."""

    regret = True


class BatchKeyed(KeyedPolicy):
    """One candidate per category key and padded capture-fixed features (attention: per prefill or
    decode and padded batch size): keyed only on what is fixed when a CUDA Graph is captured, so a graph-mode
    server can bake the choice into each captured graph."""

    @property
    def features(self):
        return (*self.keying.categories, *(f for f, _, _ in self.keying.capture))

    def key(self, shape):
        return self.keying.captured(shape)

    def keys(self, features):
        k = self.keying
        cols = [features[c].astype(str).tolist() for c in k.categories]
        for f, label, sizes in k.capture:
            cols.append([f"{label}{padded(int(v), sizes)}" for v in features[f]])
        if not cols:
            return [""] * len(features)
        return ["|".join(v) for v in zip(*cols, strict=True)]


class Clustered(KeyedPolicy):
    """k-means on standardized log2 shape features (its fit's shapes); one candidate per cluster; a
    shape's key is its nearest centroid (nearest-centroid in plain Python and numpy)."""

    mean: np.ndarray
    std: np.ndarray
    centroids: np.ndarray
    clusters: int = 4
    seed: int = 0

    @property
    def features(self):
        return (*self.keying.cluster, *(f for f, _ in self.keying.flags))

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
        z = [(x - m) / d for x, m, d in zip(self.keying.vector(shape), mean, std, strict=True)]
        best, best_d = 0, math.inf
        for i, c in enumerate(centroids):
            dist = sum((a - b) * (a - b) for a, b in zip(z, c, strict=True))
            if dist < best_d:
                best, best_d = i, dist
        return best

    def keys(self, features):
        z = (np.array([self.keying.vector(s) for s in rows_of(features)]) - self.mean) / self.std
        return np.argmin(((z[:, None, :] - self.centroids[None]) ** 2).sum(axis=2), axis=1).tolist()

    def to_dict(self) -> dict:
        mean, std, centroids = self._plain
        return {**super().to_dict(), "mean": mean, "std": std, "centroids": centroids, "seed": self.seed}

    def _load(self, data: Mapping) -> Clustered:
        self.seed = int(data.get("seed", 0))
        self.set_centroids(data["mean"], data["std"], data["centroids"])
        self.clusters = self.k
        return super()._load(data)


class ConfigTablePolicy(KeyedPolicy):
    """A user's per-M config table (``Keying.table``, a family's ``config_table``), looked up by the
    nearest key as servers look it up (``shapes.nearest``). Its choices are fixed: its fit reads the
    train candidates, not their latencies; a config absent from them (dropped by the correctness
    gate, not timed) goes to the global candidate, and ``missing`` names those."""

    missing: tuple[str, ...] = ()

    @cached_property
    def _ms(self) -> list[int]:
        return [m for m, _ in self.keying.table]

    @property
    def features(self):
        return (self.keying.table_feature,)

    def key(self, shape):
        return nearest(self._ms, int(shape[self.keying.table_feature]))

    def keys(self, features):
        ms = self._ms
        return [nearest(ms, int(v)) for v in features[self.keying.table_feature]]

    def fit(self, train) -> ConfigTablePolicy:
        from headroom.policies import fit

        return fit.fit_config_table(self, train)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "missing": list(self.missing)}

    def _load(self, data: Mapping) -> ConfigTablePolicy:
        self.missing = tuple(str(c) for c in data.get("missing", ()))
        return super()._load(data)


@dataclass
class Random:
    """A seeded uniformly random candidate per call: the baseline any adaptive policy must beat."""

    name: str = "random"
    deployable: bool = True
    candidates: tuple[str, ...] = ()
    seed: int = 0
    keying: Keying = field(default_factory=builtin, repr=False)
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
    CATEGORY_KEYED: CategoryKeyed,
    "exact-key": ExactKey,
    "bucketed": Bucketed,
    "clustered": Clustered,
    "regret-aware": RegretAware,
    "batch-keyed": BatchKeyed,
    "random": Random,
}


def table_policies(keying: Keying) -> tuple[str, ...]:
    """The policies of a family's config table (``CONFIG_TABLE`` where ``keying`` has one): scored
    beside ``REGISTRY``'s, not among them, so a study without a table scores what it always did."""
    return (CONFIG_TABLE,) if keying.table else ()


def make(name: str, keying: Keying | None = None):
    """An unfitted policy by name (see ``REGISTRY``; ``CONFIG_TABLE`` for a ``keying`` with a table),
    keyed by a family's ``keying`` (None: the built-in family's)."""
    if name == CONFIG_TABLE:
        if keying is None or not keying.table:
            raise ValueError(f"policy {CONFIG_TABLE!r} needs a keying with a config table (Keying.table)")
        return ConfigTablePolicy(name=name, keying=keying)
    if name not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known: {sorted(REGISTRY)}")
    return REGISTRY[name](name=name, keying=keying or builtin())


def _keying_dict(keying: Keying) -> dict:
    """A policy's ``keying`` entry: written only for a family other than the built-in one, so the
    built-in family's tables are as they were."""
    return {} if keying == builtin() else {"keying": keying.to_dict()}


def from_dict(data: Mapping):
    """A fitted policy from ``to_dict``'s data; ValueError naming what is missing or wrong."""
    if not isinstance(data, Mapping) or "policy" not in data:
        raise ValueError(f"a policy's data must be a mapping with a 'policy' name, got {data!r:.80}")
    need = ("candidates",) if data["policy"] == "random" else ("candidates", "fallback", "table")
    if data["policy"] == "clustered":
        need += ("mean", "std", "centroids")
    if data["policy"] == CONFIG_TABLE:
        need += ("keying",)
    missing = [k for k in need if k not in data]
    if missing:
        raise ValueError(f"policy {data['policy']!r}: missing {missing}")
    try:
        keying = Keying.from_dict(data["keying"]) if "keying" in data else builtin()
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"policy {data['policy']!r}: keying: {exc}") from None
    policy = make(str(data["policy"]), keying)._load(data)
    if not policy.candidates:
        raise ValueError(f"policy {data['policy']!r}: no candidates")
    bad = [v for v in [getattr(policy, "fallback", 0), *getattr(policy, "table", {}).values()]
           if not 0 <= v < len(policy.candidates)]  # fmt: skip
    if bad:
        raise ValueError(f"policy {data['policy']!r}: candidate index {bad[0]} out of range")
    return policy
