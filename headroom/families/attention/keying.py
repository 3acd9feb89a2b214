"""Attention's keys: what its policies read of an invocation's shape (``headroom.policies.shapes.Keying``).

``ATTENTION`` is the keying every recorded attention study was fitted with: its category is the phase
(decode 0, prefill 1); q_len, kv_len and batch are bucketed as q, kv, b; the padded batch is what a
CUDA graph fixes at capture; the k-means of ``clustered`` sees log2 of the shape and the prefill flag.
A policy table written without a keying is attention's (``headroom.policies.shapes.builtin``).
"""

from __future__ import annotations

from headroom.policies.shapes import CAPTURE_SIZES, Keying

ATTENTION = Keying(
    categories=("phase",),
    numeric=(("q_len", "q"), ("kv_len", "kv"), ("batch", "b")),
    capture=(("batch", "b", CAPTURE_SIZES),),
    cluster=("batch", "q_len", "kv_len", "heads_q", "heads_kv", "head_dim"),
    flags=(("phase", "prefill"),),
    order=("decode", "prefill"),
)
#: Features the k-means of `clustered` sees for attention, log2-scaled (the phase enters as 0/1).
CLUSTER_FEATURES = ATTENTION.cluster
