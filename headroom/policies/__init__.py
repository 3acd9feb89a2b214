"""Dispatch policies as a floor under ``measure`` and ``analysis``: the one lookup implementation.

``lookup`` holds the fitted policies as data (exact keys, buckets, padded batches or centroids, the
candidates, the fallback for unseen shapes), their per-shape ``lookup`` and per-table ``choose``, and
their plain-dict form (``to_dict`` / ``from_dict``); it imports numpy only. ``fit`` fits them (pandas,
scikit-learn's k-means), imported only when a policy is fitted; both read shapes through ``shapes``
(rows of a features table, the k-means vector), so neither imports the other at import. The decision engine
(``headroom.analysis``) fits through ``fit``, the lifecycle stage times ``lookup`` of fitted policies,
and ``headroom.dispatch`` loads the exported table into the same objects.
"""

from headroom.policies.lookup import (
    CAPTURE_SIZES,
    REGISTRY,
    BatchKeyed,
    Bucketed,
    CategoryKeyed,
    Clustered,
    ConfigTablePolicy,
    ExactKey,
    KeyedPolicy,
    Keying,
    Random,
    RegretAware,
    bucket_label,
    from_dict,
    make,
    padded_batch,
    rows_of,
    table_policies,
)

__all__ = [
    "CAPTURE_SIZES",
    "REGISTRY",
    "BatchKeyed",
    "Bucketed",
    "CategoryKeyed",
    "Clustered",
    "ConfigTablePolicy",
    "ExactKey",
    "KeyedPolicy",
    "Keying",
    "Random",
    "RegretAware",
    "bucket_label",
    "from_dict",
    "make",
    "padded_batch",
    "rows_of",
    "table_policies",
]
