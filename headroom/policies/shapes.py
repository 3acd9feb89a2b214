"""What a policy reads of a shape, for the lookup and the fit alike (the floor under both): the
rows of a features table, and the log2 vector the k-means of `clustered` places a shape by."""

from __future__ import annotations

import math
from collections.abc import Mapping

# Features the k-means of `clustered` sees, log2-scaled (phase enters as 0/1).
CLUSTER_FEATURES = ("batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim")


def rows_of(features) -> list[dict]:
    """The rows of a features table (a DataFrame) as mappings."""
    return features.to_dict("records")


def cluster_vector(shape: Mapping) -> list[float]:
    """log2 of each CLUSTER_FEATURES value (at least 1), then 1.0 for a prefill, 0.0 otherwise."""
    x = [math.log2(max(float(shape[c]), 1.0)) for c in CLUSTER_FEATURES]
    return x + [float(str(shape["phase"]) == "prefill")]
