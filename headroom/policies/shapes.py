"""What a policy reads of a shape, for the lookup and the fit alike (the floor under both): the
rows of a features table, and a family's ``Keying``: which of its declared features the keyed
policies key on, and how.

A family declares its features (``headroom.families.Feature``): category features key the
category-keyed policy (``headroom.core.names.CATEGORY_KEYED``), capture-fixed int features padded to
their capture sizes key the capture-keyed policy (``batch-keyed``), and the numeric features are
bucketed by powers of two (``bucketed``) and placed by k-means on their log2 (``clustered``).
``builtin()`` is the built-in attention family's keying (headroom.families.attention.keying): the
keys every recorded attention study was fitted with, and those of a policy table that records none.
A family with a per-M config table (``headroom.families.tables.ConfigTable``) carries its entries in
``Keying.table``: the config-table policy looks them up by the nearest key (``nearest``). A family
captured by a feature (its optional member ``captured_by``) carries it in ``Keying.captured_by``: the
deployment profile splits its calls by that feature's capture limit (``Keying.capture_limit``), not
by step kind (``headroom.decide.measured.part_of``).
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# vLLM's default CUDA Graph capture sizes: a decode batch runs the graph of the smallest size >= it.
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))


def rows_of(features) -> list[dict]:
    """The rows of a features table (a DataFrame) as mappings."""
    return features.to_dict("records")


def pow2(x: float) -> int:
    """The power-of-two ceiling of ``x`` (at least 1)."""
    return 1 << (max(int(math.ceil(x)), 1) - 1).bit_length()


def padded(value: int, sizes: tuple[int, ...] | None) -> int:
    """The capture size a value of ``value`` replays (itself above the largest, or without sizes)."""
    if not sizes:
        return int(value)
    return next((c for c in sizes if c >= value), int(value))


def nearest(keys: Sequence[int], value: int) -> int:
    """The key of ``keys`` (ascending ints) nearest to ``value``, a tie going to the smaller, as vLLM
    looks a config up (``min(keys, key=lambda k: abs(k - M))`` over ascending keys)."""
    i = bisect_left(keys, value)
    if i == 0:
        return keys[0]
    if i == len(keys):
        return keys[-1]
    below, above = keys[i - 1], keys[i]
    return below if value - below <= above - value else above


@dataclass(frozen=True)
class Keying:
    """A family's keys. categories: its category features, in declared order; numeric: (feature,
    label) of its int and float features, in the order the bucket label spells them; capture:
    (feature, label, pad sizes) of its capture-fixed int features; cluster: the features the k-means
    sees as log2 (at least 1); flags: (feature, value) pairs it sees as 1.0/0.0; order: the category
    key's codes in a fixed order (None: sorted); table: a config table's (key, candidate id)
    entries, ascending, keyed on the int feature ``table_feature`` (none: the family has no table);
    captured_by: the capture-fixed int feature whose largest capture size (``capture_limit``) decides
    whether a deployed call replays a CUDA graph (None: the family declares none)."""

    categories: tuple[str, ...] = ()
    numeric: tuple[tuple[str, str], ...] = ()
    capture: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    cluster: tuple[str, ...] = ()
    flags: tuple[tuple[str, str], ...] = ()
    order: tuple[str, ...] | None = None
    table: tuple[tuple[int, str], ...] = ()
    table_feature: str | None = None
    captured_by: str | None = None

    def __post_init__(self):
        if self.captured_by is not None and not self._capture_sizes():
            raise ValueError(
                f"captured_by {self.captured_by!r:.60} must name a capture-fixed int feature with pad_to; "
                f"those here: {[f for f, _, sizes in self.capture if sizes]}"
            )

    def _capture_sizes(self) -> tuple[int, ...]:
        return next((sizes for f, _, sizes in self.capture if f == self.captured_by), ())

    @property
    def capture_limit(self) -> int | None:
        """The largest capture size of ``captured_by`` (None without it): a call whose value is at
        most this replays a CUDA graph when deployed, a larger one runs eager."""
        return max(self._capture_sizes()) if self.captured_by is not None else None

    def category(self, shape: Mapping) -> str | None:
        """The category key ("|"-joined category values; None for a family without categories)."""
        if not self.categories:
            return None
        return "|".join(str(shape[c]) for c in self.categories)

    def bucket(self, shape: Mapping) -> str:
        """Category values, then the power-of-two ceiling of each numeric feature."""
        parts = [str(shape[c]) for c in self.categories]
        return "|".join(parts + [f"{label}{pow2(shape[f])}" for f, label in self.numeric])

    def captured(self, shape: Mapping) -> str:
        """Category values, then each capture-fixed feature padded to its capture size."""
        parts = [str(shape[c]) for c in self.categories]
        return "|".join(
            parts + [f"{label}{padded(int(shape[f]), sizes)}" for f, label, sizes in self.capture]
        )

    def vector(self, shape: Mapping) -> list[float]:
        """The k-means vector: log2 of each cluster feature (at least 1), then each flag as 1.0/0.0."""
        x = [math.log2(max(float(shape[c]), 1.0)) for c in self.cluster]
        return x + [float(str(shape[f]) == v) for f, v in self.flags]

    def category_keys(self, features) -> list:
        """The category key of every row of a features table (None each without categories)."""
        if not self.categories:
            return [None] * len(features)
        cols = [features[c].astype(str).tolist() for c in self.categories]
        return cols[0] if len(cols) == 1 else ["|".join(v) for v in zip(*cols, strict=True)]

    def category_codes(self, features) -> np.ndarray:
        """(n,) a code per row's category key: its place in ``order`` (attention: decode 0, prefill
        1), else in the sorted keys of the table; 0 each without categories."""
        keys = self.category_keys(features)
        order = list(self.order) if self.order is not None else sorted({k for k in keys if k is not None})
        unknown = sorted({k for k in keys if k is not None} - set(order))
        if unknown:
            raise ValueError(f"category key(s) {unknown} are not among {order}")
        return np.array([0 if k is None else order.index(k) for k in keys], dtype=np.int64)

    @property
    def dim(self) -> int:
        return len(self.cluster) + len(self.flags)

    def to_dict(self) -> dict:
        """Plain JSON-able data (``from_dict`` reads it back)."""
        return {
            "categories": list(self.categories),
            "numeric": [list(n) for n in self.numeric],
            "capture": [[f, label, list(sizes)] for f, label, sizes in self.capture],
            "cluster": list(self.cluster),
            "flags": [list(f) for f in self.flags],
            "order": None if self.order is None else list(self.order),
            **self._table_dict(),
            **({} if self.captured_by is None else {"captured_by": self.captured_by}),
        }

    def _table_dict(self) -> dict:
        """The config table's entries and feature: written only when set, so a keying without one
        is written as it always was."""
        if not self.table:
            return {}
        return {"table": [[m, c] for m, c in self.table], "table_feature": self.table_feature}

    @classmethod
    def from_dict(cls, data: Mapping) -> Keying:
        return cls(
            categories=tuple(str(c) for c in data.get("categories", ())),
            numeric=tuple((str(f), str(label)) for f, label in data.get("numeric", ())),
            capture=tuple(
                (str(f), str(label), tuple(int(s) for s in sizes))
                for f, label, sizes in data.get("capture", ())
            ),
            cluster=tuple(str(c) for c in data.get("cluster", ())),
            flags=tuple((str(f), str(v)) for f, v in data.get("flags", ())),
            order=None if data.get("order") is None else tuple(str(o) for o in data["order"]),
            table=tuple((int(m), str(c)) for m, c in data.get("table", ())),
            table_feature=None if data.get("table_feature") is None else str(data["table_feature"]),
            captured_by=None if data.get("captured_by") is None else str(data["captured_by"]),
        )

    @classmethod
    def of_features(cls, features: Mapping) -> Keying:
        """The keying of a family's declared features ({name: Feature or its dict}): categories and
        numeric features in declared order, labelled ``name=``; capture-fixed int features padded to
        their ``pad_to`` (exact without it); every numeric feature clustered."""
        spec = {name: f if isinstance(f, Mapping) else vars(f) for name, f in features.items()}
        numeric = tuple((n, f"{n}=") for n, f in spec.items() if f["kind"] != "category")
        return cls(
            categories=tuple(n for n, f in spec.items() if f["kind"] == "category"),
            numeric=numeric,
            capture=tuple(
                (n, f"{n}=", tuple(f.get("pad_to") or ()))
                for n, f in spec.items()
                if f["kind"] == "int" and f.get("capture_fixed")
            ),
            cluster=tuple(n for n, _ in numeric),
        )

    @classmethod
    def of_record(cls, record: Mapping | None) -> Keying:
        """The keying of a study's family from what its artifacts record of it (provenance
        ``family``: name, declared ``features``, its ``config_table`` and ``captured_by`` where it
        has them); the built-in family's for it or no record. ValueError (one line naming the
        family) for a ``captured_by`` that names no capture-fixed int feature with ``pad_to``."""
        if not record or record.get("name", "attention") == "attention":
            return builtin()
        if not isinstance(record.get("features"), Mapping):
            raise ValueError(f"family {record.get('name')!r}: its artifacts do not record its features")
        features = record["features"]
        order = record.get("feature_order") or list(features)  # provenance JSON sorts its keys
        keying = cls.of_features({name: features[name] for name in order})
        captured = record.get("captured_by")
        if captured is not None:
            try:
                keying = dataclasses.replace(keying, captured_by=str(captured))
            except ValueError as exc:
                raise ValueError(f"family {record.get('name')!r}: its record's {exc}") from None
        table = record.get("config_table")
        if not table:
            return keying
        entries = tuple((int(m), str(c)) for m, c in table["entries"])
        return dataclasses.replace(keying, table=entries, table_feature=str(table["feature"]))


def builtin() -> Keying:
    """The built-in attention family's keying (headroom.families.attention.keying.ATTENTION),
    imported on first use: the policies never import a family's package when they are imported."""
    from headroom.families.attention.keying import ATTENTION

    return ATTENTION
